"""The swarm trial as a benchmark: thousands of devices (dev/swarm.py:
CPython devices, many per process) publishing 1 reading/s each over a real
mosquitto into one edgebus-bridge (its own process) with its telemetry log
(durable links: a device's reading is acknowledged once the log synced it).

Scenarios: 3,000 devices through a site-wide broker outage (mosquitto
SIGKILLed, down 30 s, started again on the same port) and 5,000 devices
steady. Per scenario: the time until every device had a session, the
bridge's CPU (share of one core over the run) and peak RSS, readings
missing from the log (acknowledged, and not), checked against what every
device sent and had acknowledged (dev/swarm.check, tlog's reader), the
time the post-outage flush takes to drain (from the broker's restart until
every device's acknowledged mark reached what it had sent by then), ACK
p50/p99 of readings published while a session was up (publish to the ACK
that freed it, on the device; acknowledged before the outage, and after),
group commits per second (the log's sync points, from the bridge's
/metrics), and the bridge's stop with every session up (SIGTERM to its exit,
``stop_s``).

Baseline commits can be measured beside this checkout in the same run
(``--baseline REF[,REF...]``): its tree (``git archive``, plus this dev/swarm.py)
runs the bridge and the devices' edgebus."""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

from dev.broker import Mosquitto, free_port
from dev.checkout import label as checkout_label
from dev.harness.bridge import BridgeProcess
from dev.harness.mqtt import retained
from dev.swarm import DEFAULT_SPOOL, Swarm, check, figures

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (label, devices, outage s, seconds of steady readings before it and after the
# drain, readings/s per device, seconds over which the devices start: None is
# 1 ms a device, 0 all at once: a start-up storm; the load generator's lean
# devices instead of full ones: the bridge's own capacity, dev/swarm.py Lean;
# the bridge's processes: [bridge] workers, bridge/workers.py)
FULL = [
    ("3,000 devices, 30 s outage", 3000, 30.0, 20.0, 1.0, None, False, 1),
    ("5,000 devices steady", 5000, 0.0, 60.0, 1.0, None, False, 1),
    ("5,000 lean devices steady", 5000, 0.0, 60.0, 1.0, None, True, 1),
    # the same on a bridge of 2 workers (bridge/workers.py): this checkout's code only
    ("5,000 lean devices steady, 2 bridge workers", 5000, 0.0, 60.0, 1.0, None, True, 2),
    ("10,000 devices started at once, 0.2/s", 10000, 0.0, 20.0, 0.2, 0, False, 1),
]
SMOKE = [
    ("30 devices, 3 s outage", 30, 3.0, 2.0, 1.0, None, False, 1),
    ("50 devices steady", 50, 0.0, 3.0, 1.0, None, False, 1),
    ("50 lean devices steady", 50, 0.0, 3.0, 1.0, None, True, 1),
    ("50 lean devices steady, 2 bridge workers", 50, 0.0, 3.0, 1.0, None, True, 2),
    ("100 devices started at once, 0.2/s", 100, 0.0, 2.0, 0.2, 0, False, 1),
]


# The broker as the README configures it for a fleet: mosquitto drops QoS 0
# messages to a client past max_queued_messages (1,000 by default), and the
# bridge is one client for every device's frames. $SYS every second: its count
# of dropped messages is fresh at the end of a trial.
BROKER = ["max_queued_messages 100000", "sys_interval 1"]


def _proc(pid):
    """(CPU seconds, RSS KiB, peak RSS KiB) of a process, from /proc."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    mem = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                mem[k] = int(v.split()[0])
    return cpu, mem.get("VmRSS", 0), mem.get("VmHWM", 0)


def _tree(pid):
    """_proc over process ``pid`` and its children (a bridge's workers), summed."""
    pids = [pid]
    for t in glob.glob("/proc/%d/task/*/children" % pid):
        with open(t) as f:
            pids += [int(c) for c in f.read().split()]
    tot = [0.0, 0, 0]
    for p in pids:
        try:
            for k, v in enumerate(_proc(p)):
                tot[k] += v
        except FileNotFoundError:  # a worker gone meanwhile
            pass
    return tuple(tot)


# The bridge's counters (summed over its links) that say how sessions started and ended.
CHURN = (
    "sessions",
    "session_ends",
    "liveness_timeouts",
    "presence_offline",
    "stale_hellos",
    "stale_acks",
    "earlier_acks",
    "replays",
    "auth_failures",
    "unexpected",
    "errors",
)


def _family(name):
    """A sample's name without its ``worker`` label: the bridge of several
    workers (bridge/workers.py) gives each worker's series, summed here."""
    name = re.sub(r',?worker="\d+"', "", name)
    return name.replace("{,", "{").replace("{}", "")


def _log_figures(port):
    """The log's sync points, appends and drops, the links' gaps and the
    bus's drops, from the bridge's Prometheus /metrics (one cheap scrape at
    any fleet size: the fleet's totals)."""
    want = {
        "edgebus_log_syncs_total": "syncs",
        "edgebus_log_appended_total": "appended",
        "edgebus_log_dropped_total": "log_dropped",
        "edgebus_bus_dropped_total": "bus_dropped",
    }
    out = dict.fromkeys(list(want.values()) + ["gaps"], 0)
    fleet = None  # the fleet's total; a baseline tree has per-link series only
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=60) as r:
        for line in r.read().decode().splitlines():
            name, _, value = line.rpartition(" ")
            name = _family(name)
            if name in want:
                out[want[name]] += int(float(value))
            elif name.startswith("edgebus_fleet_events_total{"):
                k = name.split('"')[1]
                f = out.setdefault("fleet", {})  # the bridge's side
                f[k] = f.get(k, 0) + int(float(value))
                if k == "gaps":
                    fleet = f[k]
            elif name.startswith("edgebus_link_events_total{") and 'counter="gaps"' in name:
                out["gaps"] += int(float(value))
    if fleet is not None:
        out["gaps"] = fleet
    return out


def _started(work, tree, metrics, broker_port, devices=None, workers=1):
    """A bridge with its log (in ``work``) for the ``[mqtt]`` fragment
    ``devices`` (None: no device), run as ``workers`` processes, once its
    sockets are there."""
    os.makedirs(work, exist_ok=True)
    toml = os.path.join(work, "bridge.toml")
    with open(toml, "w") as f:
        f.write(
            '[bridge]\nnode = "gw"\n%sstate_dir = "%s"\nsocket = "%s"\n'
            'metrics = "127.0.0.1:%d"\n[log]\ndir = "%s"\npatterns = ["dev/#"]\n\n%s'
            % (
                "workers = %d\n" % workers if workers > 1 else "",
                os.path.join(work, "state"),
                os.path.join(work, "bridge.sock"),
                metrics,
                os.path.join(work, "tlog"),
                devices or '[mqtt]\nurl = "mqtt://127.0.0.1:%d"\ndevices = []\n' % broker_port,
            )
        )
    return BridgeProcess(work, toml=toml, tree=tree).start().ready(60)


def _cpus(bridge, swarm):
    """(the bridge's CPU seconds, the devices' processes' together)."""
    return _tree(bridge.proc.pid)[0], sum(_proc(c.p.pid)[0] for c in swarm.children)


def _steady(lg0, t0, cpus0, lg1, cpus1):
    """The steady phase's records logged a second and what each cost in CPU,
    the bridge's and the devices' (every session up: no handshake in it)."""
    n = lg1["appended"] - lg0["appended"]
    dt = time.monotonic() - t0
    return {
        "steady_records_per_s": round(n / dt, 1),
        "bridge_steady_core_share": round((cpus1[0] - cpus0[0]) / dt, 3),
        "bridge_us_per_record": round(1e6 * (cpus1[0] - cpus0[0]) / n, 1) if n else None,
        "devices_us_per_record": round(1e6 * (cpus1[1] - cpus0[1]) / n, 1) if n else None,
    }


def _machine():
    """(busy, total) CPU time of the whole machine, in clock ticks, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)  # idle and iowait are not busy


def _wait(swarm, cond, timeout, show):
    # Polling only paces the phases: the figures are timed in the workers.
    return swarm.wait(cond, timeout, show=show, every=5.0 if swarm.n > 100 else 0.2)


def trial(
    work,
    devices,
    outage=0.0,
    steady=10.0,
    tree=ROOT,
    workers=None,
    show=False,
    rate=1.0,
    ramp=None,
    lean=False,
    bridge_workers=1,
):
    """One run in directory ``work`` (which keeps the log, tlog/, and the
    swarm's summary, swarm.json): returns the figures (see the module doc)
    with the checker's totals."""
    os.makedirs(work, exist_ok=True)
    log_dir = os.path.join(work, "tlog")
    with Mosquitto(options=BROKER) as broker:
        swarm = Swarm(
            devices,
            ("127.0.0.1", broker.port),
            rate=rate,
            workers=workers,
            ramp=ramp,
            log=os.path.join(work, "workers.log"),
            tree=tree,
            lean=lean,
        )
        metrics = free_port()
        # The same bridge with no device first: its RSS is what the fleet adds to.
        idle = _started(
            os.path.join(work, "idle"), tree, metrics, broker.port, None, bridge_workers
        )
        rss_idle = _tree(idle.proc.pid)[1]
        idle.stop()
        idle.close()
        bridge = _started(work, tree, metrics, broker.port, swarm.toml(), bridge_workers)
        try:
            cpu0, rss0, _ = _tree(bridge.proc.pid)  # every device configured, none come
            m0 = _machine()
            t0 = time.monotonic()
            with swarm:
                # Devices still without a session after this go on spooling:
                # the figures say how many had one (ever_up).
                _wait(swarm, lambda p: p["ever_up"] == devices, 60 + devices / 20, show)
                rss_up = _tree(bridge.proc.pid)[1]
                lg0, ts0 = _log_figures(metrics), time.monotonic()
                cpus0 = _cpus(bridge, swarm)
                _wait(swarm, lambda p: False, steady, show)
                steady_cpu = _steady(lg0, ts0, cpus0, _log_figures(metrics), _cpus(bridge, swarm))
                t_restart = t_restart_mono = None
                if outage:
                    swarm.phase()  # steady ACK latency: acknowledged by now
                    broker.stop()  # SIGKILL: the whole site loses its broker
                    time.sleep(outage)
                    broker.start()
                    t_restart, t_restart_mono = time.time(), time.monotonic()
                    swarm.mark()
                    _wait(swarm, lambda p: not p["undrained"], 120 + devices / 10, show)
                    _wait(swarm, lambda p: False, steady, show)
                swarm.stop_publishing()
                _wait(swarm, lambda p: not p["behind"], 60 + devices / 50, show)
                lg1, ts1 = _log_figures(metrics), time.monotonic()
                cpu1, rss, peak = _tree(bridge.proc.pid)
                dev_cpu = sum(_proc(c.p.pid)[0] for c in swarm.children)
                mq_cpu = _proc(broker.proc.pid)[0]
                mq_dropped = retained(broker.port, "$SYS/broker/publish/messages/dropped", 5)
                m1 = _machine()
                t1 = time.monotonic()
                summary = swarm.summary()
                t_stop = time.monotonic()  # the devices still connected
                bridge.stop(timeout=120)
                stop_s = time.monotonic() - t_stop
        finally:
            bridge.close()
    with open(os.path.join(work, "swarm.json"), "w") as f:
        json.dump(summary, f)
    if bridge_workers > 1:  # a log per worker (bridge/split.py)
        log_dir = [os.path.join(log_dir, "w%d" % i) for i in range(bridge_workers)]
    report = check(log_dir, summary)
    fig = figures(summary)
    fig.update(
        {
            "outage_s": outage,
            "steady_s": steady,
            "lean": lean,
            "workers": swarm.k,
            "bridge_workers": bridge_workers,
            "ramp_s": swarm.ramp,
            "drain_s": round(fig["drained_at"] - t_restart, 2)
            if t_restart and fig["drained_at"]
            else None,
            "bridge_core_share": round((cpu1 - cpu0) / (t1 - t0), 3),
            # Who else had the machine: the simulator's processes together, the
            # broker (since its last start), and how busy all cores were.
            "devices_core_share": round(dev_cpu / (t1 - t0), 3),
            "broker_core_share": round(mq_cpu / (t1 - (t_restart_mono or t0)), 3),
            "machine_busy": round((m1[0] - m0[0]) / max(1, m1[1] - m0[1]), 3),
            # QoS 0 messages the broker dropped (queues past its limits), since its last start.
            "broker_dropped": int(mq_dropped[0]) if mq_dropped else None,
            "bridge_rss_mib": round(rss / 1024, 1),
            "bridge_peak_rss_mib": round(peak / 1024, 1),
            "bridge_rss_idle_mib": round(rss_idle / 1024, 1),
            # What a device adds: configured (before it comes), and with its session up.
            "rss_per_device_kib": round((rss_up - rss_idle) / devices, 1),
            "rss_per_configured_kib": round((rss0 - rss_idle) / devices, 1),
            "commits_per_s": round((lg1["syncs"] - lg0["syncs"]) / (ts1 - ts0), 1),
            "stop_s": round(stop_s, 2),
            "log_dropped": lg1["log_dropped"],
            "gaps": lg1["gaps"],
            "bus_dropped": lg1["bus_dropped"],
            "bridge_links": {k: v for k, v in lg1.get("fleet", {}).items() if k in CHURN},
            **steady_cpu,
            "check": report["totals"],
            "check_ok": report["ok"],
        }
    )
    del fig["drained_at"]
    return fig


def _git(*args):
    return subprocess.run(
        ["git", "-C", ROOT] + list(args), check=True, capture_output=True, text=True
    ).stdout.strip()


def _archive(ref, dest):
    """This repository's tree at git ref ``ref``, extracted into dest, with
    this checkout's simulator (dev/swarm.py) in it."""
    os.makedirs(dest)
    arch = subprocess.run(
        ["git", "-C", ROOT, "archive", ref], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=arch, check=True)
    shutil.copy(os.path.join(ROOT, "dev", "swarm.py"), os.path.join(dest, "dev", "swarm.py"))
    return dest


def run(smoke=False, baseline=None, show=None, checkout=True):
    """Every scenario on this checkout's code and, given ``baseline`` (git
    refs, comma-separated), on those commits' too, interleaved. ``show``: print the
    swarm's progress (default: in a full run, whose trials take minutes)."""
    show = not smoke if show is None else show
    if not (checkout or baseline):
        raise ValueError("nothing to measure: no baseline and not this checkout")
    tmp = tempfile.mkdtemp(prefix="edgebus-swarm-bench-")
    try:
        trees = []
        for i, ref in enumerate(baseline.split(",") if baseline else ()):
            trees.append(
                (_git("rev-parse", "--short", ref), _archive(ref, os.path.join(tmp, "base-%d" % i)))
            )
        if checkout:
            trees.append((checkout_label(("edgebus", "bridge", "tlog")), ROOT))
        out = {
            "trees": [t[0] for t in trees],
            "baseline": baseline,
            "scenarios": [],
            "spool": DEFAULT_SPOOL,
            "cpus": os.cpu_count(),
        }
        scenarios = SMOKE if smoke else FULL
        for i, (label, n, outage, steady, rate, ramp, lean, bw) in enumerate(scenarios):
            row = {"label": label, "devices": n, "outage_s": outage, "by_tree": {}}
            for j, (tlabel, tree) in enumerate(trees):
                if bw > 1 and tree != ROOT:  # a baseline may predate workers
                    continue
                f = trial(
                    os.path.join(tmp, "run-%d-%d" % (i, j)),
                    n,
                    outage,
                    steady,
                    tree,
                    show=show,
                    rate=rate,
                    ramp=ramp,
                    lean=lean,
                    bridge_workers=bw,
                )
                row["by_tree"][tlabel] = f
                print(
                    "  %s, %s: sessions up %s s, missing acked %d / not acked %d, drain %s s, "
                    "ACK p50/p99 %s/%s ms, bridge %.0f%% of a core, %s MiB, %s commits/s"
                    % (
                        label,
                        tlabel,
                        f["sessions_up_s"],
                        f["check"]["acked_missing"],
                        f["check"]["spooled_missing"] + f["check"]["evicted_missing"],
                        f["drain_s"],
                        f["ack_p50_ms"],
                        f["ack_p99_ms"],
                        100 * f["bridge_core_share"],
                        f["bridge_peak_rss_mib"],
                        f["commits_per_s"],
                    ),
                    flush=True,
                )
            out["scenarios"].append(row)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m dev.bench.swarm_bench", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--baseline", help="git refs (comma-separated) whose code is measured too")
    ap.add_argument(
        "--baseline-only", action="store_true", help="measure only the baseline, not this checkout"
    )
    a = ap.parse_args()
    print(json.dumps(run(a.smoke, a.baseline, checkout=not a.baseline_only), indent=1))
