"""The optional compiled core: with EDGEBUS_COMPILE=1 (and mypy, a C compiler
and Python's headers at hand) the hot path's modules are built with mypyc into
the wheel beside their source; without it the wheel is pure Python. A compiled
module is imported in place of its source; MicroPython never sees either."""

import os
import sys

from setuptools import setup

# The publish -> deliver -> receive path. topic.py stays interpreted:
# memo_cpython wraps topic.key, and compiled callers would call the original.
COMPILED = ["feed", "conn", "bus", "trie", "memo_cpython"]
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
        ["--config-file", "dev/mypyc.ini"] + ["edgebus/%s.py" % m for m in COMPILED],
        opt_level="3",
        group_name="edgebus._core",
    )

setup(ext_modules=ext_modules)
