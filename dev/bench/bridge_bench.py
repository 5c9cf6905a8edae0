"""Device -> host through mosquitto, every party a process of its own as in a
deployment: an edgebus device (dev/bench/bridge_device.py, CPython and
MicroPython) to the bridge (the daemon's Bridge, dev/bench/bridge_procs.py)
and onto its host bus, against a raw paho publisher process -> a raw paho
subscriber process through the same broker, runs interleaved in one session.

Payloads carry their send time (time.time_ns(), one clock for all processes),
so latency is arrival minus send and the rate runs from the first send to the
last arrival."""

import json
import os
import shutil
import statistics
import tempfile

from dev.bench.procs import Child
from dev.bench.stats import summary
from dev.broker import Mosquitto
from dev.harness.process import ROOT, python
from edgebus.tools.boardkit import mpybuild

NODE, KEY = "b1", "k"
RAW_TOPIC = "raw/sensor/v"
LEAN_TOPIC = "raw/sensor/lean"  # the same publisher, to the bridge's MQTT client alone
PACE_MS = 5  # the paced runs: 200 messages/s
LOG_PREFIX = "edgebuslog"  # the bridge with a log: its own MQTT prefix
# The bridge's seal per device node: NODE takes its [bridge] seal, "auto" (on
# MQTT: encrypt); the others set their entry's seal, and the device the same.
SEAL_NODES = {"mac": NODE + "m", "off": NODE + "o"}


def _lat(samples):
    s = sorted(samples)
    if not s:
        return {"p50_ms": float("nan"), "p99_ms": float("nan")}
    return {
        "p50_ms": 1000 * s[len(s) // 2],
        "p99_ms": 1000 * s[min(len(s) - 1, int(len(s) * 0.99))],
    }


def _cdf(samples):
    """Latency quantiles in ms (0, 1, ..., 99, 99.5, 99.9, 100 %): a compact CDF."""
    s = sorted(samples)
    qs = [float(q) for q in range(100)] + [99.5, 99.9, 100.0]
    return {"q": qs, "ms": [1000 * s[min(len(s) - 1, int(len(s) * q / 100))] for q in qs]}


class Bench:
    """The broker, the two receivers (bridge, paho subscriber) and their logs."""

    def __init__(self, tmp, profile=None, log_dir=None):
        """log_dir: also run a second bridge (MQTT prefix LOG_PREFIX) that
        writes its telemetry log there, so its device links acknowledge
        what the log's group commits made durable."""
        self.tmp = tmp
        self.broker = Mosquitto().start()
        port = self.port = self.broker.port
        log = os.path.join(tmp, "procs.log")
        self.log = log
        self.bridge = self._bridge("bridge", {}, profile)
        self.bridge_log = None
        if log_dir:
            self.bridge_log = self._bridge(
                "bridge-log", {"log": {"dir": log_dir}}, None, {"prefix": LOG_PREFIX}
            )
        self.sub = Child(python("dev.bench.bridge_procs", "paho-sub", port, RAW_TOPIC), log=log)
        self.lean_sub = Child(
            python("dev.bench.bridge_procs", "lean-sub", port, LEAN_TOPIC), log=log
        )
        self.bridge.expect("ready")
        if self.bridge_log:
            self.bridge_log.expect("ready")
        self.sub.expect("ready")
        self.lean_sub.expect("ready")
        self.mpy_dir = None

    def _bridge(self, name, extra, profile, mqtt=None):
        cfg = os.path.join(self.tmp, name + ".json")
        c = {
            # paced = false: the "off" variants measure a device without acknowledgements
            "bridge": {
                "state_dir": os.path.join(self.tmp, name + "-state"),
                "heartbeat": 2.0,
                "paced": False,
            },
            # One device sends as fast as it can (the "off" ones without a
            # window): what is measured is the bridge taking them, not the
            # per-device quota (1,000 readings and 256 KiB a second by
            # default) nor the mute.
            "quota": {"mute": False, "readings": 10000000, "bytes": 1 << 30},
            "mqtt": dict(
                {
                    "url": "mqtt://127.0.0.1:%d" % self.port,
                    "client_id": "bench-" + name,
                    "devices": [{"node": NODE, "key": KEY}]
                    + [{"node": v, "key": KEY, "seal": k} for k, v in SEAL_NODES.items()],
                },
                **(mqtt or {}),
            ),
        }
        c.update(extra)
        with open(cfg, "w") as f:
            json.dump(c, f)
        return Child(
            python("dev.bench.bridge_procs", "bridge", cfg, "dev/+/sensor/#")
            + (["--profile", profile] if profile else []),
            log=self.log,
        )

    def _run(self, rx, sender, n, timeout, device=False, lossy=False):
        """lossy: a device without acknowledgements, whose frames past its
        share of the bridge's queue are dropped and counted (over_share; in
        gaps but for a burst's last; nothing sends them again): a loss the
        counters account for is no error."""
        rx.send("expect %d %s" % (n, timeout))
        rx.expect("ok")
        s = Child(
            sender, cwd=self.mpy_dir if sender[0] == mpybuild.micropython() else None, log=self.log
        )
        try:
            res = json.loads(rx.line(timeout + 30))
            if device:  # the device's word on its acknowledgements
                while True:
                    line = s.line(60)
                    if line.startswith("{"):
                        res["device"] = json.loads(line)
                        break
        finally:
            s.kill()  # devices idle once done; paho publishers have exited
            s.close()
        # Each frame dropped past its share is counted (over_share), in a gap
        # too unless it was among the burst's last.
        counted = max(res["gaps"], res.get("dropped", 0)) if lossy else 0
        if res["received"] + counted < n:
            raise RuntimeError(
                "lost messages: %d of %d arrived, %d gaps and %d dropped counted (see %s)"
                % (res["received"], n, res["gaps"], res.get("dropped", 0), self.log)
            )
        return res

    def edgebus(self, n, pace=0, timeout=60, ack=True, log=False, seal="auto"):
        """The CPython device -> the bridge (log: the one writing its log);
        ack: the device offers acknowledgements; seal: its and the bridge's."""
        dev = python(
            "dev.bench.bridge_device",
            "127.0.0.1",
            self.port,
            SEAL_NODES.get(seal, NODE),
            KEY,
            n,
            pace,
            n + 16,
            0,
            int(ack),
            LOG_PREFIX if log else "edgebus",
            seal,
        )
        rx = self.bridge_log if log else self.bridge
        # Without acknowledgements a lost frame never comes: the receiver
        # stops after 10 s without one rather than the whole timeout.
        quiet = timeout if ack else min(timeout, 10)
        return self._run(rx, dev, n, quiet, device=True, lossy=not ack)

    def micropython(self, n, pace=0, timeout=60):
        if self.mpy_dir is None:
            self.mpy_dir = os.path.join(self.tmp, "mpy")
            mpybuild.compile_tree(ROOT, ["edgebus"], self.mpy_dir)
            shutil.copy(os.path.join(os.path.dirname(__file__), "bridge_device.py"), self.mpy_dir)
        # A board-sized out_queue: the device keeps at most 24 messages ahead of its link.
        dev = [
            mpybuild.micropython(),
            "-X",
            "heapsize=256K",
            "bridge_device.py",
            "127.0.0.1",
            str(self.port),
            NODE,
            KEY,
            str(n),
            str(pace),
            "32",
            "24",
        ]
        return self._run(self.bridge, dev, n, timeout)

    def paho(self, n, pace=0, timeout=60):
        pub = python("dev.bench.bridge_procs", "paho-pub", self.port, RAW_TOPIC, n, pace)
        return self._run(self.sub, pub, n, timeout)

    def lean(self, n, timeout=60):
        """The paho publisher -> the bridge's own MQTT client (mqtt_conn)."""
        pub = python("dev.bench.bridge_procs", "paho-pub", self.port, LEAN_TOPIC, n, 0)
        return self._run(self.lean_sub, pub, n, timeout)

    def close(self):
        for c in (self.bridge, self.bridge_log, self.sub, self.lean_sub):
            if c is not None:
                c.close()
        self.broker.close()


def _figures(runs):
    rates = [r["rate"] for r in runs]
    cpu = [1e6 * r["cpu_s"] / r["received"] for r in runs]
    return {
        "msgs_per_s": summary(rates),
        "rx_cpu_us_per_msg": summary(cpu),
        "latency": _lat([x for r in runs for x in r["lat"]]),
    }


# The variants of the CPython device's bursts: name -> edgebus() args. "on"
# is the default (acks on, sealed and encrypted); seal_*: acks on, so sealed.
VARIANTS = (
    ("on", {"ack": True}),
    ("off", {"ack": False}),
    ("log_on", {"ack": True, "log": True}),
    ("log_off", {"ack": False, "log": True}),
    ("seal_mac", {"seal": "mac"}),
    ("seal_off", {"seal": "off"}),
)


def _ack_lat(runs):
    s = sorted(x for r in runs for x in r["device"]["ack_ms"])
    if not s:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "n": 0}
    return {"p50_ms": s[len(s) // 2], "p99_ms": s[min(len(s) - 1, int(len(s) * 0.99))], "n": len(s)}


def run(smoke=False, profile=None):
    n = 300 if smoke else 20000
    reps = 1 if smoke else 5
    m = 100 if smoke else 1000  # paced messages
    mn = 200 if smoke else 5000  # MicroPython device burst
    tmp = tempfile.mkdtemp(prefix="edgebus-bridge-bench-")
    # The log on the disk the checkout is on (as log_bench), not a tmpfs.
    out = os.path.join(ROOT, "out")
    os.makedirs(out, exist_ok=True)
    log_dir = tempfile.mkdtemp(prefix="bridge-bench-log-", dir=out)
    b = Bench(tmp, profile, log_dir=log_dir)
    try:
        runs = {k: [] for k, _ in VARIANTS}
        raw, lean = [], []
        for _ in range(reps):  # interleaved: noise hits all alike
            for k, kw in VARIANTS:
                runs[k].append(b.edgebus(n, **kw))
            raw.append(b.paho(n))
            lean.append(b.lean(n))
        eb = runs["on"]
        pe = b.edgebus(m, PACE_MS)
        pel = b.edgebus(m, PACE_MS, log=True)
        pr = b.paho(m, PACE_MS)
        mp = [b.micropython(mn) for _ in range(1 if smoke else 3)]
        mpp = b.micropython(m, PACE_MS)
    finally:
        b.close()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(log_dir, ignore_errors=True)
    E, R, M, L = _figures(eb), _figures(raw), _figures(mp), _figures(lean)
    paho_med = statistics.median(r["rate"] for r in raw)
    acks = {}
    for k, _ in VARIANTS:
        rs = runs[k]
        med = statistics.median(r["rate"] for r in rs)
        d = {
            "msgs_per_s": summary([r["rate"] for r in rs]),
            "of_paho": med / paho_med,
            "rx_cpu_us_per_msg": _figures(rs)["rx_cpu_us_per_msg"],
            "acks_in": statistics.median(r["device"]["acks"] for r in rs),
            # without acks, frames past the device's share of the queue (counted)
            "lost": sum(n - r["received"] for r in rs),
            "sent": n * len(rs),
            "retransmitted": sum(r["device"].get("retransmitted", 0) for r in rs),
            "negotiated": sorted(
                set(
                    "%s%s%s"
                    % (
                        "sealed" if r["device"]["sealed"] else "unsealed",
                        ", encrypted" if r["device"]["encrypted"] else "",
                        ", bare" if r["device"]["bare"] else "",
                    )
                    for r in rs
                )
            ),
        }
        done = [r["device"]["acked_s"] for r in rs if r["device"]["acked_s"]]
        if done:  # publish -> every message acknowledged at the device
            d["acked_msgs_per_s"] = summary([n / x for x in done])
        acks[k] = d
    for k in ("on", "log_on"):
        off = acks[k.replace("on", "off")]["msgs_per_s"]["median"]
        acks[k]["of_off"] = acks[k]["msgs_per_s"]["median"] / off
    for k in ("on", "seal_mac"):  # the seal vs unsealed, acks on in all three
        acks[k]["of_unsealed"] = (
            acks[k]["msgs_per_s"]["median"] / acks["seal_off"]["msgs_per_s"]["median"]
        )
    return {
        "messages": n,
        "paced_messages": m,
        "mpy_messages": mn,
        "reps": reps,
        "edgebus_msgs_per_s": E["msgs_per_s"],
        "paho_msgs_per_s": R["msgs_per_s"],
        "ratio": statistics.median(r["rate"] for r in eb) / paho_med,
        "rx_cpu_us_per_msg": {
            "edgebus": E["rx_cpu_us_per_msg"],
            "paho": R["rx_cpu_us_per_msg"],
            "mqtt_conn": L["rx_cpu_us_per_msg"],
        },
        "mqtt_conn_msgs_per_s": L["msgs_per_s"],
        "burst_latency": {"edgebus": E["latency"], "paho": R["latency"]},
        "paced_latency": {
            "edgebus": _lat(pe["lat"]),
            "paho": _lat(pr["lat"]),
            "micropython": _lat(mpp["lat"]),
            "edgebus_log": _lat(pel["lat"]),
            "rate": 1000 // PACE_MS,
        },
        "paced_cdf": {
            "edgebus": _cdf(pe["lat"]),
            "paho": _cdf(pr["lat"]),
            "micropython": _cdf(mpp["lat"]),
        },
        "acks": acks,
        "paced_ack_latency": {"bus": _ack_lat([pe]), "log": _ack_lat([pel])},
        "micropython_msgs_per_s": M["msgs_per_s"],
        "gaps": sum(
            r["gaps"] for r in [x for v in runs.values() for x in v] + [pe, pel] + mp + [mpp]
        ),
    }


if __name__ == "__main__":
    import sys

    print(
        json.dumps(
            run(
                smoke="--smoke" in sys.argv,
                profile=sys.argv[sys.argv.index("--profile") + 1]
                if "--profile" in sys.argv
                else None,
            ),
            indent=1,
        )
    )
