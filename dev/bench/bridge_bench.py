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

from tools import mpybuild
from dev.bench.procs import ROOT, Child, python
from dev.bench.stats import summary
from dev.broker import Mosquitto

NODE, KEY = "b1", "k"
RAW_TOPIC = "raw/sensor/v"
PACE_MS = 5                       # the paced runs: 200 messages/s


def _lat(samples):
    s = sorted(samples)
    if not s:
        return {"p50_ms": float("nan"), "p99_ms": float("nan")}
    return {"p50_ms": 1000 * s[len(s) // 2], "p99_ms": 1000 * s[min(len(s) - 1, int(len(s) * 0.99))]}


def _cdf(samples):
    """Latency quantiles in ms (0, 1, ..., 99, 99.5, 99.9, 100 %): a compact CDF."""
    s = sorted(samples)
    qs = [float(q) for q in range(100)] + [99.5, 99.9, 100.0]
    return {"q": qs, "ms": [1000 * s[min(len(s) - 1, int(len(s) * q / 100))] for q in qs]}


class Bench:
    """The broker, the two receivers (bridge, paho subscriber) and their logs."""

    def __init__(self, tmp, profile=None):
        self.tmp = tmp
        self.broker = Mosquitto().start()
        port = self.port = self.broker.port
        cfg = os.path.join(tmp, "bridge.json")
        with open(cfg, "w") as f:
            json.dump({"bridge": {"state_dir": os.path.join(tmp, "state"), "heartbeat": 2.0},
                       "mqtt": {"url": "mqtt://127.0.0.1:%d" % port, "client_id": "bench-bridge",
                                "devices": [{"node": NODE, "key": KEY}]}}, f)
        log = os.path.join(tmp, "procs.log")
        self.log = log
        self.bridge = Child(python("dev.bench.bridge_procs", "bridge", cfg, "dev/%s/sensor/#" % NODE)
                            + (["--profile", profile] if profile else []), log=log)
        self.sub = Child(python("dev.bench.bridge_procs", "paho-sub", port, RAW_TOPIC), log=log)
        self.bridge.expect("ready")
        self.sub.expect("ready")
        self.mpy_dir = None

    def _run(self, rx, sender, n, timeout):
        rx.send("expect %d %s" % (n, timeout))
        rx.expect("ok")
        s = Child(sender, cwd=self.mpy_dir if sender[0] == mpybuild.micropython() else None,
                  log=self.log)
        try:
            res = json.loads(rx.line(timeout + 30))
        finally:
            s.kill()          # devices idle once done; paho publishers have exited
            s.close()
        if res["received"] < n:
            raise RuntimeError("lost messages: %d of %d arrived, %d gaps counted (see %s)"
                               % (res["received"], n, res["gaps"], self.log))
        return res

    def edgebus(self, n, pace=0, timeout=60):
        dev = python("dev.bench.bridge_device", "127.0.0.1", self.port, NODE, KEY, n, pace,
                     n + 16, 0)
        return self._run(self.bridge, dev, n, timeout)

    def micropython(self, n, pace=0, timeout=60):
        if self.mpy_dir is None:
            self.mpy_dir = os.path.join(self.tmp, "mpy")
            mpybuild.compile_tree(ROOT, ["edgebus"], self.mpy_dir)
            shutil.copy(os.path.join(os.path.dirname(__file__), "bridge_device.py"), self.mpy_dir)
        # A board-sized out_queue: the device keeps at most 24 messages ahead of its link.
        dev = [mpybuild.micropython(), "-X", "heapsize=256K", "bridge_device.py", "127.0.0.1",
               str(self.port), NODE, KEY, str(n), str(pace), "32", "24"]
        return self._run(self.bridge, dev, n, timeout)

    def paho(self, n, pace=0, timeout=60):
        pub = python("dev.bench.bridge_procs", "paho-pub", self.port, RAW_TOPIC, n, pace)
        return self._run(self.sub, pub, n, timeout)

    def close(self):
        for c in (self.bridge, self.sub):
            c.close()
        self.broker.close()


def _figures(runs):
    rates = [r["rate"] for r in runs]
    cpu = [1e6 * r["cpu_s"] / r["received"] for r in runs]
    return {"msgs_per_s": summary(rates), "rx_cpu_us_per_msg": summary(cpu),
            "latency": _lat([x for r in runs for x in r["lat"]])}


def run(smoke=False, profile=None):
    n = 300 if smoke else 20000
    reps = 1 if smoke else 5
    m = 100 if smoke else 1000          # paced messages
    mn = 200 if smoke else 5000         # MicroPython device burst
    tmp = tempfile.mkdtemp(prefix="edgebus-bridge-bench-")
    b = Bench(tmp, profile)
    try:
        eb, raw = [], []
        for _ in range(reps):           # interleaved: noise hits both alike
            eb.append(b.edgebus(n))
            raw.append(b.paho(n))
        pe = b.edgebus(m, PACE_MS)
        pr = b.paho(m, PACE_MS)
        mp = [b.micropython(mn) for _ in range(1 if smoke else 3)]
        mpp = b.micropython(m, PACE_MS)
    finally:
        b.close()
        shutil.rmtree(tmp, ignore_errors=True)
    E, R, M = _figures(eb), _figures(raw), _figures(mp)
    return {"messages": n, "paced_messages": m, "mpy_messages": mn, "reps": reps,
            "edgebus_msgs_per_s": E["msgs_per_s"], "paho_msgs_per_s": R["msgs_per_s"],
            "ratio": statistics.median(r["rate"] for r in eb) / statistics.median(r["rate"] for r in raw),
            "rx_cpu_us_per_msg": {"edgebus": E["rx_cpu_us_per_msg"], "paho": R["rx_cpu_us_per_msg"]},
            "burst_latency": {"edgebus": E["latency"], "paho": R["latency"]},
            "paced_latency": {"edgebus": _lat(pe["lat"]), "paho": _lat(pr["lat"]),
                              "micropython": _lat(mpp["lat"]), "rate": 1000 // PACE_MS},
            "paced_cdf": {"edgebus": _cdf(pe["lat"]), "paho": _cdf(pr["lat"]),
                          "micropython": _cdf(mpp["lat"])},
            "micropython_msgs_per_s": M["msgs_per_s"],
            "gaps": sum(r["gaps"] for r in eb + [pe] + mp + [mpp])}


if __name__ == "__main__":
    import sys
    print(json.dumps(run(smoke="--smoke" in sys.argv,
                         profile=sys.argv[sys.argv.index("--profile") + 1]
                         if "--profile" in sys.argv else None), indent=1))
