"""Gateway failover over two serial lines (docs/protocol.md section 16): a
real-firmware MicroPython device with a UART uplink to two gateways, each a
pty cable (tools/sim/ptycable.py) to its own bridge process with its own log.
A UART has no probe, so away from the primary the device goes back to see
every probe_every seconds and returns to the backup while the primary is
still silent; once the primary's bridge is back, it stays there. The two
logs together hold every sequence number of the boot once, no log holds one
twice. (The MQTT case, with Spark ingest: test_e2e_failover.py.)"""

import json
from pathlib import Path

import pytest

from edgebus import tlog
from edgebus.tools.sim.fleet import Fleet
from edgebus.tools.sim.ptycable import PtyCable
from tests.conftest import wait_until
from tests.host.e2e.e2ekit import gateway_bridge, past, progress, reported

pytestmark = [pytest.mark.micropython]

PERIOD = 0.05  # 20 readings/s
ADVANCE = 30
LINES = ("line-a", "line-b")


def _serial(cable, dev):
    return '[[serial]]\nnode = "%s"\nport = "%s"\nkey = "%s"\n' % (dev["node"], cable.b, dev["key"])


def _running(b, n):
    try:
        return Path(b.logpath).read_text().count(" running: ") >= n
    except FileNotFoundError:
        return False


def test_device_fails_over_between_two_serial_lines_and_back(tmp_path):
    out = tmp_path / "serial-failover"
    with PtyCable() as ca, PtyCable() as cb:
        uplink = {
            "gateways": [{"name": "line-a", "port": ca.a}, {"name": "line-b", "port": cb.a}],
            "failover_after": 2,
            "failback": True,
            "probe_every": 3,
        }
        with Fleet(
            out / "fleet",
            serial=1,
            period=PERIOD,
            health_period=1.0,
            link={"heartbeat": 1.0},
            uplink=uplink,
        ) as fleet:
            dev = fleet.devices[0]
            nodes = [dev["node"]]
            a, log_a = gateway_bridge(out, "line-a", _serial(ca, dev))
            b, log_b = gateway_bridge(out, "line-b", _serial(cb, dev))
            try:
                a.start()
                b.start()
                wait_until(
                    lambda: _running(a, 1) and _running(b, 1), 30, "the bridges did not start"
                )
                fleet.start()
                wait_until(
                    lambda: past(log_a, nodes, {nodes[0]: 0}, ADVANCE), 30, "no progress on line-a"
                )
                # The primary's bridge dies: its line goes silent.
                a.kill()
                at = progress(log_a, nodes)
                wait_until(
                    lambda: past(log_b, nodes, at, ADVANCE),
                    30,
                    lambda: "no move to line-b: %r" % progress(log_b, nodes),
                )
                # Away, the device goes back to see (no probe on a UART) and,
                # the line being silent, comes back: it keeps delivering here.
                wait_until(
                    lambda: reported(log_b, nodes, gateway="line-b", moves=3, failbacks=1),
                    30,
                    "no failed look at line-a reported through line-b",
                )
                on_b = progress(log_b, nodes)
                a.start()
                wait_until(
                    lambda: past(log_a, nodes, on_b, ADVANCE),
                    30,
                    lambda: (
                        "no failback: a %r, b %r" % (progress(log_a, nodes), progress(log_b, nodes))
                    ),
                )
                wait_until(
                    lambda: reported(log_a, nodes, gateway="line-a"),
                    30,
                    "no sys/health through line-a after the failback",
                )
                assert a.stop(30) == 0, Path(a.logpath).read_text()
                assert b.stop(30) == 0, Path(b.logpath).read_text()
            finally:
                a.close()
                b.close()

    n = nodes[0]
    seqs = {}
    health = []
    for g, log in zip(LINES, (log_a, log_b)):
        stats = tlog.ReadStats()
        keys = []
        for _pos, r in tlog.read_log(log, stats=stats, decode_payload=False):
            assert r["peer_node"] == n, r
            if r["seq"] is not None:
                keys.append((r["peer_sid"], r["seq"]))
                if r["topic"] == ("dev", n, "sys", "health"):
                    p = r["payload"]
                    p = json.loads(p) if type(p) in (str, bytes) else p
                    health.append((r["seq"], p["uplink"]))
        assert stats.clean, (g, stats)
        assert len(keys) == len(set(keys)), "%s logged a record twice" % g
        seqs[g] = set(keys)
    sids = {sid for g in LINES for sid, _ in seqs[g]}
    assert len(sids) == 1  # one boot, whatever line carried it
    got = sorted({s for g in LINES for _, s in seqs[g]})
    assert got == list(range(1, got[-1] + 1)), sorted(set(range(1, got[-1] + 1)) - set(got))
    assert seqs["line-a"] and seqs["line-b"]
    up = max(health)[1]
    assert up["gateway"] == "line-a" and up["failbacks"] >= 2 and up["moves"] >= 4, up
    assert got[-1] >= up["tx_seq"] - 1
    print(
        "seq 1..%d once in the two logs (line-a %d, line-b %d, %d in both); moves %d, "
        "failbacks %d (looks at a silent line-a included)"
        % (
            got[-1],
            len(seqs["line-a"]),
            len(seqs["line-b"]),
            len(seqs["line-a"] & seqs["line-b"]),
            up["moves"],
            up["failbacks"],
        )
    )
