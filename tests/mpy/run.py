# Runs portable test modules under MicroPython.
# usage: micropython run.py tests.portable.test_x [more modules]
#    or, on a board's REPL: import run; run.run(["tests.portable.test_x"])
# Calls every function named test_* in each module (sorted by name) and ends
# with the line "N passed, N failed"; exit status 1 if any failed.
import gc
import sys


def run(names):
    """Run the modules' tests; returns the number that failed."""
    passed = 0
    failed = 0
    for name in names:
        __import__(name)
        mod = sys.modules[name]
        for attr in sorted(dir(mod)):
            if not attr.startswith("test_"):
                continue
            gc.collect()
            try:
                getattr(mod, attr)()
            except Exception as e:
                failed += 1
                print("FAIL", name, attr)
                sys.print_exception(e)
            else:
                passed += 1
                print("PASS", name, attr)
        # Unloaded once run: a board runs module after module in one heap, and
        # each one's code and objects would stay to crowd the next.
        mod = None
        del sys.modules[name]
        pkg, _, leaf = name.rpartition(".")
        if pkg in sys.modules and hasattr(sys.modules[pkg], leaf):
            delattr(sys.modules[pkg], leaf)
        gc.collect()
    print("%d passed, %d failed" % (passed, failed))
    return failed


if __name__ == "__main__":
    sys.exit(1 if run(sys.argv[1:]) else 0)
