"""A deep-sleep SIMULATOR for runtimes without machine.deepsleep (the unix
port, CPython): the real function's API, deepsleep(time_ms). A board's deep
sleep is a reset that ends its program and runs main.py again at the wake;
here the process writes the wake time (Unix ms) to WAKE in its working
directory, the device's root, and exits with status EXIT, and its supervisor
(tools/sim/fleet.py) starts it again at that time."""

import sys
import time

WAKE = "sleepsim.wake"
EXIT = 4  # tools/sim/fleet.py EXIT_MEANING


def deepsleep(time_ms=0):
    """Sleep for time_ms (0: until woken from outside, here: by the
    supervisor at once); never returns."""
    wake = int(time.time() * 1000) + time_ms
    with open(WAKE, "w") as f:
        f.write("%d\n" % wake)
    print("deepsleep (simulated): %d ms" % time_ms)
    sys.exit(EXIT)
