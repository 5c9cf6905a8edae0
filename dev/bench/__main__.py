"""Run every benchmark and write BENCHMARKS.md and benchmarks.json.

usage: python -m dev.bench [--smoke] [--out DIR] [--only PART,...]
                           [--baseline REF [--baseline-only]]
The results (benchmarks.json and the plots) go to dev/bench/results/ and the
report to BENCHMARKS.md at the repository root, linking the plots there.
--smoke runs each benchmark briefly (CI keeps the suite working with it) and
writes everything to out/bench-smoke/ instead; --out DIR writes everything to
DIR. --only runs some parts (core, mpy, link, bridge, log, fleet, device, spark,
commands, swarm, ota, tls, fleetpage)
and keeps the other figures from the benchmarks.json already there. --baseline
REF[,REF...]: the parts that take one (swarm) also measure these commits' code
(--baseline-only: only it, e.g. while this checkout holds unfinished edits).
--render runs nothing: it writes BENCHMARKS.md again from the benchmarks.json
in --out (after a change to the report or its templates).
Each part's date and commit go into the results' meta (``parts``), which the
report's header lists.
"""

import argparse
import json
import os
import platform
import sys
import time

from dev import checkout
from dev.bench import (
    bridge_bench,
    core_cpython,
    core_mpy,
    device_cost,
    fleet_bench,
    fleetpage_bench,
    link_bench,
    log_bench,
    ota_bench,
    report,
    spark_bench,
    spark_commands,
    swarm_bench,
    tls_bench,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "dev", "bench", "results")


# name -> (what it prints, the result key, the function)
PARTS = {
    "core": (
        "core on CPython: throughput vs zenoh and naive, publish cost vs patterns",
        None,
        None,
    ),
    "mpy": (
        "core on MicroPython: heap and speed, the unix port and the emulated board",
        "core_mpy",
        core_mpy.figures,
    ),
    "link": ("link: bytes on the wire, paced pty, call round trips", "link", link_bench.run),
    "bridge": (
        "bridge: device -> host through mosquitto vs raw paho, every party a process",
        "bridge",
        bridge_bench.run,
    ),
    "log": (
        "bridge log: group commit, durable records/s and publish -> durable by commit_ms",
        "log",
        log_bench.run,
    ),
    "fleet": ("bridge: a fleet of MicroPython devices over MQTT", "fleet", fleet_bench.run),
    "device": (
        "a MicroPython device's CPU per reading at 20/s: edgebus vs umqtt.simple",
        "device",
        device_cost.run,
    ),
    "spark": (
        "spark: ingest rows/s vs Spark's JSON source, publish -> queryable",
        "spark",
        spark_bench.run,
    ),
    "commands": (
        "spark: a small fleet's table, command by command, vs a bare Spark session",
        "commands",
        spark_commands.run,
    ),
    "swarm": (
        "bridge: a swarm of CPython devices through a broker outage, steady, and a start-up storm",
        "swarm",
        swarm_bench.run,
    ),
    "ota": (
        "updates over the bus: a device over a 115,200-baud pty and over MQTT, a fleet, the board",
        "ota",
        ota_bench.run,
    ),
    "tls": ("TLS to the broker: a device's heap with and without", "tls", tls_bench.run),
    "fleetpage": (
        "bridge: the fleet page's requests at 10,000 devices vs a /metrics scrape",
        "fleetpage",
        fleetpage_bench.figures,
    ),
}


def _run_part(name, res, smoke, baseline=None, baseline_only=False):
    label, key, fn = PARTS[name]
    print(label + " ...", flush=True)
    if name == "core":
        res["core_throughput"] = core_cpython.throughput(smoke)
        res["core_throughput_compiled"] = core_cpython.compiled_throughput(smoke)
        res["core_publish_curve"] = core_cpython.publish_cost_curve(smoke)
    elif name == "swarm":
        res[key] = fn(smoke, baseline, checkout=not baseline_only)
    else:
        res[key] = fn(smoke)


def _measure(ap, args, only, jpath):
    """Run the parts in only into the results at jpath (the others keep theirs
    with --only), each recorded in meta["parts"] with its date and commit."""
    res = {
        "meta": {
            "smoke": args.smoke,
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "parts": {},
        }
    }
    if args.only and os.path.exists(jpath):
        with open(jpath) as f:
            res = json.load(f)  # the parts not run keep their figures
        if res.get("meta", {}).get("smoke") != args.smoke:
            ap.error(
                "%s holds a %s run: refresh it whole"
                % (jpath, "smoke" if res.get("meta", {}).get("smoke") else "full")
            )
    commit = checkout.label()
    for name in PARTS:
        if name in only:
            date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            _run_part(name, res, args.smoke, args.baseline, args.baseline_only)
            res["meta"]["parts"][name] = {"date": date, "commit": commit}
    with open(jpath, "w") as f:
        json.dump(res, f, indent=1)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m dev.bench", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--smoke", action="store_true", help="a short run that checks the benchmarks work"
    )
    ap.add_argument(
        "--out",
        help="where to write the results and the report (default: dev/bench/results and "
        "BENCHMARKS.md at the root, or out/bench-smoke with --smoke)",
    )
    ap.add_argument(
        "--only",
        help="comma-separated parts to run (%s); the others keep their "
        "figures from the benchmarks.json already in --out" % ",".join(PARTS),
    )
    ap.add_argument(
        "--baseline",
        metavar="REF[,REF...]",
        help="git refs whose code the swarm part measures beside this checkout's, in the same run",
    )
    ap.add_argument(
        "--baseline-only", action="store_true", help="the swarm part measures only the --baseline"
    )
    ap.add_argument(
        "--render",
        action="store_true",
        help="run nothing: write BENCHMARKS.md from the stored benchmarks.json",
    )
    args = ap.parse_args(argv)
    if args.baseline_only and not args.baseline:
        ap.error("--baseline-only needs --baseline REF")
    only = [p.strip() for p in args.only.split(",")] if args.only else list(PARTS)
    bad = [p for p in only if p not in PARTS]
    if bad:
        ap.error("unknown part(s) %s; choose from %s" % (", ".join(bad), ", ".join(PARTS)))
    out = args.out or (os.path.join(ROOT, "out", "bench-smoke") if args.smoke else RESULTS)
    md_dir = ROOT if os.path.abspath(out) == RESULTS else out
    os.makedirs(out, exist_ok=True)
    jpath = os.path.join(out, "benchmarks.json")
    if args.render:
        with open(jpath) as f:
            res = json.load(f)
    else:
        res = _measure(ap, args, only, jpath)
    md = report.markdown(res, out, md_dir)
    with open(os.path.join(md_dir, "BENCHMARKS.md"), "w") as f:
        f.write(md)
    print(md)
    print("wrote", os.path.join(md_dir, "BENCHMARKS.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
