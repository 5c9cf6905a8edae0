"""What a reading costs a MicroPython device (BENCHMARKS.md section 4): the
unix port from the .mpy bundle, paced at 20 readings a second, as edgebus
(dev/bench/bridge_device.py: sealed, encrypted, acks on, into the bridge
writing its log, which acknowledges after each group commit) and as
micropython-lib's umqtt.simple at QoS 0 and QoS 1 (dev/bench/umqtt_device.py)
through the same mosquitto, interleaved. Per run: the device's CPU from its
first reading until the last is acknowledged (edgebus) or sent (umqtt), read
from /proc/PID/task/*/schedstat (ns on a CPU, whatever else the machine
does), and the frames the device received for its readings (ACKs; a PUBACK
each at QoS 1)."""

import json
import os
import shutil
import statistics
import subprocess
import tempfile

from dev.bench.bridge_bench import KEY, LOG_PREFIX, NODE, RAW_TOPIC, ROOT, Bench
from edgebus.tools.boardkit import mpybuild, mpylib

PACE_MS = 50
TARBALL = os.path.join(os.path.dirname(ROOT), "shared", "micropython", "micropython-1.28.0.tar.xz")
HERE = os.path.dirname(os.path.abspath(__file__))


def _cpu_ns(pid):
    """ns process ``pid`` spent on a CPU, all its threads."""
    total = 0
    for t in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
            total += int(f.read().split()[0])
    return total


def _device(argv, cwd, timeout=120):
    """Run a device until its JSON line: (CPU ns from its "up" line to then, that line)."""
    p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, text=True)
    try:
        cpu0 = None
        while True:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError("the device %s ended before its result" % argv[3])
            if line.startswith("up"):
                cpu0 = _cpu_ns(p.pid)
            elif line.startswith("{"):
                if cpu0 is None:
                    raise RuntimeError("the device %s said no 'up'" % argv[3])
                return _cpu_ns(p.pid) - cpu0, json.loads(line)
    finally:
        p.kill()
        p.wait(timeout)


def _bundle(d):
    """The .mpy bundle, the two device scripts and umqtt.simple (from the
    MicroPython source's micropython-lib, as a board's require() takes it)."""
    mpybuild.compile_tree(ROOT, ["edgebus"], d)
    for f in ("bridge_device.py", "umqtt_device.py"):
        shutil.copy(os.path.join(HERE, f), d)
    tree, _ = mpylib.source_tree(os.environ.get(mpylib.ENV_SOURCE) or TARBALL, log=lambda m: None)
    for src, dst in mpylib.resolve(tree, ["umqtt.simple"]):
        os.makedirs(os.path.join(d, os.path.dirname(dst)), exist_ok=True)
        shutil.copy(src, os.path.join(d, dst))


def run(smoke=False):
    n = 40 if smoke else 400
    reps = 1 if smoke else 3
    tmp = tempfile.mkdtemp(prefix="devcost-")
    log_dir = os.path.join(tmp, "log")
    b = Bench(tmp, None, log_dir=log_dir)
    mp = [mpybuild.micropython(), "-X", "heapsize=256K"]
    runs = {"edgebus": [], "umqtt_qos0": [], "umqtt_qos1": []}
    try:
        d = os.path.join(tmp, "mpy")
        _bundle(d)
        port = str(b.port)
        for _ in range(reps):
            b.bridge_log.send("expect %d 120" % n)
            b.bridge_log.expect("ok")
            argv = mp + ["bridge_device.py", "127.0.0.1", port, NODE, KEY, str(n), str(PACE_MS)]
            cpu, dev = _device(argv + ["32", "24", "1", LOG_PREFIX, "auto"], d)
            got = json.loads(b.bridge_log.line(150))
            if got["received"] < n or dev["acked_s"] is None:
                raise RuntimeError(
                    "edgebus device: %d of %d logged, all acknowledged: %s"
                    % (got["received"], n, dev["acked_s"] is not None)
                )
            runs["edgebus"].append({"cpu_us": cpu / n / 1e3, "frames_in": dev["acks"] / n})
            for qos in (0, 1):
                b.sub.send("expect %d 120" % n)
                b.sub.expect("ok")
                argv = mp + ["umqtt_device.py", "127.0.0.1", port, RAW_TOPIC, str(n)]
                cpu, _ = _device(argv + [str(PACE_MS), str(qos)], d)
                got = json.loads(b.sub.line(150))
                if got["received"] < n:
                    raise RuntimeError("umqtt QoS %d: %d of %d arrived" % (qos, got["received"], n))
                runs["umqtt_qos%d" % qos].append({"cpu_us": cpu / n / 1e3, "frames_in": qos})
    finally:
        b.close()
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"readings": n, "pace_ms": PACE_MS, "runs": reps}
    for k, rs in runs.items():
        out[k] = {
            "cpu_us": statistics.median(r["cpu_us"] for r in rs),
            "cpu_us_all": [r["cpu_us"] for r in rs],
            "frames_in": statistics.median(r["frames_in"] for r in rs),
        }
    return out


if __name__ == "__main__":
    print(json.dumps(run()))
