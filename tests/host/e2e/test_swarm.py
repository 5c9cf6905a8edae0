"""dev/swarm.py, the many-device simulator, with real parts: 20 CPython
devices in 2 processes over a real mosquitto into a real bridge process with
its telemetry log (the benchmark's trial, dev/bench/swarm_bench.py, at a
size CI affords); and its checker, which must catch a reading the log lost
after the bridge acknowledged it."""

import json
import os

import pytest

from dev.bench.swarm_bench import trial
from dev.swarm import check
from edgebus import tlog

pytestmark = pytest.mark.mosquitto  # mosquitto starts inside the trial

DEVICES = 20


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One trial: a 1 s broker outage, the devices' readings drained after."""
    work = str(tmp_path_factory.mktemp("swarm"))
    fig = trial(work, DEVICES, outage=1.0, steady=1.0, workers=2)
    return work, fig


def test_every_device_has_a_session_and_the_log_holds_every_acknowledged_reading(run):
    _work, fig = run
    assert fig["ever_up"] == DEVICES and fig["sessions_up_s"] is not None
    assert fig["sessions"] >= 2 * DEVICES  # one before the outage, one after
    assert fig["sent"] >= 3 * DEVICES and fig["acked"] == fig["sent"]
    c = fig["check"]
    assert c["logged"] == fig["sent"]
    assert c["acked_missing"] == 0 and c["duplicates"] == 0 and c["unknown"] == 0
    assert fig["check_ok"] and fig["drain_s"] is not None
    assert fig["ack_p50_ms"] is not None and fig["commits_per_s"] > 0


def _copy_log(src, dst, skip=None, twice=None):
    """src's records into a new log dst, leaving out the record for which
    skip(record) holds and writing the one for which twice(record) holds twice."""
    n = 0
    with tlog.LogWriter(dst) as w:
        for _pos, r in tlog.read_log(src):
            if skip and skip(r):
                n += 1
                continue
            w.append(r)
            if twice and twice(r):
                w.append(r)
    return n


def test_the_checker_catches_a_lost_acknowledged_reading_and_a_duplicate(run, tmp_path):
    work, _fig = run
    with open(os.path.join(work, "swarm.json")) as f:
        summary = json.load(f)
    d = summary["devices"][3]
    assert d["acked"] >= 2

    def lost(r):
        return r["peer_node"] == d["node"] and r["seq"] == 2

    assert _copy_log(os.path.join(work, "tlog"), str(tmp_path / "lost"), skip=lost) == 1
    res = check(str(tmp_path / "lost"), summary)
    assert not res["ok"] and res["totals"]["acked_missing"] == 1
    assert res["devices"][d["node"]]["acked_missing"] == 1
    assert res["devices"][d["node"]]["gaps"] == 1
    _copy_log(os.path.join(work, "tlog"), str(tmp_path / "dup"), twice=lost)
    res = check(str(tmp_path / "dup"), summary)
    assert not res["ok"] and res["totals"]["duplicates"] == 1
    assert res["totals"]["acked_missing"] == 0


def test_the_load_generator_s_readings_are_sealed_numbered_and_all_logged(tmp_path):
    """Lean devices (dev/swarm.py, Lean) seal their readings ahead and write them
    to their sockets: the bridge takes every one (no forged, replayed or
    refused frame counted, no gap) and acknowledges what its log holds."""
    fig = trial(str(tmp_path), DEVICES, steady=2.0, workers=2, lean=True, rate=5.0)
    assert fig["ever_up"] == DEVICES and fig["sessions"] == DEVICES
    assert fig["sent"] >= 5 * DEVICES and fig["acked"] == fig["sent"]
    assert fig["bridge_links"] == {"sessions": DEVICES}  # nothing refused, no churn
    c = fig["check"]
    assert c["logged"] == fig["sent"] and fig["check_ok"] and c["gaps"] == 0
    with open(os.path.join(str(tmp_path), "swarm.json")) as f:
        devs = json.load(f)["devices"]
    assert all(d["lean_first"] == 1 and d["lean_stopped"] is None for d in devs)
    assert all(d["tx_seq"] == d["sent"] + 1 for d in devs)
