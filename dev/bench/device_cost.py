"""What a reading costs a MicroPython device (BENCHMARKS.md section 4): the
unix port from the .mpy bundle, paced at 20 readings a second, as edgebus
(dev/bench/bridge_device.py: sealed, encrypted, acks on, into the bridge
writing its log, which acknowledges after each group commit) and as
micropython-lib's umqtt.simple at QoS 0 and QoS 1 (dev/bench/umqtt_device.py)
through the same mosquitto, interleaved. Per run: the device's CPU from its
first reading until the last is acknowledged (edgebus) or sent (umqtt), read
from /proc/PID/task/*/schedstat (ns on a CPU, whatever else the machine
does), and the frames the device received for its readings (ACKs; a PUBACK
each at QoS 1). Before the readings and after them, outside that CPU: the
heap its uplink holds (gc.mem_alloc() after gc.collect(): edgebus with every
reading acknowledged, less before the link and its transport were made and
less the spool's ring; umqtt once connected, less before its client), step
by step with the parts measured around the calls that make them
(bridge_device.py's PARTS), and every byte it wrote and read on its socket
until its first reading, message by message (breakdown()). Where the CPU goes:
in each round, beside the full device, variants of it over as many readings
(VARIANTS: unencrypted, unsealed, without acknowledgements, without its
status retained, its session up and nothing published, the bus without a
link, the loop alone), each its own process; the differences between them
are the split (MicroPython has no profiler of its Python; perf on the
process sees only the interpreter's C)."""

import json
import os
import shutil
import statistics
import subprocess
import tempfile

from dev.bench.bridge_bench import KEY, LOG_PREFIX, NODE, RAW_TOPIC, ROOT, SEAL_NODES, Bench
from edgebus.link import frame, seal, wire
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


def _device(argv, cwd, timeout=120, lines=("wire", "heap")):
    """Run a device until its JSON line and its ``lines``: (CPU ns from its
    "up" line to the JSON line, that line, {"wire", "heap"})."""
    p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, text=True)
    try:
        cpu0 = res = None
        said = {}
        while res is None or len(said) < len(lines):
            line = p.stdout.readline()
            if not line:
                raise RuntimeError("the device %s ended before its result" % argv[3])
            word = line.split(" ", 1)[0]
            if word in lines:
                said[word] = json.loads(line[len(word) :])
            elif line.startswith("up"):
                cpu0 = _cpu_ns(p.pid)
            elif line.startswith("{"):
                if cpu0 is None:
                    raise RuntimeError("the device %s said no 'up'" % argv[3])
                res = _cpu_ns(p.pid) - cpu0, json.loads(line)
        return res + (said,)
    finally:
        p.kill()
        p.wait(timeout)


MQTT = {1: "CONNECT", 2: "CONNACK", 3: "PUBLISH", 8: "SUBSCRIBE", 9: "SUBACK", 12: "PINGREQ"}
OPENING = ("HELLO", "HELLO_ACK", "AUTH")  # never sealed (docs/protocol.md section 17)


def _packets(data):
    """The MQTT packets in data: (kind, header bytes, body)."""
    o, out = 0, []
    while o < len(data):
        n, shift, h = 0, 0, o + 1
        while True:
            b = data[h]
            n |= (b & 0x7F) << shift
            shift += 7
            h += 1
            if not b & 0x80:
                break
        out.append((data[o] >> 4, h - o, data[h : h + n]))
        o = h + n
    return out


def _frame(item, payload):
    """What a link message carries: its type, the body's and the framing's
    bytes, the seal's 12, and the JSON's bytes per field for the opening ones."""
    body = frame.unmessage(payload, 1 << 16)
    name = wire.NAMES[body[0] & wire.TYPE_MASK]
    item.update(frame=name, framing=len(payload) - len(body), seal=0, body=len(body))
    if name in OPENING:  # "key":value and its comma or brace: the JSON less a byte
        fields = json.loads(body[1:])
        item["fields"] = {
            k: len(json.dumps({k: v}, separators=(",", ":"))) - 1 for k, v in fields.items()
        }
    else:  # the bench's session is sealed (run() checks)
        item.update(seal=seal.TAIL, body=len(body) - seal.TAIL)


def breakdown(hexes):
    """The device's bytes until its first reading (its "wire" line), message
    by message: direction, MQTT packet, bytes, and for a link message its frame."""
    items = []
    for d in ("out", "in"):
        for kind, head, body in _packets(bytes.fromhex(hexes[d])):
            item = {"dir": d, "mqtt": MQTT.get(kind, str(kind)), "bytes": head + len(body)}
            if kind == 3:
                n = int.from_bytes(body[:2], "big")
                topic = body[2 : 2 + n].decode()
                item.update(topic=topic, mqtt_head=head + 2 + n)
                if topic.endswith(("/up", "/down")):
                    _frame(item, body[2 + n :])
            items.append(item)
    return items


def _said(said):
    """A run's heap and bytes until the first reading, from its device's lines."""
    h, w = said["heap"], said["wire"]
    if not w["in"] or not w["out"]:  # its stream counter (bridge_device._Counted) missed a call
        raise RuntimeError("the device counted no bytes %s" % ("in" if not w["in"] else "out"))
    heap = h["acked"] - h["spool"] if "acked" in h else h["up"]
    return {
        "heap": heap,
        "heap_steps": h,
        "out": len(w["out"]) // 2,
        "in": len(w["in"]) // 2,
        "wire": w,
    }


def _bundle(d, root=ROOT, arch=None):
    """The .mpy bundle (edgebus from ``root``, native code for ``arch``), the
    two device scripts and umqtt.simple (from the MicroPython source's
    micropython-lib, as a board's require() takes it)."""
    mpybuild.compile_tree(root, ["edgebus"], d, arch)
    for f in ("bridge_device.py", "umqtt_device.py", "device_profile.py"):
        shutil.copy(os.path.join(HERE, f), d)
    tree, _ = mpylib.source_tree(os.environ.get(mpylib.ENV_SOURCE) or TARBALL, log=lambda m: None)
    for src, dst in mpylib.resolve(tree, ["umqtt.simple"]):
        os.makedirs(os.path.join(d, os.path.dirname(dst)), exist_ok=True)
        shutil.copy(src, os.path.join(d, dst))


# The edgebus device's variants (bridge_device.py's SEAL, ACK and DO), each
# run in every round beside the full one over as many readings: the
# differences say where a reading's CPU goes. (key, seal, ack, do)
VARIANTS = (
    ("seal_mac", "mac", 1, "link"),  # sealed, not encrypted
    ("seal_off", "off", 1, "link"),  # neither (and framed: bare needs the seal)
    ("acks_off", "auto", 0, "link"),  # sealed and encrypted, no acknowledgements
    ("status_off", "auto", 1, "quiet"),  # the link's status not retained (the firmware's)
    ("link_idle", "auto", 1, "idle"),  # the session up, the loop, nothing published
    ("bus_only", "auto", 1, "bus"),  # no link: published into the bus alone
    ("pace_only", "auto", 1, "pace"),  # no link, nothing published: the loop's sleeps
)


def _variant(b, mp, d, n, v):
    """One run of variant ``v`` (VARIANTS): its CPU per reading, in µs."""
    key, seal, ack, do = v
    logged = do in ("link", "quiet")
    if logged:
        b.bridge_log.send("expect %d 120" % n)
        b.bridge_log.expect("ok")
    node = SEAL_NODES.get(seal, NODE)
    argv = mp + ["bridge_device.py", "127.0.0.1", str(b.port), node, KEY, str(n), str(PACE_MS)]
    argv += ["32", "24", str(ack), LOG_PREFIX, seal, "0", do]
    cpu, dev, _ = _device(argv, d, lines=())
    if logged:
        got = json.loads(b.bridge_log.line(150))
        acked = dev["acked_s"] is not None or not ack
        if got["received"] < n or not acked or dev["encrypted"] != (seal == "auto"):
            raise RuntimeError(
                "%s: %d of %d logged, all acknowledged: %s, encrypted: %s"
                % (key, got["received"], n, acked, dev["encrypted"])
            )
    return cpu / n / 1e3


def run(smoke=False):
    n = 40 if smoke else 400
    reps = 1 if smoke else 3
    tmp = tempfile.mkdtemp(prefix="devcost-")
    log_dir = os.path.join(tmp, "log")
    b = Bench(tmp, None, log_dir=log_dir)
    mp = [mpybuild.micropython(), "-X", "heapsize=256K"]
    runs = {"edgebus": [], "umqtt_qos0": [], "umqtt_qos1": []}
    varied = {v[0]: [] for v in VARIANTS}
    try:
        d = os.path.join(tmp, "mpy")
        _bundle(d)
        port = str(b.port)
        for _ in range(reps):
            b.bridge_log.send("expect %d 120" % n)
            b.bridge_log.expect("ok")
            argv = mp + ["bridge_device.py", "127.0.0.1", port, NODE, KEY, str(n), str(PACE_MS)]
            cpu, dev, said = _device(argv + ["32", "24", "1", LOG_PREFIX, "auto", "1"], d)
            got = json.loads(b.bridge_log.line(150))
            if got["received"] < n or dev["acked_s"] is None or not dev["encrypted"]:
                raise RuntimeError(
                    "edgebus device: %d of %d logged, all acknowledged: %s, encrypted: %s"
                    % (got["received"], n, dev["acked_s"] is not None, dev["encrypted"])
                )
            runs["edgebus"].append(
                dict(_said(said), cpu_us=cpu / n / 1e3, frames_in=dev["acks"] / n)
            )
            for v in VARIANTS:
                varied[v[0]].append(_variant(b, mp, d, n, v))
            for qos in (0, 1):
                b.sub.send("expect %d 120" % n)
                b.sub.expect("ok")
                argv = mp + ["umqtt_device.py", "127.0.0.1", port, RAW_TOPIC, str(n)]
                cpu, _, said = _device(argv + [str(PACE_MS), str(qos)], d)
                got = json.loads(b.sub.line(150))
                if got["received"] < n:
                    raise RuntimeError("umqtt QoS %d: %d of %d arrived" % (qos, got["received"], n))
                runs["umqtt_qos%d" % qos].append(
                    dict(_said(said), cpu_us=cpu / n / 1e3, frames_in=qos)
                )
    finally:
        b.close()
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"readings": n, "pace_ms": PACE_MS, "runs": reps}
    for k, rs in runs.items():
        out[k] = {
            "cpu_us": statistics.median(r["cpu_us"] for r in rs),
            "cpu_us_all": [r["cpu_us"] for r in rs],
            "frames_in": statistics.median(r["frames_in"] for r in rs),
            "heap": statistics.median(r["heap"] for r in rs),
            "heap_all": [r["heap"] for r in rs],
            "heap_steps": rs[0]["heap_steps"],
            "bytes_out": [r["out"] for r in rs],
            "bytes_in": [r["in"] for r in rs],
            "messages": breakdown(rs[0]["wire"]),  # the same in every run
        }
    out["variants"] = {
        k: {"cpu_us": statistics.median(rs), "cpu_us_all": rs} for k, rs in varied.items()
    }
    return out


def ab(trees, reps=5, n=400):
    """The full device's CPU per reading, µs, for each of ``trees`` ({name:
    (checkout root, mpy arch or None)}), interleaved over ``reps`` rounds
    through one bridge: {name: [per round]}. For a change too small for one
    run of each to show (BENCHMARKS.md section 4's "tried")."""
    tmp = tempfile.mkdtemp(prefix="devab-")
    b = Bench(tmp, None, log_dir=os.path.join(tmp, "log"))
    mp = [mpybuild.micropython(), "-X", "heapsize=256K"]
    out = {k: [] for k in trees}
    try:
        dirs = {}
        for k, (root, arch) in trees.items():
            dirs[k] = os.path.join(tmp, k)
            _bundle(dirs[k], root, arch)
        for _ in range(reps):
            for k, d in dirs.items():
                b.bridge_log.send("expect %d 120" % n)
                b.bridge_log.expect("ok")
                argv = mp + ["bridge_device.py", "127.0.0.1", str(b.port), NODE, KEY, str(n)]
                argv += [str(PACE_MS), "32", "24", "1", LOG_PREFIX, "auto", "1"]
                cpu, dev, _ = _device(argv, d)
                got = json.loads(b.bridge_log.line(150))
                if got["received"] < n or dev["acked_s"] is None:
                    raise RuntimeError("%s: %d of %d logged" % (k, got["received"], n))
                out[k].append(cpu / n / 1e3)
                print(k, "%.1f" % out[k][-1], flush=True)
    finally:
        b.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def profile(n=400):
    """One run of the full device under dev/bench/device_profile.py: (its
    CPU per reading in µs, µs an empty wrapped call takes, {function: (µs,
    calls) a reading}, with "heap collections": their count a reading and
    their cost, timed as one at the end takes; bytes allocated a reading)."""
    tmp = tempfile.mkdtemp(prefix="devprof-")
    b = Bench(tmp, None, log_dir=os.path.join(tmp, "log"))
    try:
        d = os.path.join(tmp, "mpy")
        _bundle(d)
        b.bridge_log.send("expect %d 120" % n)
        b.bridge_log.expect("ok")
        argv = [mpybuild.micropython(), "-X", "heapsize=256K", "device_profile.py", "127.0.0.1"]
        argv += [str(b.port), NODE, KEY, str(n), str(PACE_MS), "32", "24", "1", LOG_PREFIX, "auto"]
        cpu, _, said = _device(argv + ["1", "link"], d, lines=("prof",))
        json.loads(b.bridge_log.line(150))
    finally:
        b.close()
        shutil.rmtree(tmp, ignore_errors=True)
    fs = {
        name: (us / n, c / n, b / max(m, 1))
        for name, (us, c, b, m) in said["prof"]["functions"].items()
    }
    gcs, gc_us, per = said["prof"]["gc"]
    fs["heap collections"] = (gcs * gc_us / n, gcs / n, 0)
    return cpu / n / 1e3, said["prof"]["wrap"], fs, per


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(
        description="What a reading costs a MicroPython device (BENCHMARKS.md section 4): "
        "the section's figures as JSON, or with an option one of its experiments."
    )
    ap.add_argument(
        "--ab",
        nargs="+",
        metavar="NAME=ROOT[:ARCH]",
        help="instead of the section: the full device from each checkout ROOT (native code "
        "for mpy-cross's -march=ARCH), interleaved",
    )
    ap.add_argument("--rounds", type=int, default=5, help="--ab's rounds (default 5)")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="instead of the section: the full device's functions, µs and calls a reading",
    )
    a = ap.parse_args()
    if a.profile:
        cpu, (w_us, w_b), fs, per = profile()
        print(
            "CPU %.0f µs a reading (profiled); an empty wrapped call %.1f µs, %.0f bytes"
            % (cpu, w_us, w_b)
        )
        print("heap allocated from a reading to the next: %.0f bytes" % per)
        for k, (us, c, b) in sorted(fs.items(), key=lambda kv: -kv[1][0]):
            print(
                "%-24s %7.1f µs  %5.2f calls  %6.1f µs %6.0f bytes a call"
                % (k, us, c, us / c if c else 0, b)
            )
    elif not a.ab:
        print(json.dumps(run()))
    else:
        trees = {}
        for spec in a.ab:
            name, _, where = spec.partition("=")
            root, _, arch = where.partition(":")
            trees[name] = (os.path.abspath(root), arch or None)
        for k, v in ab(trees, a.rounds).items():
            print(
                "%s: median %.1f µs (%s)"
                % (k, statistics.median(v), " ".join("%.0f" % x for x in v))
            )
