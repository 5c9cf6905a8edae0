"""The optional compiled core: with EDGEBUS_COMPILE=1 (and mypy, a C compiler
and Python's headers at hand) the hot path's modules are built with mypyc into
the wheel beside their source; without it the wheel is pure Python. A compiled
module is imported in place of its source; MicroPython never sees either."""

import os
import re
import shutil
import sys

from setuptools import setup

# The publish -> deliver -> receive path. topic.py stays interpreted:
# memo_cpython wraps topic.key, and compiled callers would call the original.
COMPILED = ["feed", "conn", "bus", "trie", "memo_cpython"]
# mypyc compiles a copy without the ``@micropython.native`` lines, as a
# MicroPython bytecode build does (edgebus/tools/boardkit/mpybuild.py; not
# imported here: setup.py runs before edgebus is installed). The decorator is
# the identity on CPython, and mypyc cannot compile a decorated method of a
# native class.
NATIVE = re.compile(r"^[ \t]*@micropython\.native[ \t]*$", re.M)
SRC = os.path.join("build", "mypyc-src")


def _stripped_copy():
    dst = os.path.join(SRC, "edgebus")
    shutil.rmtree(SRC, ignore_errors=True)
    os.makedirs(dst)
    for f in os.listdir("edgebus"):
        if f.endswith(".py"):
            with open(os.path.join("edgebus", f)) as fi, open(os.path.join(dst, f), "w") as fo:
                fo.write(NATIVE.sub("", fi.read()))
    return [os.path.join(dst, m + ".py") for m in COMPILED]


mypycify = None
ext_modules = []
if os.environ.get("EDGEBUS_COMPILE") == "1":
    try:
        from mypyc.build import mypycify
    except ImportError:
        # pip asks for the build's requirements (egg_info) before mypy is in
        # (_build_backend.py adds it); any other step needs it.
        if "egg_info" not in sys.argv:
            sys.exit("EDGEBUS_COMPILE=1: the compiled core needs mypy (pip install mypy)")
        mypycify = None
if mypycify is not None:
    ext_modules = mypycify(
        ["--config-file", "dev/mypyc.ini"] + _stripped_copy(),
        opt_level="3",
        group_name="edgebus._core",
    )

setup(ext_modules=ext_modules)
