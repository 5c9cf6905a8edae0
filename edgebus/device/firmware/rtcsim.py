"""A SIMULATOR of MicroPython's `machine.RTC`, for the runtimes with no RTC
here (the unix port): the same API (`RTC()` with `datetime()` to read and
`datetime((year, month, day, weekday, hours, minutes, seconds, subseconds))`
to set, in UTC), so firmware/clock.py runs unchanged against it with "rtc":
"firmware.rtcsim" in the config's "time".

The simulated RTC is the host's clock plus an offset, which it keeps in
``edgebus.compat.wall`` so that the wall clock the link sends (compat.wall_ms)
reads it as a board's link reads its RTC. Its start is a JSON file beside the
device's config, rtcsim.json: {"offset_s": -3600} starts the RTC an hour
slow, as a board whose RTC drifted or was never set; no file: no offset.
"""

import json
import time

from edgebus import compat

START_FILE = "rtcsim.json"


def _days(y, m, d):
    """Days from 1970-01-01 to the date (proleptic Gregorian; H. Hinnant's)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def _host_ms():
    return time.time_ns() // 1000000


class RTC:
    """The simulated real-time clock (see the module doc)."""

    def __init__(self, id=0):
        try:
            with open(START_FILE) as f:
                compat.wall[1] = int(json.load(f).get("offset_s", 0) * 1000)
        except (OSError, ValueError, AttributeError, TypeError):  # no file, or not a start
            pass

    def datetime(self, dt=None):
        if dt is None:
            t = _host_ms() + compat.wall[1]
            tm = time.gmtime(t // 1000)
            return (tm[0], tm[1], tm[2], tm[6] + 1, tm[3], tm[4], tm[5], t % 1000 * 1000)
        y, mo, d, _wd, h, mi, s = dt[:7]
        t = ((_days(y, mo, d) * 24 + h) * 60 + mi) * 60 + s
        compat.wall[1] = t * 1000 + (dt[7] // 1000 if len(dt) > 7 else 0) - _host_ms()
        return None
