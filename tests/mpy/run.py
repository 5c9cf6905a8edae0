# Runs portable test modules under MicroPython.
# usage: micropython run.py tests.portable.test_x [more modules]
# Calls every function named test_* in each module (sorted by name) and ends
# with the line "N passed, N failed"; exit status 1 if any failed.
import sys
import gc

passed = 0
failed = 0
for name in sys.argv[1:]:
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
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
