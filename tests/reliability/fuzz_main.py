"""The atheris runner: python -m tests.reliability.fuzz_main TARGET RUNS [--keep].

edgebus is imported inside atheris.instrument_imports() so the fuzzer is
guided by coverage of the code under test (and only of it)."""

import sys

import atheris

with atheris.instrument_imports(include=["edgebus"]):
    import edgebus.link.frame  # noqa: F401
    import edgebus.link.link  # noqa: F401
    import edgebus.link.wire  # noqa: F401
    from tests.reliability import fuzz_targets

if __name__ == "__main__":
    fuzz_targets.main(sys.argv)
