"""The MicroPython source on the host, and micropython-lib's packages from it.

The source is a tree or its release tarball (``--micropython``, default the
EDGEBUS_MICROPYTHON environment variable); a tarball is unpacked once into the
cache. A board manifest's ``"require"`` names micropython-lib packages
(``ntptime``): ``resolve`` reads each package's manifest.py with MicroPython's
own manifest code (the tree's tools/manifestfile.py, as ``make`` and ``mip``
read them), so ``edgebus build`` and the fleet put on a device the same files a
firmware build freezes with ``require()``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tarfile
from typing import Any, Callable

ENV_SOURCE = "EDGEBUS_MICROPYTHON"
SOURCE_HELP = (
    "MicroPython source tree or release tarball, for the micropython-lib packages "
    'the board\'s manifest requires ("require"; default: $%s)' % ENV_SOURCE
)
LIB = os.path.join("lib", "micropython-lib")


class SourceError(Exception):
    """A MicroPython source, package or build the user must fix; the message says how."""


def cache_dir() -> str:
    return os.environ.get("EDGEBUS_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "edgebus"
    )


def _tree_ok(d: str) -> bool:
    return os.path.isfile(os.path.join(d, "py", "mkenv.mk")) and os.path.isdir(
        os.path.join(d, "mpy-cross")
    )


def source_tree(src: str | None, log: Callable[[str], None] = print) -> tuple[str, str]:
    """(tree directory, identity for the cache key) for a tree or a tarball."""
    src = src or os.environ.get(ENV_SOURCE)
    if not src:
        raise SourceError(
            "no MicroPython source: pass --micropython DIR (a source tree or "
            "a release tarball such as micropython-1.28.0.tar.xz) or set %s" % ENV_SOURCE
        )
    if os.path.isdir(src):
        if not _tree_ok(src):
            raise SourceError(
                "--micropython %s: not a MicroPython source tree (no py/mkenv.mk "
                "or mpy-cross/)" % src
            )
        return os.path.abspath(src), "tree:" + os.path.abspath(src)
    if not os.path.isfile(src):
        raise SourceError("--micropython %s: no such file or directory" % src)
    h = hashlib.sha256()
    with open(src, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()[:16]
    dest = os.path.join(cache_dir(), "micropython", digest)
    if not os.path.isdir(dest):
        log("unpacking %s into %s" % (src, dest))
        tmp = dest + ".tmp%d" % os.getpid()
        try:
            with tarfile.open(src) as t:
                t.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError) as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise SourceError("--micropython %s: cannot unpack: %s" % (src, e)) from None
        tops = os.listdir(tmp)
        root = os.path.join(tmp, tops[0]) if len(tops) == 1 else tmp
        if not _tree_ok(root):
            shutil.rmtree(tmp, ignore_errors=True)
            raise SourceError(
                "--micropython %s: the tarball holds no MicroPython source tree" % src
            )
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            os.rename(root, dest)
        except OSError:  # another build unpacked it meanwhile
            pass
        shutil.rmtree(tmp, ignore_errors=True)
    return dest, "tarball:" + digest


def lib_dir(tree: str) -> str:
    """micropython-lib in the tree (make's MPY_LIB_DIR); SourceError if absent."""
    d = os.path.join(tree, LIB)
    if not os.path.isfile(os.path.join(d, "README.md")):
        raise SourceError(
            "the MicroPython source at %s has no micropython-lib (%s): use a release "
            "tarball or a checkout with its submodule" % (tree, LIB)
        )
    return d


def _manifestfile(tree: str) -> Any:
    path = os.path.join(tree, "tools", "manifestfile.py")
    spec = importlib.util.spec_from_file_location("_mp_manifestfile", path)
    if spec is None or spec.loader is None or not os.path.isfile(path):
        raise SourceError("the MicroPython source at %s has no tools/manifestfile.py" % tree)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def resolve(tree: str, names: list[str]) -> list[tuple[str, str]]:
    """[(absolute .py path, path on the device)] of micropython-lib packages
    ``names`` and what they require, sorted; SourceError naming an unknown one."""
    mf = _manifestfile(tree)
    m = mf.ManifestFile(
        mf.MODE_COMPILE,
        {"MPY_DIR": tree, "MPY_LIB_DIR": lib_dir(tree), "PORT_DIR": None, "BOARD_DIR": None},
    )
    # A manifest of ours that requires them (metadata() first, as compile mode wants).
    code = "metadata(version='0')\n" + "".join("require(%r)\n" % n for n in names)
    try:
        m.execute(code)
    except mf.ManifestFileError as e:
        raise SourceError("%s (micropython-lib at %s)" % (e, lib_dir(tree))) from None
    return sorted((r.full_path, r.target_path) for r in m.files())


def sources(
    board: dict[str, Any], src: str | None, log: Callable[[str], None] = print
) -> list[tuple[str, str]]:
    """The files of board's "require" packages (none: [], no source needed;
    none either, with a note, when no source is given at all),
    where mip puts them on a board: lib/, after .frozen on sys.path, so a
    firmware that freezes the package (the stock images' bundle-networking
    has ntptime) runs its copy, which takes no heap. On the unix port, whose
    sys.path has no lib/ of the working directory, at the bundle's root."""
    names = board.get("require") or []
    if not names:
        return []
    if not (src or os.environ.get(ENV_SOURCE)):
        # Only the time step needs them (ntptime): a bundle without them runs,
        # and that step says what is missing at its start.
        log(
            "note: board %s requires micropython-lib packages (%s), left out: no MicroPython "
            "source (--micropython SRC or $%s); or on the device: mpremote mip install %s"
            % (board["name"], ", ".join(names), ENV_SOURCE, " ".join(names))
        )
        return []
    try:
        tree = source_tree(src, log)[0]
    except SourceError as e:
        raise SourceError(
            "board %s requires micropython-lib packages (%s): %s"
            % (board["name"], ", ".join(names), e)
        ) from None
    lib = "lib/" if (board.get("device") or {}).get("root") == "/" else ""
    return [(p, lib + rel) for p, rel in resolve(tree, names)]
