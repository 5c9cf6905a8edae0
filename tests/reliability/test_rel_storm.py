"""A start-up storm: CPython devices (dev/swarm.py; 300 in CI,
1,000 in the soak) all started at the same instant against one bridge
process with its telemetry log, over a real mosquitto. Every device gets a
session, and only one: the bridge counts as many sessions as devices and
none ended, each device one. Every reading, once each, is in the log
(dev/swarm.check: none acknowledged and missing, no duplicate)."""

import asyncio

from dev.broker import Mosquitto
from dev.swarm import Swarm, check, figures
from edgebus.tools.commands.status import fetch
from tests.host.e2e.e2ekit import gateway_bridge


def _mqtt_links(sock):
    """The bridge's MQTT links' stats (every page of its status)."""
    st = asyncio.run(fetch(sock, timeout=30))
    return [s for k, s in st["links"].items() if k.startswith("mqtt:")]


def test_devices_started_at_once_get_one_session_each_and_lose_nothing(tmp_path, rel):
    n = rel.n(300, 1000)
    with Mosquitto() as broker:
        swarm = Swarm(
            n, ("127.0.0.1", broker.port), rate=1.0, ramp=0, log=str(tmp_path / "workers.log")
        )
        bridge, log_dir = gateway_bridge(tmp_path, "gw", swarm.toml(), heartbeat=5.0)
        try:
            bridge.start()
            bridge.ready(60)
            with swarm:
                ok, p = swarm.wait(lambda p: p["ever_up"] == n, 120)
                assert ok, p
                # A few readings each with every session up, then the rest acknowledged.
                ok, p = swarm.wait(lambda p: p["acked"] >= 3 * n, 60)
                assert ok, p
                swarm.stop_publishing()
                ok, p = swarm.wait(lambda p: not p["behind"], 60)
                assert ok, p
                links = _mqtt_links(bridge.sock)
                summary = swarm.summary()
            assert bridge.stop(timeout=120) == 0
        finally:
            bridge.close()

    def count(k):
        return sum(s["counters"].get(k, 0) for s in links)

    assert len(links) == n and all(s["state"] == "up" for s in links), [
        s["state"] for s in links if s["state"] != "up"
    ][:10]
    churn = {k: count(k) for k in ("sessions", "session_ends", "liveness_timeouts")}
    assert churn == {"sessions": n, "session_ends": 0, "liveness_timeouts": 0}, churn
    assert [d["sessions"] for d in summary["devices"]] == [1] * n
    res = check(log_dir, summary)["totals"]
    fig = figures(summary)
    assert res["acked_missing"] == 0 and res["duplicates"] == 0 and res["unknown"] == 0, res
    assert res["logged"] == fig["sent"] == fig["acked"], (res, fig)
    rel.record(
        "load: devices started at once (start-up storm)",
        tried=n,
        sessions_up_s=fig["sessions_up_s"],
        sent=fig["sent"],
        ack_p50_ms=fig["ack_p50_ms"],
        ack_p99_ms=fig["ack_p99_ms"],
        stale_hellos=count("stale_hellos"),
        **churn,
    )
