"""One bad device, with real parts: three honest devices (dev/swarm,
CPython, 5 readings/s) and a hostile one holding its own valid key
(tests/reliability/hostile_device.py), over a real mosquitto into a real
bridge process with its telemetry log. The honest devices' ACK latency is
measured quiet, then while the hostile device floods in one of the ways the
protocol allows: without acknowledgements or a window (refused by default),
ignoring the window it is given (muted: its frames go unread for a while), or
retaining a new fact with every reading (held to its retained quota).

Asserted: none of the honest devices' readings is lost or doubled in the
log; their ACK p99 under the flood stays within a bound far below what the
flood used to cost (seconds), generous for a loaded machine; the bridge
counts the hostile device's refusals on its link and names it in its log.
The ratio to the quiet run is a figure (RELIABILITY.md), not an assertion."""

import json
import os
import subprocess
import time

import pytest

from dev.broker import Mosquitto
from dev.harness.bridge import BridgeProcess
from dev.harness.process import ROOT, env, python
from dev.swarm import Swarm, check, figures
from tests.conftest import wait_until

pytestmark = pytest.mark.mosquitto

HONEST = 3
RATE = 5.0
EVIL = "evil-1"
EVIL_KEY = "hostile-but-keyed"


def _steady(swarm, seconds):
    """Let the swarm run ``seconds`` (a measuring window, not a wait for a
    condition), failing early if a worker died."""
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        swarm.progress()
        time.sleep(0.2)


def trial(work, mode, flood_s, quiet_s):
    """The honest swarm quiet for ``quiet_s``, then beside the hostile
    device in ``mode`` for ``flood_s``: figures, the check of the honest
    devices' log, the hostile device's report and the bridge's word on it."""
    log_dir = os.path.join(work, "tlog")
    with Mosquitto() as broker:
        swarm = Swarm(HONEST, ("127.0.0.1", broker.port), rate=RATE, workers=1, prefix="honest")
        devices = swarm.bridge_config()["mqtt"]["devices"] + [{"node": EVIL, "key": EVIL_KEY}]
        toml = os.path.join(work, "bridge.toml")
        with open(toml, "w") as f:
            f.write(
                '[bridge]\nnode = "gw"\nstate_dir = "%s"\nsocket = "%s"\n'
                '[log]\ndir = "%s"\npatterns = ["dev/#"]\n'
                '[quota]\nretained = 100\n[mqtt]\nurl = "mqtt://127.0.0.1:%d"\ndevices = [\n%s]\n'
                % (
                    os.path.join(work, "state"),
                    os.path.join(work, "bridge.sock"),
                    log_dir,
                    broker.port,
                    "".join(
                        '  {node = "%s", key = "%s"},\n' % (d["node"], d["key"]) for d in devices
                    ),
                )
            )
        bridge = BridgeProcess(work, toml=toml).start().ready(60)
        try:
            with swarm:
                wait_until(lambda: swarm.progress()["ever_up"] == HONEST, 60, "honest sessions")
                _steady(swarm, quiet_s)
                swarm.phase()  # from here the honest ACKs count as "after": beside the flood
                evil = subprocess.run(
                    python(
                        "tests.reliability.hostile_device",
                        mode,
                        EVIL,
                        EVIL_KEY,
                        str(broker.port),
                        str(flood_s),
                    ),
                    cwd=ROOT,
                    env=env(ROOT),
                    capture_output=True,
                    text=True,
                    timeout=flood_s + 60,
                )
                swarm.stop_publishing()
                wait_until(lambda: not swarm.progress()["behind"], 60, "honest readings acked")
                summary = swarm.summary()
                link = bridge.link(EVIL)
                link["honest_muted"] = sum(
                    bridge.link(d["node"])["counters"].get("muted", 0) for d in devices[:-1]
                )
            bridge.stop(timeout=60)
        finally:
            bridge.close()
        said = bridge.log()
    assert evil.returncode == 0, evil.stderr[-3000:]
    hostile = json.loads(evil.stdout.strip().splitlines()[-1])
    return figures(summary), check(log_dir, summary), hostile, link, said


@pytest.fixture(scope="module", params=["unpaced", "ignore", "retain"])
def run(request, tmp_path_factory):
    soak = request.config.getoption("--soak") or os.environ.get("EDGEBUS_SOAK") == "1"
    work = str(tmp_path_factory.mktemp("hostile-" + request.param))
    return (request.param,) + trial(work, request.param, 30 if soak else 8, 20 if soak else 6)


def test_no_honest_reading_is_lost_or_doubled(run):
    _mode, fig, chk, _hostile, _link, _said = run
    assert chk["ok"], chk["totals"]
    t = chk["totals"]
    assert t["acked_missing"] == 0 and t["duplicates"] == 0
    assert fig["acked"] == fig["sent"] and fig["sent"] >= HONEST * RATE * 10


def test_honest_latency_beside_the_flood_stays_far_below_what_it_cost(run, rel):
    """Before, p99 beside such a device was 6.6-12.7 s (its quiet run 75 ms):
    allowed here, for a loaded machine, 10x the quiet p99 plus one second."""
    mode, fig, _chk, hostile, _link, _said = run
    quiet, flood = fig["ack_p99_ms"], fig["ack_after_p99_ms"]
    assert quiet is not None and flood is not None, fig
    assert flood <= 10 * quiet + 1000, (quiet, flood)
    rel.record(
        "hostile device: " + mode,
        hostile["made"],
        honest_ack_p99_quiet_ms=quiet,
        honest_ack_p99_flood_ms=flood,
        ratio=round(flood / max(1, quiet), 2),
        honest_ack_p50_quiet_ms=fig["ack_p50_ms"],
        honest_ack_p50_flood_ms=fig["ack_after_p50_ms"],
        hostile_frames_out=hostile["frames_out"],
    )


def test_the_bridge_counts_the_hostile_device_and_names_it(run):
    mode, _fig, _chk, hostile, link, said = run
    c = link["counters"]
    if mode == "unpaced":
        assert c.get("unpaced_refused", 0) >= 1 and c.get("sessions", 0) == 0, c
        assert "pace_required" in (hostile["last_error"] or ""), hostile
        want = "sessions refused"
    elif mode == "ignore":
        # Muted (bridge/links/quota.py Mutes: its frames go unread for a while) when
        # it floods past the mark; on a loaded machine its process may not
        # get there, and its frames past the window are refused all the same.
        refused = ("muted", "over_window", "over_quota", "over_share")
        assert sum(c.get(k, 0) for k in refused) > 0, c
        want = EVIL
    else:
        assert c.get("retained_refused", 0) >= 1, c
        want = "retained facts over its quota"
    assert "device %s" % EVIL in said and want in said, said[-3000:]
    assert link["honest_muted"] == 0
