"""The bridge's stop at fleet size, with real parts: a bridge
process with its telemetry log and 2,000 configured MQTT devices, 20 of them
CPython devices (dev/swarm.py) with sessions up and readings flowing over a
real mosquitto. SIGTERM: the bridge exits 0 with its state saved, and every
reading a device had acknowledged is in the log; started again, it takes
what was not acknowledged from the devices' spools, none of it twice. How
long a stop takes is a figure (dev/bench/swarm_bench.py, ``stop_s``), not
asserted here."""

import json
import os

import pytest

from dev.broker import Mosquitto
from dev.swarm import Swarm, check, node_key
from edgebus.tools.sim.fleet import bridge_toml
from tests.host.e2e.e2ekit import gateway_bridge

pytestmark = pytest.mark.mosquitto

CONFIGURED = 2000
DEVICES = 20


def _logged_once(log_dir, summary):
    """The checker's totals, failing on an acknowledged reading missing, a
    duplicate or a reading no device sent."""
    res = check(log_dir, summary)
    assert res["ok"], res["totals"]
    return res["totals"]


def test_a_bridge_of_2000_devices_stops_with_sessions_up_and_loses_nothing(tmp_path):
    with Mosquitto() as broker:
        swarm = Swarm(
            DEVICES,
            ("127.0.0.1", broker.port),
            rate=5.0,
            workers=2,
            log=str(tmp_path / "workers.log"),
        )
        cfg = swarm.bridge_config()
        cfg["mqtt"]["devices"] += [
            {"node": n, "key": node_key(n)}
            for n in ("idle-%d" % i for i in range(CONFIGURED - DEVICES))
        ]
        bridge, log_dir = gateway_bridge(tmp_path, "gw", bridge_toml(cfg), heartbeat=5.0)
        try:
            bridge.start()
            bridge.ready(60)
            with swarm:
                # Sessions up, readings acknowledged and more on their way.
                ok, p = swarm.wait(lambda p: p["up"] == DEVICES and p["acked"] >= 5 * DEVICES, 90)
                assert ok, p
                assert bridge.stop(timeout=120) == 0
                with open(bridge.logpath) as f:
                    assert '"bridge stopped in ' in f.read()
                first = swarm.summary()
                before = _logged_once(log_dir, first)
                assert before["acked_missing"] == 0 and before["logged"] > 0
                with open(os.path.join(str(tmp_path), "gw", "state", "links.json")) as f:
                    state = json.load(f)
                assert len(state) >= DEVICES
                for d in first["devices"]:
                    st = state["mqtt:" + d["node"]]
                    # saved at the stop: this boot, and at least all it acknowledged
                    assert st["peer_sid"] == d["sid"] and st["rx_next"] > d["acked"], (d, st)

                # Started again: the devices send what was not acknowledged.
                bridge.start()
                last = swarm.drained(90)
                assert bridge.stop(timeout=120) == 0
        finally:
            bridge.close()
    after = _logged_once(log_dir, last)
    sent = sum(d["sent"] for d in last["devices"])
    assert after["logged"] == sent and after["gaps"] == 0, (after, sent)
