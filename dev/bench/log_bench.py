"""The bridge's telemetry appender (bridge/telemetry/appender.py) with group commit:
records/s it makes durable, and the latency from a publish on the host bus to
the acknowledgement a durable link would send (the group commit that covers
it), for each commit_ms. Real bus, real appender, real log on this machine's
disk; the link is a stand-in that counts what it delivered (rx_mark) and
notes when each mark is acknowledged.

Baselines from the same run: the appender with no sync point at all (the old
behaviour: records durable only at a seal), and one write + fsync of a small
record on the same filesystem (the floor of any durable acknowledgement)."""

import asyncio
import os
import shutil
import statistics
import tempfile
import time

import edgebus
from dev.bench.stats import summary
from edgebus.bridge import config as bridge_config
from edgebus.bridge.telemetry.appender import Appender
from edgebus.link.options import Options

COMMIT_MS = (0, 10, 20, 50, 100, 200)
NO_SYNC_MS = 10**7  # a commit period longer than any run: no sync point
RATE = 1000  # paced messages/s for the latency runs
WINDOW = 4096  # throughput: at most this many published, not yet appended


class CountingLink:
    """What the appender needs of a link: marks of what it delivered, and
    acknowledge(mark), which notes the time each delivered message became
    durable; not durable, so no window (the bench publishes on its own pace)."""

    opts = Options()  # not durable

    def __init__(self):
        self.counters = {"sessions": 1}
        self.delivered = 0
        self.acked = 0
        self.t_ack = []  # per message: when its ack came

    def rx_mark(self):
        return (self.delivered,) if self.delivered else None

    def acknowledge(self, mark):
        now = time.perf_counter()
        n = mark[0]
        if n > self.acked:
            self.t_ack.extend([now] * (n - self.acked))
            self.acked = n


def _cfg(d, commit_ms):
    # the bridge's own parser, so the bench's log is configured as a bridge's is
    cfg = bridge_config.parse(
        {
            "bridge": {"node": "bench-gateway"},
            "log": {
                "dir": d,
                "patterns": ["dev/#"],
                "segment_seconds": 3600,
                "segment_bytes": 64 * 1024 * 1024,
            },
        }
    )
    cfg.commit_ms = commit_ms  # NO_SYNC_MS is beyond what a config may say
    return cfg


async def _run(d, commit_ms, count, paced):
    bus = edgebus.Bus(q_length=64)
    link = CountingLink()
    app = Appender(bus, _cfg(d, commit_ms), links={"bench": link})
    task = asyncio.create_task(app.run())
    pub = bus.connect(principal="device:n1")
    t_pub = []
    t0 = time.perf_counter()
    i = 0
    while i < count:
        if paced:
            due = min(count, int((time.perf_counter() - t0) * RATE) + 1)
        else:
            due = min(count, app.appended + WINDOW)
        while i < due:
            pub.publish(
                "dev/n1/sensor/temp",
                {"temp": 21.5 + i % 7, "n": i},
                extra={"seq": i + 1, "ts": time.time()},
            )
            link.delivered += 1
            t_pub.append(time.perf_counter())
            i += 1
        await asyncio.sleep(0.001 if paced else 0)
    while link.acked < count and commit_ms != NO_SYNC_MS:
        await asyncio.sleep(0.0005)
    while app.appended < count:
        await asyncio.sleep(0.0005)
    t_end = time.perf_counter()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    st = app.stats()
    app.close()
    assert st["dropped"] == 0 and st["errors"] == 0, st
    lat = sorted(a - p for a, p in zip(link.t_ack, t_pub))
    return {"rate": count / (t_end - t0), "syncs": st["syncs"], "lat": lat}


def _fresh(root):
    d = tempfile.mkdtemp(dir=root)
    return d


def _fsync_floor(root, n):
    """Seconds for one append of a ~200-byte record + fsync, n times."""
    path = os.path.join(_fresh(root), "f")
    out = []
    with open(path, "wb", buffering=0) as f:
        for _ in range(n):
            t = time.perf_counter()
            f.write(b"x" * 200)
            os.fsync(f.fileno())
            out.append(time.perf_counter() - t)
    return sorted(out)


def _q(s, q):
    return 1000 * s[min(len(s) - 1, int(len(s) * q))] if s else float("nan")


def run(smoke=False, root=None):
    """Figures per commit_ms: durable records/s (median of runs), and paced
    publish -> acknowledged latency p50/p99 in ms."""
    base = root or os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "out"
    )
    os.makedirs(base, exist_ok=True)  # on the disk the checkout is on, not a tmpfs
    root = tempfile.mkdtemp(prefix="log-bench-", dir=base)
    n_tp = 3000 if smoke else 60000
    n_lat = 300 if smoke else 5000
    reps = 1 if smoke else 3
    try:
        floor = _fsync_floor(root, 50 if smoke else 500)
        res = {
            "records_tp": n_tp,
            "records_latency": n_lat,
            "rate_paced": RATE,
            "fsync_floor_ms": {"p50": _q(floor, 0.5), "p99": _q(floor, 0.99)},
            "no_sync_records_per_s": summary(
                [
                    asyncio.run(_run(_fresh(root), NO_SYNC_MS, n_tp, False))["rate"]
                    for _ in range(reps)
                ]
            ),
            "by_commit_ms": [],
        }
        for c in COMMIT_MS:
            tps, syncs = [], []
            for _ in range(reps):
                r = asyncio.run(_run(_fresh(root), c, n_tp, False))
                tps.append(r["rate"])
                syncs.append(r["syncs"])
            lats = [asyncio.run(_run(_fresh(root), c, n_lat, True)) for _ in range(reps)]
            p50 = [_q(x["lat"], 0.5) for x in lats]
            p99 = [_q(x["lat"], 0.99) for x in lats]
            res["by_commit_ms"].append(
                {
                    "commit_ms": c,
                    "records_per_s": summary(tps),
                    "syncs_per_run": statistics.median(syncs),
                    "latency_p50_ms": summary(p50),
                    "latency_p99_ms": summary(p99),
                    "syncs_per_s_paced": statistics.median(x["syncs"] * RATE / n_lat for x in lats),
                }
            )
            print(
                "  commit_ms %d: %.0f records/s, p50 %.1f ms, p99 %.1f ms"
                % (c, statistics.median(tps), statistics.median(p50), statistics.median(p99)),
                flush=True,
            )
        return res
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run("--smoke" in sys.argv), indent=1))
