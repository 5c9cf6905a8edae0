"""edgebus firmware build --board B --micropython SRC: a firmware image with edgebus frozen in.

SRC is a MicroPython source tree or its release tarball (default: the
EDGEBUS_MICROPYTHON environment variable); a tarball is unpacked once into the
cache. The image is built with the port's own make: mpy-cross first, then
``make -C ports/<port>`` with our freeze manifest (the board's manifest, then
edgebus and firmware, then ``require()`` of the micropython-lib packages the
board's manifest names, from the source's lib/micropython-lib) and, for a
board defined here (boards/<board_dir>), that directory as BOARD_DIR. The heap is
the manifest's budget.heap.

Images are cached under a hash of every input (source, board files, frozen
sources, options), so a second build with nothing changed takes no time:
``<cache>/firmware/<board>-<hash>/`` holds the image and ``build.json``
(sizes); the newest few per board are kept. The cache is EDGEBUS_CACHE, else
~/.cache/edgebus. make's objects are kept too, in one build directory per
board, MicroPython source and board files (``<cache>/firmware/objects/``), so
an image that differs in its heap or its frozen Python recompiles only that:
the second heap the test suite needs takes seconds, not a minute.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

from edgebus import tlog
from edgebus.tools.boardkit import boards, devicefiles, mpybuild, mpylib, mpyversion
from edgebus.tools.boardkit import build as bundle
from edgebus.tools.boardkit.mpylib import ENV_SOURCE as ENV_SOURCE
from edgebus.tools.boardkit.mpylib import cache_dir, source_tree

if TYPE_CHECKING:
    import argparse

APT = {
    "arm": "apt-get install -y --no-install-recommends gcc-arm-none-eabi libnewlib-arm-none-eabi"
}
CROSS = {"arm": "arm-none-eabi-"}


# One error for the source and the build: the message says what to fix.
FirmwareError = mpylib.SourceError


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    b = sub.add_parser("build", help="build a firmware image with edgebus frozen in")
    b.add_argument("--board", required=True, metavar="B", help="board name or manifest path")
    b.add_argument(
        "--micropython",
        metavar="SRC",
        help="MicroPython source tree or release tarball (default: $%s)" % ENV_SOURCE,
    )
    b.add_argument("--out", metavar="FILE", help="also copy the image here")
    b.add_argument(
        "--heap",
        type=int,
        metavar="BYTES",
        help="GC heap size (default: the manifest's budget.heap)",
    )
    b.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1, help="make -j")


def run(args: argparse.Namespace) -> int:
    try:
        board = boards.load_board(args.board)
        r = build(board, args.micropython, heap=args.heap, jobs=args.jobs)
        assert r is not None  # for mypy: None only with only_cached
        if args.out:
            shutil.copyfile(r["image"], args.out)
            print("copied to %s" % args.out)
    except (boards.BoardError, FirmwareError, bundle.BuildError, mpyversion.MpyVersionError) as e:
        print("edgebus firmware: error: %s" % e, file=sys.stderr)
        return 1
    return 0


# -- the toolchain


def check_toolchain(arch: str) -> None:
    """Raise FirmwareError naming the packages when make or the compiler is missing."""
    missing = [p for p in ("make", CROSS[arch] + "gcc") if shutil.which(p) is None]
    if not missing:
        gcc = CROSS[arch] + "gcc"
        # Newlib's headers come in a package of their own.
        r = subprocess.run([gcc, "-print-file-name=libc.a"], capture_output=True, text=True)
        if r.stdout.strip() == "libc.a":
            missing.append("newlib for %s" % gcc)
    if missing:
        raise FirmwareError(
            "%s not found: install the toolchain, e.g. (Debian/Ubuntu, as "
            "root) %s make" % (", ".join(missing), APT[arch])
        )


# -- the build


def board_dir(board: dict[str, Any]) -> str | None:
    b = (board["firmware"].get("build") or {}).get("board_dir")
    return os.path.join(boards.BOARDS_DIR, b) if b else None


def freeze_manifest(board: dict[str, Any]) -> str:
    """The manifest make freezes: the board's (or the port's) then our sources
    (those with functions marked native, from their staged copy)."""
    bd = board_dir(board)
    include = os.path.join(bd, "manifest.py") if bd else "$(PORT_DIR)/boards/manifest.py"
    srcs = bundle.collect(bundle.default_sources())
    if board["mpy"] and board["mpy"]["arch"]:
        srcs = [_native_staged(src, rel) for src, rel in srcs]
    return bundle.freeze_manifest(board, srcs, include=include)


def _native_staged(src: str, rel: str) -> tuple[str, str]:
    """(src, rel), or where src marks functions native (mpybuild.native_source)
    a copy of it with ``@micropython.native`` written in, under a folder named
    by its content: make's freeze runs mpy-cross on sources, with the port's
    -march, and reads no mark."""
    with open(src, "rb") as f:
        data = f.read()
    marked = mpybuild.native_source(data)
    if marked == data:
        return src, rel
    d = os.path.join(cache_dir(), "firmware", "native", hashlib.sha256(marked).hexdigest()[:16])
    path = os.path.join(d, rel)
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tlog.write_atomically(
            path, path + ".tmp", lambda f: f.write(marked), durable=False, mode=0o644
        )
    return path, rel


def _hash_files(h: Any, top: str) -> None:
    for dirpath, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        devicefiles.prune(os.path.relpath(dirpath, os.path.dirname(top)), dirs)
        for f in sorted(files):
            p = os.path.join(dirpath, f)
            h.update(os.path.relpath(p, top).encode() + b"\0")
            with open(p, "rb") as fh:
                h.update(fh.read())


def build_key(board: dict[str, Any], source_id: str, manifest: str, heap: int | None) -> str:
    """A hash of every input of the image."""
    h = hashlib.sha256()
    h.update(json.dumps([board, source_id, heap], sort_keys=True).encode())
    h.update(manifest.encode())
    bd = board_dir(board)
    if bd:
        _hash_files(h, bd)
    for src in bundle.default_sources():
        _hash_files(h, src)
    return h.hexdigest()[:16]


def objects_dir(board: dict[str, Any], source_id: str) -> str:
    """The board's kept build directory for this source and these board files
    (what every object depends on; the heap and the frozen sources are
    rebuilt within it, see _make_image)."""
    h = hashlib.sha256(json.dumps([board, source_id], sort_keys=True).encode())
    bd = board_dir(board)
    if bd:
        _hash_files(h, bd)
    return os.path.join(
        cache_dir(), "firmware", "objects", "%s-%s" % (board["name"], h.hexdigest()[:16])
    )


def _make(args: list[str], log_path: str, what: str) -> None:
    with open(log_path, "ab") as logf:
        r = subprocess.run(["make"] + args, stdout=logf, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        with open(log_path, errors="replace") as f:
            tail = "".join(f.readlines()[-25:])
        raise FirmwareError(
            "%s failed (make exit %d); the end of %s:\n%s" % (what, r.returncode, log_path, tail)
        )


def sizes(elf: str, build_dir: str, arch: str) -> dict[str, int]:
    """The image's flash bytes (text + data), its RAM (bss: the heap is there)
    and the frozen modules' share of the flash."""

    def size(path: str) -> tuple[int, int, int]:
        r = subprocess.run([CROSS[arch] + "size", path], capture_output=True, text=True)
        text, data, bss = (int(x) for x in r.stdout.splitlines()[1].split()[:3])
        return text, data, bss

    text, data, bss = size(elf)
    ftext, fdata, _ = size(os.path.join(build_dir, "frozen_content.o"))
    return {"image_bytes": text + data, "bss_bytes": bss, "frozen_bytes": ftext + fdata}


def _cached(out: str, info: dict[str, Any]) -> dict[str, Any] | None:
    try:
        with open(os.path.join(out, "build.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    meta["image"] = os.path.join(out, info["image"])
    return meta


KEEP = 4  # images kept per board (e.g. the budget heap and a test heap, two versions)
KEEP_OBJECTS = 2  # build directories kept per board (tens of MB each)


def prune(name: str, keep: int = KEEP, where: str = "") -> None:
    """Remove all but the `keep` newest cached images of board `name` (with
    where="objects": its kept build directories)."""
    d = os.path.join(cache_dir(), "firmware", where)
    mine = [
        os.path.join(d, e)
        for e in os.listdir(d)
        if e.startswith(name + "-") and ".tmp" not in e and not e.endswith(".lock")
    ]
    for old in sorted(mine, key=os.path.getmtime)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def build(
    board: dict[str, Any],
    src: str | None = None,
    heap: int | None = None,
    jobs: int | None = None,
    log: Callable[[str], None] = print,
    only_cached: bool = False,
) -> dict[str, Any] | None:
    """Build (or find in the cache) board's image; returns build.json's dict
    with "image", the path of the image. only_cached: None rather than build."""
    info = _build_info(board)
    # The emulated board names its CPU; other ports' make finds its own toolchain
    # (ESP-IDF, the Pico SDK) and says what is missing in its log.
    arch = board["flash"].get("system")
    heap = heap or board["budget"]["heap"]
    tree, source_id = source_tree(src, log)
    port = _port_dir(board, tree)
    manifest = freeze_manifest(board)
    key = build_key(board, source_id, manifest, heap)
    out = os.path.join(cache_dir(), "firmware", "%s-%s" % (board["name"], key))
    meta = _cached(out, info)
    if meta is not None or only_cached:
        if meta is not None:
            log("edgebus firmware: %s is up to date: %s" % (board["name"], meta["image"]))
        return meta
    if arch:
        check_toolchain(arch)
    meta = {"board": board["name"], "heap": heap, "source": source_id, "key": key}
    objs = objects_dir(board, source_id)
    os.makedirs(objs, exist_ok=True)
    with open(objs + ".lock", "w") as lock:  # one make at a time in a build directory
        fcntl.flock(lock, fcntl.LOCK_EX)
        os.utime(objs)  # the newest, for prune
        _build_into(board, tree, port, objs, manifest, jobs, out, meta, log)
    prune(board["name"])
    prune(board["name"], KEEP_OBJECTS, "objects")
    meta["image"] = os.path.join(out, info["image"])
    frozen = meta.get("frozen_bytes")
    log(
        "edgebus firmware: built %s in %.0f s: %s (image %d bytes%s)"
        % (
            board["name"],
            meta["seconds"],
            meta["image"],
            meta["image_bytes"],
            ", frozen modules %d" % frozen if frozen is not None else "",
        )
    )
    return meta


def _build_into(
    board: dict[str, Any],
    tree: str,
    port: str,
    objs: str,
    manifest: str,
    jobs: int | None,
    out: str,
    meta: dict[str, Any],
    log: Callable[[str], None],
) -> None:
    """make in the build directory objs, then the image, its sizes and meta
    (completed here) stored as the cache entry out."""
    info = _build_info(board)
    arch = board["flash"].get("system")
    tmp = out + ".tmp%d" % os.getpid()
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    t0 = time.monotonic()
    bdir = _make_image(board, tree, port, objs, manifest, meta["heap"], jobs, tmp, log)
    image = os.path.join(bdir, info["image"])
    meta["seconds"] = round(time.monotonic() - t0, 1)
    meta.update(sizes(image, bdir, arch) if arch else {"image_bytes": os.path.getsize(image)})
    _store(tmp, out, bdir, info["image"], meta)


def _build_info(board: dict[str, Any]) -> dict[str, Any]:
    """The manifest's firmware.build; FirmwareError for a board without one."""
    info = board["firmware"].get("build")
    if not info:
        raise FirmwareError(
            "board %s has no firmware.build in its manifest: its firmware "
            "comes from %s"
            % (board["name"], board["firmware"].get("url") or "the port's download page")
        )
    return info


def _port_dir(board: dict[str, Any], tree: str) -> str:
    """The board's port in the MicroPython source tree; FirmwareError when the
    tree does not have it."""
    port = os.path.join(tree, "ports", board["firmware"]["port"])
    if not os.path.isdir(port):
        raise FirmwareError(
            "ports/%s is not in the MicroPython source at %s (the tarball "
            "beside this project holds ports/qemu only): use a full checkout"
            % (board["firmware"]["port"], tree)
        )
    return port


def _heap_changed(port: str, bdir: str, heap: int) -> None:
    """Make does not see a changed MICROPY_HEAP_SIZE (a -D flag): remove the
    objects of the port's files that use it when bdir was built for another."""
    mark = os.path.join(bdir, "edgebus-heap")
    try:
        with open(mark) as f:
            same = f.read() == str(heap)
    except OSError:
        same = not os.path.isdir(bdir)  # a new directory builds everything
    if not same:
        for c in os.listdir(port):
            if c.endswith(".c"):
                with open(os.path.join(port, c), "rb") as f:
                    uses = b"MICROPY_HEAP_SIZE" in f.read()
                if uses and os.path.exists(os.path.join(bdir, c[:-2] + ".o")):
                    os.unlink(os.path.join(bdir, c[:-2] + ".o"))
    os.makedirs(bdir, exist_ok=True)
    with open(mark, "w") as f:
        f.write(str(heap))


def _make_image(
    board: dict[str, Any],
    tree: str,
    port: str,
    objs: str,
    manifest: str,
    heap: int,
    jobs: int | None,
    tmp: str,
    log: Callable[[str], None],
) -> str:
    """The port's make run in the kept build directory objs with the freeze
    manifest (mpy-cross made first when the tree has none), its log in tmp;
    returns the build directory. A failed make removes objs: the next build
    starts clean rather than from what a broken one left."""
    man_path = os.path.join(objs, "manifest.py")
    with open(man_path, "w") as f:
        f.write(manifest)
    log_path = os.path.join(tmp, "build.log")
    log(
        "edgebus firmware: building %s (heap %d) from %s; log: %s"
        % (board["name"], heap, tree, log_path)
    )
    jflag = "-j%d" % (jobs or os.cpu_count() or 1)
    if not os.path.isfile(os.path.join(tree, "mpy-cross", "build", "mpy-cross")):
        _make(["-C", os.path.join(tree, "mpy-cross"), jflag], log_path, "building mpy-cross")
    bdir = os.path.join(objs, "build")
    _heap_changed(port, bdir, heap)
    # makemanifest recompiles a frozen module only when its source is newer
    # than the .mpy kept here, which another edgebus's (an older checkout, a
    # pip install's wheel times) need not be: the image would freeze stale
    # code. make runs only when the image's inputs changed; the frozen
    # modules then compile again, in seconds.
    shutil.rmtree(os.path.join(bdir, "frozen_mpy"), ignore_errors=True)
    args = [
        "-C",
        port,
        jflag,
        "BUILD=" + bdir,
        "FROZEN_MANIFEST=" + man_path,
        "MICROPY_HEAP_SIZE=%d" % heap,
    ]
    bd = board_dir(board)
    args.append("BOARD_DIR=" + bd if bd else "BOARD=" + board["firmware"]["board"])
    if board.get("require"):  # the manifest's require() finds them there
        args.append("MPY_LIB_DIR=" + mpylib.lib_dir(tree))
    try:
        _make(args, log_path, "building the %s firmware" % board["name"])
    except FirmwareError:
        shutil.rmtree(objs, ignore_errors=True)
        raise
    return bdir


def _store(tmp: str, out: str, bdir: str, name: str, meta: dict[str, Any]) -> None:
    """The image (name, in the build directory bdir) and its build.json into
    the cache entry out, made in tmp."""
    shutil.copyfile(os.path.join(bdir, name), os.path.join(tmp, name))
    with open(os.path.join(tmp, "build.json"), "w") as f:
        json.dump(meta, f, indent=1)
    if os.path.isdir(out):  # a concurrent build finished first
        shutil.rmtree(tmp)
    else:
        tlog.rename_durably(tmp, out)  # a cache entry is whole, or not there
