"""edgebus build --board B: compile edgebus/ (+ firmware/) into a bundle for a board.

The bundle directory (default ``build/<board>/``) holds the compiled modules
(``.mpy``; ``.py`` sources for the CPython board ``linux-edge``), a
mip-compatible ``package.json`` (so ``mpremote mip install build/<board>/package.json``
or ``mip.install("http://host/.../package.json")`` installs it) and
``bundle.json`` (board, .mpy version, sizes) that ``edgebus deploy`` checks,
``board.json``, the part of the board's manifest the device runtime runs
(queues, spool, heap budget; installed with the rest), and ``manifest.py``, a
MicroPython freeze manifest of the same sources: built into the firmware
(``make BOARD=... FROZEN_MANIFEST=<bundle>/manifest.py`` in the port's directory)
the modules run from flash and their code takes no heap. The micropython-lib packages
the board's manifest requires come from a MicroPython source (tools/boardkit/mpylib.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

from edgebus import tlog
from edgebus.tools.boardkit import (
    boards,
    devicefiles,
    mpybuild,
    mpylib,
    mpyversion,
    otamanifest,
)

if TYPE_CHECKING:
    import argparse

SKIP_DIRS = ("__pycache__",)
# What a board's bundle leaves out of the default sources: the core's CPython-
# only and test-only modules, and the simulators (firmware/*sim.py) of what a
# board has itself (WiFi, watchdog, deep sleep, RTC). On littlefs each file
# takes whole 4 KB blocks; the unix port and CPython keep them all.
HOST_ONLY = ("edgebus/compat_cpython.py", "edgebus/link/pipe.py")


def for_board(board: dict[str, Any], srcs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """srcs (collect's) without what board's bundle leaves out (HOST_ONLY, simulators)."""
    if board["runtime"] == "cpython" or board["firmware"]["port"] == "unix":
        return srcs
    return [
        (p, rel)
        for p, rel in srcs
        if rel not in HOST_ONLY and not (rel.startswith("firmware/") and rel.endswith("sim.py"))
    ]


class BuildError(Exception):
    """A problem the user must fix; the message says how."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--board",
        required=True,
        metavar="B",
        help="board name (boards/<B>.json) or a manifest path; known: "
        + ", ".join(boards.list_boards()),
    )
    p.add_argument("--out", metavar="DIR", help="bundle directory (default: build/<board>)")
    p.add_argument(
        "--version",
        metavar="V",
        help="the bundle's version, as devices report it after an update (default: "
        "edgebus's version + the first 8 hex digits of the modules' hash)",
    )
    p.add_argument(
        "--src",
        action="append",
        metavar="PKG",
        help="a package directory or .py module to bundle, repeatable "
        "(default: edgebus, and firmware when it has .py files)",
    )
    p.add_argument(
        "--entry",
        metavar="MODULE",
        help="module a board's main.py imports at boot (default: firmware.loader, which "
        "chooses the bundle an update installed, when firmware/loader.py exists; "
        "'none' for no main.py)",
    )
    p.add_argument(
        "--micropython",
        metavar="SRC",
        help=mpylib.SOURCE_HELP,
    )
    p.add_argument(
        "--opt",
        type=int,
        default=0,
        choices=range(4),
        help="mpy-cross optimisation level -O (default 0)",
    )
    p.add_argument(
        "--bytecode",
        action="store_true",
        help="no native code, even where the board has an mpy arch: for a firmware built "
        "without the native emitter, or to save RAM (the core's native functions take "
        "~2.3 KB more than their bytecode on armv7m when a bundle is loaded from the "
        "filesystem; frozen into the firmware they take flash)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        board = boards.load_board(args.board)
        out = args.out or os.path.join("build", board["name"])
        build(
            board,
            out,
            args.src,
            entry=args.entry,
            opt=args.opt,
            bundle_version=args.version,
            micropython=args.micropython,
            native=not args.bytecode,
        )
    except (boards.BoardError, BuildError, mpyversion.MpyVersionError, mpylib.SourceError) as e:
        print("edgebus build: error: %s" % e, file=sys.stderr)
        return 1
    return 0


# -- sources


def default_sources() -> list[str]:
    """The installed edgebus, plus firmware when it holds .py files (it is optional)."""
    srcs = [devicefiles.CORE_DIR]
    fw = devicefiles.FIRMWARE_DIR
    if any(f.endswith(".py") for _d, _s, fs in os.walk(fw) for f in fs):
        srcs.append(fw)
    return srcs


def collect(sources: list[str]) -> list[tuple[str, str]]:
    """[(absolute .py path, bundle path of the .py)] for packages and modules, sorted."""
    files = {}
    for src in sources:
        src = os.path.abspath(src)
        if os.path.isfile(src) and src.endswith(".py"):
            files[os.path.basename(src)] = src
            continue
        if not os.path.isdir(src):
            raise BuildError("--src %s: not a package directory or a .py file" % src)
        base = os.path.dirname(src)
        for dirpath, dirs, fs in os.walk(src):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
            devicefiles.prune(os.path.relpath(dirpath, base), dirs)
            for f in fs:
                if f.endswith(".py"):
                    p = os.path.join(dirpath, f)
                    files[os.path.relpath(p, base).replace(os.sep, "/")] = p
    if not files:
        raise BuildError("no .py files in %s" % ", ".join(sources))
    return sorted((p, rel) for rel, p in files.items())


def package_version() -> str:
    """edgebus.__version__, read without importing the package."""
    try:
        with open(os.path.join(devicefiles.CORE_DIR, "__init__.py")) as f:
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", f.read(), re.M)
        return m.group(1) if m else "0"
    except OSError:
        return "0"


# -- the bundle


def _fmt(n: int) -> str:
    return "{:,}".format(n)


def allocated(size: int, block: int) -> int:
    """Bytes a file takes on a filesystem with `block`-byte blocks (0: exact)."""
    return size if not block else max(1, -(-size // block)) * block


def _replaceable(out: str) -> bool:
    """A directory we may replace: absent, empty, or a bundle we wrote."""
    return not os.path.exists(out) or (
        os.path.isdir(out)
        and (not os.listdir(out) or os.path.isfile(os.path.join(out, "bundle.json")))
    )


def build(
    board: dict[str, Any],
    out: str,
    sources: list[str] | None = None,
    entry: str | None = None,
    opt: int = 0,
    log: Callable[[str], None] = print,
    bundle_version: str | None = None,
    micropython: str | None = None,
    native: bool = True,
) -> dict[str, Any]:
    """Build board's bundle into out and print the size report; returns the report
    dict. Over the flash budget it raises BuildError and leaves out as it was.
    micropython: the source of the micropython-lib packages the board requires;
    native=False: bytecode only (``@micropython.native`` taken out), which
    loads on any port."""
    if not _replaceable(out):
        raise BuildError(
            "refusing to replace %s: it exists and is not an edgebus bundle "
            "(no bundle.json); choose another --out" % out
        )
    srcs = collect(sources) if sources else for_board(board, collect(default_sources()))
    entry = _entry(board, entry, srcs)
    lib = mpylib.sources(board, micropython, log)
    cpython = board["runtime"] == "cpython"
    arch = None if cpython or not native else board["mpy"]["arch"]
    # (mpy-cross version, (mpy version, sub)) and the board's target, unless cpython
    cross: Any = None
    target: Any = None
    if not cpython:
        cross, target = _toolchain(board, log)
    tmp = _staging_dir(out)
    try:
        done = _compile(tmp, srcs + lib, arch, opt, cpython)
        files = {dest: os.path.getsize(os.path.join(tmp, dest)) for dest, _n in done}
        native = any(n for _d, n in done)
        if not cpython and native:
            _check_native(cross, target)
        _write_boot_files(tmp, board, entry, files)
        rep = _sized(board, files, out, native, entry)
        _report(board, rep, cross, arch, log)
        _check_budget(board, rep)
        # Beside the bundle for edgebus ota push; not installed by deploy or mip.
        ota_manifest(tmp, board, sorted(d for d, _n in done), cross, bundle_version)
        _write_descriptions(tmp, board, rep, cross, arch)
        if not cpython:
            with open(os.path.join(tmp, "manifest.py"), "w") as f:
                f.write(freeze_manifest(board, srcs, opt))
        if os.path.exists(out):
            shutil.rmtree(out)
        tlog.rename_durably(tmp, out)
        tmp = ""
        log("bundle: %s  (or: mpremote mip install %s)" % (out, os.path.join(out, "package.json")))
        return rep
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _toolchain(board: dict[str, Any], log: Callable[[str], None]) -> tuple[Any, Any]:
    """(mpy-cross's version, the .mpy version the board loads), checked to
    match; BuildError when they do not."""
    try:
        cross = mpyversion.cross_version()
        target = mpyversion.target(board, log)
        mpyversion.check(cross, target)
    except mpyversion.MpyVersionError as e:
        raise BuildError(str(e)) from None
    return cross, target


def _check_native(cross: Any, target: Any) -> None:
    """BuildError when native code (@micropython.native/viper) was compiled to
    an .mpy sub-version the board does not load."""
    if target[1] is not None and cross[1][1] != target[1]:
        raise BuildError(
            "mpy sub-version mismatch: the bundle has native code "
            "(@micropython.native/viper) as .mpy v%d.%d but %s loads "
            "v%d.%d" % (cross[1] + (target[2], target[0], target[1]))
        )


def _check_budget(board: dict[str, Any], rep: dict[str, Any]) -> None:
    """BuildError when the bundle takes more of the board's flash than its budget."""
    if not rep["ok"]:
        alloc, budget = rep["allocated"], rep["budget"]
        raise BuildError(
            "the bundle takes %s bytes on flash, over the %s board's budget of %s bytes by "
            "%s (budget.flash in its manifest); nothing was written to %s"
            % (_fmt(alloc), board["name"], _fmt(budget), _fmt(alloc - budget), rep["out"])
        )


def _staging_dir(out: str) -> str:
    """A new directory beside out, where the bundle is made before it replaces
    out in one rename; readable as the umask says (mkdtemp makes it private, a
    bundle is not)."""
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".build-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    return tmp


def _compile(
    tmp: str, items: list[tuple[str, str]], arch: str | None, opt: int, cpython: bool
) -> list[tuple[str, bool]]:
    """Each (source, relative path) into tmp: copied for a CPython board, else
    compiled to .mpy; [(the path written, whether it holds native code)]."""

    def one(item: tuple[str, str]) -> tuple[str, bool]:
        src, rel = item
        if cpython:
            dest = rel
            os.makedirs(os.path.dirname(os.path.join(tmp, dest)), exist_ok=True)
            shutil.copyfile(src, os.path.join(tmp, dest))
            return dest, False
        dest = rel[:-3] + ".mpy"
        mpybuild.compile_file(src, os.path.join(tmp, dest), arch, opt, source_name=rel)
        return dest, mpyversion.header(os.path.join(tmp, dest))[2] != 0

    # One mpy-cross process per module: run them side by side.
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as ex:
        return list(ex.map(one, items))


def _write_boot_files(
    tmp: str, board: dict[str, Any], entry: str | None, files: dict[str, int]
) -> None:
    """main.py (for an entry) and the board's runtime files into tmp, each
    added to files with its size."""
    if entry:
        # A board runs main.py at boot only as source, so this stub stays .py.
        with open(os.path.join(tmp, "main.py"), "wb") as fm:
            fm.write(devicefiles.main_py(entry))
        files["main.py"] = os.path.getsize(os.path.join(tmp, "main.py"))
    # The board values the runtime runs (queues, spool, budget) travel
    # with the bundle, so deploy and mip put them on the device.
    for name, data in boards.runtime_files(board).items():
        with open(os.path.join(tmp, name), "wb") as fb:
            fb.write(data)
        files[name] = len(data)


def _sized(
    board: dict[str, Any], files: dict[str, int], out: str, native: bool, entry: str | None
) -> dict[str, Any]:
    """The size report: the files' total, what they take on the board's
    filesystem, its flash budget and whether they fit."""
    alloc = sum(allocated(n, board["budget"]["fs_block"]) for n in files.values())
    budget = board["budget"]["flash"]
    return {
        "board": board["name"],
        "files": files,
        "total": sum(files.values()),
        "allocated": alloc,
        "budget": budget,
        "ok": alloc <= budget,
        "out": out,
        "native": native,
        "entry": entry,
    }


def _write_descriptions(
    tmp: str, board: dict[str, Any], rep: dict[str, Any], cross: Any, arch: str | None
) -> None:
    """package.json (what mip installs) and bundle.json (what the bundle is:
    board, versions, sizes) into tmp."""
    files = rep["files"]
    version = package_version()
    with open(os.path.join(tmp, "package.json"), "w") as f:
        # mip resolves relative URLs against package.json's own location.
        f.write(
            '{"urls": [\n%s\n ],\n "version": %s}\n'
            % (",\n".join("  " + json.dumps([p, p]) for p in files), json.dumps(version))
        )
    meta = {
        "board": board["name"],
        "runtime": board["runtime"],
        "version": version,
        "mpy": None
        if cross is None
        else {"version": cross[1][0], "sub": cross[1][1], "arch": arch, "native": rep["native"]},
        "mpy_cross": cross[0] if cross else None,
        "files": files,
        "total_bytes": rep["total"],
        "allocated_bytes": rep["allocated"],
        "budget": board["budget"],
    }
    with open(os.path.join(tmp, "bundle.json"), "w") as f:
        json.dump(meta, f, indent=1)


def ota_manifest(
    d: str, board: dict[str, Any], modules: list[str], cross: Any, version: str | None
) -> str:
    """Write d/ota.jsonl, what an update over the bus sends first
    (firmware/README.md, "Updates over the bus"): the version, the board,
    the .mpy version and each module's [path, size, SHA-256]. The bundle's
    hash is the SHA-256 of these bytes; returns it."""
    entries = []
    for rel in modules:
        with open(os.path.join(d, rel), "rb") as f:
            data = f.read()
        entries.append([rel, len(data), hashlib.sha256(data).hexdigest()])
    if version is None:
        # Two builds of different code never share a version.
        digest = hashlib.sha256(json.dumps(entries).encode()).hexdigest()
        version = "%s+%s" % (package_version(), digest[:8])
    m = {
        "version": version,
        "board": board["name"],
        "mpy": None if cross is None else cross[1][0],
        "files": entries,
    }
    raw = otamanifest.encode_manifest(m)
    with open(os.path.join(d, otamanifest.MANIFEST), "wb") as f:
        f.write(raw)
    return hashlib.sha256(raw).hexdigest()


def freeze_manifest(
    board: dict[str, Any],
    srcs: list[tuple[str, str]],
    opt: int = 0,
    include: str = "$(PORT_DIR)/boards/manifest.py",
) -> str:
    """A MicroPython freeze manifest (manifest.py) for srcs: the port's own
    manifest (or `include`) plus each module, from its source, at optimisation
    level opt."""
    lines = [
        "# MicroPython freeze manifest for edgebus on board %s, written by edgebus build."
        % board["name"],
        "# Frozen modules run from flash: their code takes no heap (firmware/README.md).",
        "# In ports/%s of a MicroPython checkout: make BOARD=%s FROZEN_MANIFEST=<this file>"
        % (board["firmware"]["port"], board["firmware"].get("board", "...")),
        "include(%r)" % include,
    ]
    for src, rel in srcs:
        base = src[: len(src) - len(rel)].rstrip("/") or "."
        lines.append("module(%r, base_path=%r, opt=%d)" % (rel, base, opt))
    # micropython-lib's packages, found by make in $(MPY_LIB_DIR)
    lines.extend("require(%r)" % r for r in board.get("require") or ())
    return "\n".join(lines) + "\n"


def _entry(board: dict[str, Any], entry: str | None, srcs: list[tuple[str, str]]) -> str | None:
    if board["runtime"] != "micropython" or board["firmware"]["port"] == "unix":
        if entry and entry != "none":
            raise BuildError("--entry: board %s does not run main.py at boot" % board["name"])
        return None
    if entry == "none":
        return None
    if entry:
        if not re.fullmatch(r"[A-Za-z_][\w.]*", entry):
            raise BuildError("--entry %r is not a module name" % entry)
        return entry
    has = any(rel == "firmware/loader.py" for _s, rel in srcs)
    return devicefiles.LOADER if has else None


def _report(
    board: dict[str, Any],
    rep: dict[str, Any],
    cross: tuple[str, tuple[int, int]] | None,
    arch: str | None,
    log: Callable[[str], None],
) -> None:
    if cross:
        what = "%s, mpy v%d.%d, mpy-cross %s" % (
            arch or "bytecode",
            cross[1][0],
            cross[1][1],
            cross[0],
        )
    else:
        what = ".py sources for CPython"
    log("edgebus build: board %s (%s)" % (board["name"], what))
    w = max(len(p) for p in rep["files"]) + 2
    for p, n in rep["files"].items():
        log("  %-*s %9s" % (w, p, _fmt(n)))
    log("  %s %9s bytes in %d files" % ("-" * w, _fmt(rep["total"]), len(rep["files"])))
    block = board["budget"]["fs_block"]
    on = " in %d-byte blocks" % block if block else ""
    log(
        "  on flash%s: %s of the %s-byte budget (%d%%)%s"
        % (
            on,
            _fmt(rep["allocated"]),
            _fmt(rep["budget"]),
            round(100 * rep["allocated"] / rep["budget"]),
            "" if rep["ok"] else "  OVER BUDGET",
        )
    )
