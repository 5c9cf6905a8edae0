"""The bridge's log on a disk that fills, with real parts: the bridge as its
own process, its log on a 2 MiB tmpfs, a real mosquitto and CPython devices
(dev/swarm.py) sending readings. The disk runs low (a warning), then full:
the log fails loudly (status, /metrics, its log) and acknowledges nothing
while the devices keep their readings spooled; once space is freed it
resumes by itself, and every reading is in the log once (or lost only
where a device's spool overflowed). A SIGTERM while it is failed exits 0
with the state saved, and the next start takes the rest.

The disk is a tmpfs mounted for the test (root, as on this machine and in
CI); where mounting is not permitted the tests are skipped, saying so."""

import json
import os
import subprocess
import time
import urllib.request

import pytest

from dev.broker import Mosquitto, free_port
from dev.harness.bridge import BridgeProcess
from dev.harness.poll import wait_until
from dev.swarm import Swarm, check
from edgebus.tools.commands.status import render

pytestmark = pytest.mark.mosquitto

DEVICES = 4
RATE = 25.0  # readings a second per device: the log grows by ~30 KB/s
MIN_FREE = 200 * 1024  # [log] min_free_bytes: the warning
# A group commit every 250 ms: when the disk fills, readings of a quarter
# second are delivered and not yet durable, which the devices must send again.
COMMIT_MS = 250
ENOSPC = "No space left on device (ENOSPC)"


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs at tmp_path/disk, unmounted at the end."""
    d = tmp_path / "disk"
    d.mkdir()
    try:
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(d)],
            capture_output=True,
            text=True,
        )
        why = r.stderr.strip() if r.returncode else None
    except OSError as e:  # no mount command
        why = str(e)
    if why is not None:
        pytest.skip("a small disk needs mount -t tmpfs (root): %s" % why)
    try:
        yield d
    finally:
        if subprocess.run(["umount", str(d)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(d)], check=True)  # busy: detached, freed later


def _fill(disk, leave):
    """A ballast file on disk that leaves about ``leave`` bytes free; its path."""
    st = os.statvfs(disk)
    path = os.path.join(disk, "ballast")
    with open(path, "ab") as f:
        f.write(bytes(max(0, st.f_bavail * st.f_frsize - leave)))
    return path


def _metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        return r.read().decode()


class Rig:
    """The broker, the swarm and the bridge of a test, its log on ``disk``."""

    def __init__(self, tmp_path, disk, broker):
        self.log_dir = str(disk / "tlog")
        self.metrics = free_port()
        self.swarm = Swarm(
            DEVICES, ("127.0.0.1", broker.port), rate=RATE, log=str(tmp_path / "swarm.log")
        )
        toml = tmp_path / "bridge.toml"
        toml.write_text(
            '[bridge]\nnode = "gw"\nstate_dir = "%s"\nsocket = "%s"\nheartbeat = 1.0\n'
            'metrics = "127.0.0.1:%d"\n'
            '[log]\ndir = "%s"\npatterns = ["dev/#"]\nsegment_bytes = %d\n'
            "segment_seconds = 3600\nmin_free_bytes = %d\ncommit_ms = %d\n\n%s"
            % (
                tmp_path / "state",
                tmp_path / "bridge.sock",
                self.metrics,
                self.log_dir,
                512 * 1024,  # a roll seals before the disk is full: the .open fills it
                MIN_FREE,
                COMMIT_MS,
                self.swarm.toml(),
            )
        )
        self.state_file = tmp_path / "state" / "links.json"
        self.bridge = BridgeProcess(str(tmp_path), toml=toml)

    def start(self):
        self.bridge.start().ready(60)

    def failed(self, timeout=60):
        """The bridge's status once its log has failed."""
        return self.bridge.wait_status(
            lambda s: s["log"]["failed"], timeout, "the log failed", step=0.05
        )

    def drain(self):
        """Publishing stopped, every device's readings acknowledged: its summary."""
        self.swarm.stop_publishing()
        ok, p = self.swarm.wait(lambda p: p["up"] == DEVICES and not p["behind"], 90)
        assert ok, p
        return self.swarm.summary()


def _logged_once(log_dir, summary):
    """Every device's numbers in the log once, but what its spool evicted
    (never one it had acknowledged); returns the checker's totals."""
    res = check(log_dir, summary)
    t = res["totals"]
    assert res["ok"] and t["acked_missing"] == 0 and t["spooled_missing"] == 0, t
    for d in summary["devices"]:
        c = res["devices"][d["node"]]
        assert c["logged"] + c["evicted_missing"] == d["sent"], (d, c)
        assert c["evicted_missing"] <= d["spool_evicted"], (d, c)
    return t


def test_a_full_disk_fails_the_log_loudly_and_it_resumes_once_space_is_freed(
    tmp_path, small_disk, rel
):
    with Mosquitto() as broker:
        rig = Rig(tmp_path, small_disk, broker)
        ballast = _fill(small_disk, 320 * 1024)
        try:
            rig.start()
            with rig.swarm:
                # Low: the warning, before anything fails.
                st = rig.bridge.wait_status(
                    lambda s: (s["log"]["free_bytes"] or MIN_FREE) < MIN_FREE,
                    60,
                    "the disk below min_free_bytes",
                    step=0.05,
                )
                assert "log disk: " in render(st) and "LOW" in render(st), render(st)
                wait_until(lambda: "below [log] min_free_bytes" in rig.bridge.log(), 10)
                assert "retention_bytes" in rig.bridge.log()

                # Full: failed, said everywhere; nothing acknowledged meanwhile.
                st = rig.failed()
                lg = st["log"]
                assert lg["failed"] == ENOSPC and lg["state"] == "failed", lg
                text = render(st)
                assert "log health: FAILED" in text and "log FAILED since" in text, text
                m = _metrics(rig.metrics)
                assert "edgebus_log_failed 1.0" in m and "edgebus_log_pushback 1.0" in m, m
                assert 'edgebus_log_failure_info{reason="%s"} 1.0' % ENOSPC in m, m
                assert "edgebus_log_failures_total 1.0" in m and "edgebus_log_low_space 1.0" in m
                wait_until(lambda: "the log failed: " + ENOSPC in rig.bridge.log(), 10)
                rig.bridge.wait_status(lambda s: s["log"]["retries"] >= 1, 30, "a retry")
                acked = rig.swarm.progress()["acked"]
                rig.bridge.wait_status(lambda s: s["log"]["retries"] >= 3, 30, "3 retries")
                assert rig.swarm.progress()["acked"] == acked  # none while failed

                # Freed: it resumes by itself and appends again.
                appended = rig.bridge.status()["log"]["appended"]
                os.unlink(ballast)
                t0 = time.monotonic()
                rig.bridge.wait_status(
                    lambda s: not s["log"]["failed"] and s["log"]["appended"] > appended,
                    30,
                    "the log resumed",
                    step=0.05,
                )
                resumed_s = time.monotonic() - t0
                assert "edgebus_log_failed 0.0" in _metrics(rig.metrics)
                assert "the log resumed after" in rig.bridge.log()
                summary = rig.drain()
                assert rig.bridge.stop(60) == 0
        finally:
            rig.bridge.close()
    assert "Traceback" not in rig.bridge.log()
    t = _logged_once(rig.log_dir, summary)
    rel.record(
        "log: disk full, freed",
        tried=1,
        devices=DEVICES,
        logged=t["logged"],
        evicted=t["evicted_missing"],
        resumed_after_free_s=round(resumed_s, 2),
    )


def test_a_stop_while_the_log_is_failed_exits_0_and_the_next_start_takes_the_rest(
    tmp_path, small_disk
):
    with Mosquitto() as broker:
        rig = Rig(tmp_path, small_disk, broker)
        ballast = _fill(small_disk, 160 * 1024)
        try:
            rig.start()
            with rig.swarm:
                rig.failed()
                t_stop = time.time()
                assert rig.bridge.stop(60) == 0
                out = rig.bridge.log()
                assert "Traceback" not in out
                assert "log left to recovery (failed: %s) and state saved" % ENOSPC in out, out
                # The state saved at the stop promises no more than the devices
                # were acknowledged: the next start takes the rest from them.
                assert os.path.getmtime(rig.state_file) >= t_stop
                state = json.loads(rig.state_file.read_text())
                for d in rig.swarm.summary()["devices"]:
                    st = state["mqtt:" + d["node"]]
                    assert st["peer_sid"] == d["sid"] and st["rx_next"] <= d["acked"] + 1, (d, st)

                os.unlink(ballast)
                rig.start()
                summary = rig.drain()
                assert rig.bridge.stop(60) == 0
        finally:
            rig.bridge.close()
    assert "Traceback" not in rig.bridge.log()
    _logged_once(rig.log_dir, summary)
