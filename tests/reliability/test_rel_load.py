"""Load: the fleet simulator's MicroPython devices (the real
firmware, tools/sim/fleet.py) over real mosquitto into the bridge (its own
process) and its telemetry log: 50 devices at 20 messages/s each. Figures
(messages/s, device -> log latency p50/p99, bridge RSS over time) go to
RELIABILITY.md; asserted: zero gaps, drops and duplicates while nothing is
faulted, every device's sequence contiguous, bridge RSS flat (generous)."""

import json
import os
import shutil
import subprocess
import time

import pytest

from dev.broker import Mosquitto
from dev.harness.bridge import BridgeProcess
from edgebus import tlog
from edgebus.tools.sim.fleet import Fleet, bridge_toml
from tests.conftest import ROOT

# mosquitto and the fleet's micropython devices start in the test body.
pytestmark = [pytest.mark.mosquitto, pytest.mark.micropython]

DEVICES = 50
RATE = 20


def _rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def test_fleet_of_50_micropython_devices_over_mqtt(tmp_path, rel):
    seconds = rel.n(20, 90)
    with (
        Mosquitto() as broker,
        Fleet(
            tmp_path / "fleet", mqtt=DEVICES, broker=("127.0.0.1", broker.port), health_period=3600
        ) as fleet,
    ):
        shutil.copy(os.path.join(ROOT, "tests", "reliability", "loadgen.py"), fleet.bundle)
        for d in fleet.devices:
            with open(d["config"]) as f:
                cfg = json.load(f)
            cfg["services"] = [{"module": "loadgen", "rate": RATE}]
            with open(d["config"], "w") as f:
                json.dump(cfg, f)
        sock = tmp_path / "state" / "bridge.sock"
        toml = tmp_path / "bridge.toml"
        toml.write_text(
            '[bridge]\nstate_dir = "%s"\nsocket = "%s"\nkeys = "%s"\nheartbeat = 2.0\n'
            'queue_len = 256\n[log]\ndir = "%s"\nsegment_seconds = 5\n%s'
            % (
                tmp_path / "state",
                sock,
                fleet.keys,
                tmp_path / "log",
                bridge_toml(fleet.bridge_config(("127.0.0.1", broker.port))),
            )
        )
        br = BridgeProcess(str(tmp_path), toml=toml).start()
        try:
            fleet.start()

            def up(st):
                return sum(
                    1
                    for k, l in st["links"].items()
                    if k.startswith("mqtt:") and l["state"] == "up"
                )

            br.wait_status(
                lambda st: up(st) == DEVICES,
                90,
                lambda st: "only %d devices up" % (up(st) if st else 0),
                step=1,
            )
            time.sleep(2)  # past the start-up transient
            t_start = time.time()
            rss = []
            while time.time() - t_start < seconds:
                rss.append(_rss_kb(br.proc.pid))
                time.sleep(1)
            t_end = time.time()
            st = br.status(10)
            assert st is not None, "no status from the bridge"
            dead = [(d["node"], d["exits"]) for d in fleet.devices if d["exits"]]
            assert not dead, dead
            t_term = time.monotonic()
            try:
                rc = br.stop(30)
            except subprocess.TimeoutExpired:
                rc = "still running"
            assert rc == 0, (rc, br.log()[-3000:])
            print("bridge stopped in %.1f s" % (time.monotonic() - t_term))
        finally:
            br.close()
    links = {k: l for k, l in st["links"].items() if k.startswith("mqtt:")}
    assert len(links) == DEVICES
    gaps = sum(l["counters"].get("gaps", 0) for l in links.values())
    dups = sum(l["counters"].get("duplicates", 0) for l in links.values())
    ends = sum(l["counters"].get("session_ends", 0) for l in links.values())
    dropped = st["log"]["dropped"]
    logged = [r for _, r in tlog.read_log(str(tmp_path / "log"))]
    recs = [r for r in logged if r["topic"][-1] == "load"]
    per = {}  # every sequenced record: a device numbers all it exports in one sequence
    for r in logged:
        if r["seq"] is not None:
            per.setdefault(r["peer_node"], []).append(r)
    assert len(per) == DEVICES
    holes = 0
    where = []
    for node, rs in per.items():
        seqs = [r["seq"] for r in rs]
        assert len(set(seqs)) == len(seqs), node
        holes += seqs[-1] - seqs[0] + 1 - len(seqs)
        for a, b in zip(rs, rs[1:]):
            if b["seq"] != a["seq"] + 1:
                where.append(
                    (
                        node,
                        a["seq"],
                        b["seq"],
                        round(a["ts_host"] - t_start, 2),
                        a["peer_sid"] == b["peer_sid"],
                    )
                )
    window = [r for r in recs if t_start <= r["ts_host"] < t_end]
    lat = [(r["ts_host"] * 1e6 - r["payload"]["t"]) / 1000 for r in window]
    rate = len(window) / (t_end - t_start)
    assert gaps == 0 and dups == 0 and dropped == 0 and holes == 0 and ends == 0, (
        gaps,
        dups,
        dropped,
        holes,
        ends,
        where[:20],
        {
            k: (l["counters"], l.get("transport"))
            for k, l in links.items()
            if l["counters"].get("gaps")
            or any((l.get("transport") or {}).get(c) for c in ("oversize", "dropped"))
        },
    )
    # RSS flat: the second half never above the first half's peak by much.
    half = len(rss) // 2
    growth = max(rss[half:]) - max(rss[:half])
    assert growth < 50 * 1024, rss
    rel.record(
        "load: 50 MicroPython devices over MQTT at 20 msg/s",
        DEVICES,
        window_s=round(t_end - t_start, 1),
        messages=len(window),
        messages_per_s=round(rate),
        latency_p50_ms=round(_pct(lat, 0.5), 2),
        latency_p99_ms=round(_pct(lat, 0.99), 2),
        latency_max_ms=round(max(lat), 1),
        rss_mb_first=round(rss[0] / 1024, 1),
        rss_mb_last=round(rss[-1] / 1024, 1),
        rss_mb_max=round(max(rss) / 1024, 1),
        rss_growth_2nd_half_kb=growth,
        rss_mb_series=[round(x / 1024, 1) for x in rss[:: max(1, len(rss) // 12)]],
        gaps=gaps,
        duplicates=dups,
        log_dropped=dropped,
        seq_holes=holes,
    )
