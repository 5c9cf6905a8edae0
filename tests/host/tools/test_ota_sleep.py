"""edgebus ota push to a duty-cycle device (firmware/sleep.py) that is asleep
as it announced, with real parts: a fleet device (the real firmware on the
MicroPython unix port, waking on the deep-sleep simulator) over a real
mosquitto, the bridge as its own process with its mailbox, and `edgebus ota`
run as a user who updates devices. The push says until when the device
sleeps and waits for its wake, instead of giving up on no route."""

import re
import time

import pytest

from dev.harness.ota import mqtt_fleet, ota
from tests.conftest import wait_until
from tests.host.tools import otakit

pytestmark = [pytest.mark.micropython, pytest.mark.mosquitto]

# Asleep ~12 s a cycle, long enough for the push to start while it sleeps;
# awake up to 60 s, so the whole transfer fits one wake.
SLEEP = {"every": 15, "awake": 60, "linger": 1.0}


def test_a_push_to_a_device_asleep_waits_for_its_wake(tmp_path):
    good = otakit.bundle(tmp_path, "good", version="9.9.9")
    with mqtt_fleet(tmp_path, 1, journal=True, config={"sleep": SLEEP}) as (fleet, bridge):
        node = fleet.devices[0]["node"]
        wait_until(lambda: (bridge.link(node) or {}).get("state") == "asleep", 60)
        t0 = time.monotonic()  # the fleet's clock for its events
        r = ota(
            bridge.sock,
            *("push", "--bundle", good, "--to", node, "--yes", "--timeout", "5"),
            *("--trial-s", "30"),
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert re.search(
            r"^%s: asleep until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d, waiting$" % node,
            r.stderr,
            re.MULTILINE,
        ), r.stderr
        assert "%s: committed 9.9.9 in " % node in r.stdout, r.stdout
        assert "no route" not in r.stdout + r.stderr
        assert "without a watchdog" not in r.stderr  # the unix port has the simulator
        # It slept through the push's start and woke during it.
        assert [e for e in fleet.events if e[1:] == (node, "wake") and e[0] > t0], fleet.events
