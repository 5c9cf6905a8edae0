"""The compiled core (setup.py, EDGEBUS_COMPILE=1) built into a folder of its
own, for the tests and benchmarks that run both variants.

usage: python -m dev.compiled OUT      (then: cd OUT; python -m pytest tests/...)
OUT holds a copy of edgebus/ with the hot path's modules compiled by mypyc
beside their sources, and links to the checkout's tests/, dev/ and
pyproject.toml; the checkout itself is left as it is (its pure modules are
the fallback, and a build in place would leave .so files git does not track).
Needs what a compiled install needs: mypy, a C compiler and Python's headers.
"""

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(out, log=None):
    """edgebus/ compiled into out (replaced); returns out. Raises
    CalledProcessError with the build's output when it fails."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "dev"))
    shutil.copytree(
        os.path.join(ROOT, "edgebus"),
        os.path.join(out, "edgebus"),
        ignore=shutil.ignore_patterns("__pycache__", "*.so"),
    )
    shutil.copy(os.path.join(ROOT, "setup.py"), out)
    shutil.copy(os.path.join(ROOT, "dev", "mypyc.ini"), os.path.join(out, "dev"))
    # No pyproject.toml there: setup.py alone, whatever setuptools this is.
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=out,
        env=dict(os.environ, EDGEBUS_COMPILE="1"),
        check=True,
        stdout=log or subprocess.DEVNULL,
        stderr=subprocess.STDOUT if log else subprocess.PIPE,
    )
    # The checkout's tests, tools and settings beside it, so that pytest run
    # in out (its rootdir, first on sys.path) imports out's edgebus.
    shutil.rmtree(os.path.join(out, "dev"))
    for name in ("dev", "tests", "pyproject.toml"):
        os.symlink(os.path.join(ROOT, name), os.path.join(out, name))
    return out


def compiled_modules(out):
    """The names of the core's modules that are compiled in out."""
    return sorted(
        f.split(".")[0]
        for f in os.listdir(os.path.join(out, "edgebus"))
        if f.endswith(".so") and not f.startswith("_")
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    build(sys.argv[1], log=sys.stdout)
    print("compiled: %s" % ", ".join(compiled_modules(sys.argv[1])))
