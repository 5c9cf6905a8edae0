"""A SIMULATOR of MicroPython's `network` module for a WiFi station, for the
runtimes with no radio here (the unix port, the emulated board): the same
names and behaviour as the real module (`WLAN(STA_IF)` with `active`,
`connect`, `disconnect`, `isconnected`, `status` and `status("rssi")`,
`ifconfig`, `config`; the `STAT_*` codes, valued as on the Pico W's cyw43),
so firmware/wifi.py runs unchanged against it with "driver":
"firmware.wlansim" in the config's "network".

The access point is a JSON file beside the device's config, wlansim.json:
{"ap": true, "ssid": "lab", "password": "pw", "rssi": -58}; a test raises
and drops the AP by rewriting it. No file: no access point in range.
"""

import json
import time

STA_IF = 0
AP_IF = 1
STAT_IDLE = 0
STAT_CONNECTING = 1
STAT_GOT_IP = 3
STAT_CONNECT_FAIL = -1
STAT_NO_AP_FOUND = -2
STAT_WRONG_PASSWORD = -3

AP_FILE = "wlansim.json"
ASSOCIATE_MS = 300  # how long "connecting" lasts, as a real join takes a moment


def _ap():
    try:
        with open(AP_FILE) as f:
            ap = json.load(f)
    except (OSError, ValueError):
        return None
    return ap if ap.get("ap") else None


def _ms():
    return time.ticks_ms() if hasattr(time, "ticks_ms") else int(time.monotonic() * 1000)


class WLAN:
    """A station interface of the simulated radio (see the module doc)."""

    def __init__(self, interface_id=STA_IF):
        if interface_id != STA_IF:
            raise ValueError("the simulator has a station interface only")
        self._active = False
        self._want = None  # (ssid, key) of the last connect()
        self._t0 = 0
        self._state = STAT_IDLE

    def active(self, is_active=None):
        if is_active is None:
            return self._active
        self._active = bool(is_active)
        if not self._active:
            self.disconnect()
        return None

    def connect(self, ssid=None, key=None, bssid=None):
        if not self._active:
            raise OSError("WiFi Not Started")
        self._want = (ssid, key)
        self._t0 = _ms()
        self._state = STAT_CONNECTING

    def disconnect(self):
        self._want = None
        self._state = STAT_IDLE

    def status(self, param=None):
        if param == "rssi":
            ap = _ap() if self.isconnected() else None
            if ap is None:
                raise OSError("not connected")
            return ap.get("rssi", -60)
        if param is not None:
            raise ValueError("unknown status param")
        s = self._state
        if s in (STAT_CONNECTING, STAT_GOT_IP):
            ap = _ap()
            if ap is None or ap.get("ssid") != self._want[0]:
                s = STAT_NO_AP_FOUND if s == STAT_CONNECTING else STAT_CONNECT_FAIL
            elif ap.get("password") != self._want[1]:
                s = STAT_WRONG_PASSWORD
            elif s == STAT_CONNECTING and _ms() - self._t0 >= ASSOCIATE_MS:
                s = STAT_GOT_IP
            if (
                s in (STAT_NO_AP_FOUND, STAT_CONNECT_FAIL, STAT_WRONG_PASSWORD)
                and _ms() - self._t0 < ASSOCIATE_MS
            ):
                s = STAT_CONNECTING  # the radio takes a moment to find out
            self._state = s
        return s

    def isconnected(self):
        return self.status() == STAT_GOT_IP

    def ifconfig(self):
        if self.isconnected():
            return ("10.0.0.2", "255.255.255.0", "10.0.0.1", "10.0.0.1")
        return ("0.0.0.0", "0.0.0.0", "0.0.0.0", "0.0.0.0")

    def config(self, param):
        if param in ("ssid", "essid"):
            return self._want[0] if self._want else ""
        if param == "mac":
            return b"\x02\xeb\x00\x00\x00\x01"
        raise ValueError("unknown config param")
