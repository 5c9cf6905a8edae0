"""End to end, a fleet sharded over two bridges sharing one broker (docs/bridge.md,
"Running 10,000 devices on one or several bridges"): real-firmware
MicroPython devices, one mosquitto, two bridge processes ([mqtt] shard =
true), each with its own keystore, state and telemetry log. A SIGHUP with a
configuration that does not load changes nothing. Then a device is moved from
A to B while it publishes (`edgebus devices move`), and `edgebus ingest` of
both logs gives each of its readings once, with no hole; the other devices
kept their sessions throughout.

Waits are for conditions (a log's progress, a bridge's status), never fixed sleeps.
"""

import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from dev.broker import Mosquitto  # noqa: E402
from edgebus import tlog  # noqa: E402
from edgebus.bridge.keystore import KeyStore  # noqa: E402
from edgebus.tools.sim.fleet import Fleet  # noqa: E402
from tests.conftest import edgebus_ok, wait_until  # noqa: E402
from tests.host.e2e.e2ekit import gateway_bridge, ingest_once, once_each, past, progress  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.mosquitto, pytest.mark.micropython]

PERIOD = 0.05  # 20 readings/s per device, steady through the move
HEARTBEAT = 1.0  # devices and bridges
ADVANCE = 30  # readings through a bridge before and after the move
GATEWAYS = ("gw-a", "gw-b")


def _shard(out, name, port, nodes, keys):
    """A shard bridge process with ``nodes``' key files in its own keystore."""
    bridge, log_dir = gateway_bridge(
        out,
        name,
        '[mqtt]\nurl = "mqtt://127.0.0.1:%d"\nshard = true\nkeystore = true\n' % port,
        HEARTBEAT,
    )
    store = KeyStore(str(out / name / "state" / "keys"))
    for n in nodes:
        store.write(n, {"key": keys[n], "since": 0})
    return bridge, log_dir


def _holds(bridge, nodes):
    """{node: its link's stats} once every one of nodes has a session up here."""
    st = {n: bridge.link(n) for n in nodes}
    return all((s or {}).get("state") == "up" for s in st.values()) and st


def test_a_device_moved_between_two_shard_bridges_has_each_reading_once_in_the_table(
    spark, tmp_path
):
    out = tmp_path / "shard"
    table, ckpt = str(out / "table"), str(out / "ckpt")
    with (
        Mosquitto() as broker,
        Fleet(
            out / "fleet",
            mqtt=3,
            broker=("127.0.0.1", broker.port),
            period=PERIOD,
            health_period=1.0,
            link={"heartbeat": HEARTBEAT},
        ) as fleet,
    ):
        nodes = [d["node"] for d in fleet.devices]
        keys = {d["node"]: d["key"] for d in fleet.devices}
        stay_a, moved, stay_b = nodes
        a, log_a = _shard(out, "gw-a", broker.port, [stay_a, moved], keys)
        b, log_b = _shard(out, "gw-b", broker.port, [stay_b], keys)
        logs = {"gw-a": log_a, "gw-b": log_b}
        try:
            a.start()
            b.start()
            fleet.start()
            wait_until(
                lambda: _holds(a, [stay_a, moved]) and _holds(b, [stay_b]),
                60,
                "the shards did not take their devices",
            )
            zero = {n: 0 for n in nodes}
            wait_until(
                lambda: (
                    past(log_a, [stay_a, moved], zero, ADVANCE)
                    and past(log_b, [stay_b], zero, ADVANCE)
                ),
                30,
                "no progress on the shards",
            )
            # Each shard takes only its own devices' frames.
            assert progress(log_b, [stay_a, moved]) == {stay_a: 0, moved: 0}
            assert progress(log_a, [stay_b]) == {stay_b: 0}

            # A configuration that does not load: A runs on with the one it has.
            good = Path(a.toml).read_text()
            with open(a.toml, "w") as f:
                f.write(good + "\n[mqtt\n")
            a.proc.send_signal(signal.SIGHUP)
            wait_until(
                lambda: (
                    "running on with the configuration loaded before" in Path(a.logpath).read_text()
                ),
                30,
                "no word on the bad configuration",
            )
            with open(a.toml, "w") as f:
                f.write(good)
            at = progress(log_a, [stay_a, moved])
            wait_until(
                lambda: past(log_a, [stay_a, moved], at, 5), 30, "A stopped after the bad reload"
            )

            # The move, in one step, while the device publishes.
            at = moved_at = progress(log_a, [moved])
            t0 = time.monotonic()
            said = edgebus_ok("devices", "move", moved, "--from", a.toml, "--to", b.toml)
            assert "released by gw-a (its session ended" in said and "taken by gw-b" in said
            wait_until(
                lambda: past(log_b, [moved], at, ADVANCE),
                30,
                lambda: (
                    "no progress through B: a %r, b %r"
                    % (progress(log_a, [moved]), progress(log_b, [moved]))
                ),
            )
            moved_s = time.monotonic() - t0
            assert a.link(moved) is None  # A holds no link for it
            st = _holds(b, [moved])[moved]
            assert st["counters"].get("gaps", 0) == 0, st
            # A reload that finds nothing changed changes nothing.
            said = edgebus_ok("devices", "reload", "--config", b.toml)
            assert said.strip() == "2 device(s); added: none; removed: none; changed: none"
            # The others never noticed: one session each, none ended.
            for bridge, n in ((a, stay_a), (b, stay_b)):
                c = bridge.link(n)["counters"]
                assert c["sessions"] == 1 and not c.get("session_ends"), (n, c)
            assert a.stop(30) == 0, Path(a.logpath).read_text()  # SIGTERM seals the logs
            assert b.stop(30) == 0, Path(b.logpath).read_text()
        finally:
            a.close()
            b.close()

    print("%s moved: B's log %d numbers past A's within %.1f s" % (moved, ADVANCE, moved_s))
    for g in GATEWAYS:  # each log alone: clean, no record twice
        stats = tlog.ReadStats()
        seen = [
            (r["peer_node"], r["peer_sid"], r["seq"])
            for _pos, r in tlog.read_log(logs[g], stats=stats, decode_payload=False)
            if r["seq"] is not None
        ]
        assert stats.clean and len(seen) == len(set(seen)), g

    from edgebus.ingest.report import read_table, summarize

    ingest_once(spark, [logs[g] for g in GATEWAYS], table, ckpt)
    rows = read_table(spark, table).select("peer_node", "peer_sid", "seq", "gateway").collect()
    summary = summarize(spark, table)
    # Every number once, from 1 to the last: no hole and no copy, though the
    # move resent what A had not acknowledged.
    for n, mine in once_each(rows, summary, nodes).items():
        by_gw = {g: sorted(r["seq"] for r in mine if r["gateway"] == g) for g in GATEWAYS}
        if n == moved:  # A before the move, B after it
            assert by_gw["gw-a"] and by_gw["gw-b"] and by_gw["gw-a"][-1] < by_gw["gw-b"][-1]
            # A's log may hold a few numbers past what was sealed when the
            # move began, so count B's share from that mark, not by length.
            assert by_gw["gw-a"][0] == 1 and by_gw["gw-b"][-1] >= moved_at[moved] + ADVANCE
        else:
            assert not by_gw["gw-b" if n == stay_a else "gw-a"], n
