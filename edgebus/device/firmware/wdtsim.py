"""A watchdog SIMULATOR for runtimes without machine.WDT (the unix port,
CPython): the real class's API, WDT(timeout=ms) and feed(); when not fed for
timeout ms it kills the process, as a board's watchdog resets the chip, and
the supervisor (the fleet, systemd) starts it again, and leaves the reset
cause the loader reads. A thread watches, so a main loop that hangs is
caught (the unix port runs threads without a GIL). A process has one
watchdog, as a chip has: the loader's copy of this module (the factory's)
and a bundle's share it, so a WDT made again re-times and feeds the one
already running (machine.WDT does the same on a board)."""

import _thread
import sys
import time

MARK = "wdtsim.reset"  # in the working directory, the device's root (firmware/loader.py)
# Where the process's one watchdog is kept: sys.modules outlives the loader's
# forgetting of the factory's firmware package, and is shared by every copy
# of this module (the factory's and a bundle's).
KEY = "_edgebus_wdt"


class _Dog:
    def __init__(self, timeout):
        self.timeout = timeout
        self.fed = _ms()


class WDT:
    def __init__(self, id=0, timeout=5000):
        dog = sys.modules.get(KEY)
        if dog is None:
            dog = sys.modules[KEY] = _Dog(timeout)
            _thread.start_new_thread(_watch, (dog,))
        dog.timeout = timeout
        dog.fed = _ms()
        self._dog = dog

    def feed(self):
        self._dog.fed = _ms()


def _watch(dog):
    while True:
        time.sleep(0.5)
        if _age(dog.fed) > dog.timeout:
            print("WDT (simulated): not fed for %d ms: the device is reset" % dog.timeout)
            try:
                # The reset cause a board's machine.reset_cause() gives,
                # for the loader (firmware/loader.py, WDT_MARK).
                with open(MARK, "w") as f:
                    f.write("wdt\n")
            except OSError:
                pass
            _kill()


def _ms():
    if hasattr(time, "ticks_ms"):
        return time.ticks_ms()
    return int(time.monotonic() * 1000)


def _age(t):
    if hasattr(time, "ticks_diff"):
        return time.ticks_diff(time.ticks_ms(), t)
    return _ms() - t


def _kill():
    if sys.implementation.name == "micropython":
        import os

        # The unix port's os has no kill nor getpid: the shell's parent is us.
        os.system("kill -9 $PPID")
    else:
        import os
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
