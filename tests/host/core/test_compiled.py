"""The compiled core (setup.py, EDGEBUS_COMPILE=1: mypyc) keeps the contract:
the portable suite and the core's tests pass against it, as against the pure
modules, which stay its fallback."""

import subprocess
import sys

import pytest

from dev import compiled

pytestmark = pytest.mark.slow


def test_the_portable_suite_and_core_tests_pass_on_the_compiled_core(tmp_path):
    out = compiled.build(str(tmp_path / "compiled"))
    assert compiled.compiled_modules(out) == ["bus", "conn", "feed", "memo_cpython", "trie"]
    r = subprocess.run(
        [sys.executable, "-c", "import edgebus.feed as f; print(f.__file__)"],
        cwd=out,
        capture_output=True,
        text=True,
    )
    assert r.stdout.strip().endswith(".so"), r.stdout + r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-x",
            "tests/portable",
            "tests/host/core",
            "--deselect",
            "tests/host/core/test_compiled.py",
        ],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout.splitlines()[-1]
