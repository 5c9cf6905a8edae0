"""Run every benchmark and write BENCHMARKS.md and benchmarks.json.

usage: python -m tools.bench [--smoke] [--out DIR]
--smoke runs each benchmark briefly (CI keeps the suite working with it) and
writes to out/bench-smoke/ instead of the repository root.
"""
import argparse
import json
import os
import platform
import sys
import time

from tools.bench import bridge_bench, core_cpython, core_mpy, link_bench, report, spark_bench

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="a short run that checks the benchmarks work")
    ap.add_argument("--out", help="where to write the results (default: repo root, or out/bench-smoke with --smoke)")
    args = ap.parse_args(argv)
    out = args.out or (os.path.join(ROOT, "out", "bench-smoke") if args.smoke else ROOT)
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    res = {"meta": {"smoke": args.smoke, "python": sys.version.split()[0],
                    "machine": platform.machine(), "cpus": os.cpu_count(),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}}
    print("core on CPython: throughput vs zenoh and naive ...", flush=True)
    res["core_throughput"] = core_cpython.throughput(args.smoke)
    print("core on CPython: publish cost vs stored patterns ...", flush=True)
    res["core_publish_curve"] = core_cpython.publish_cost_curve(args.smoke)
    print("core on MicroPython: heap and speed ...", flush=True)
    res["core_mpy"] = core_mpy.figures(args.smoke)
    print("link: bytes on the wire, paced pty, call round trips ...", flush=True)
    res["link"] = link_bench.run(args.smoke)
    print("bridge: device -> host through mosquitto vs raw paho ...", flush=True)
    res["bridge"] = bridge_bench.run(args.smoke)
    print("spark: ingest rows/s vs Spark's JSON source, publish -> queryable ...", flush=True)
    res["spark"] = spark_bench.run(args.smoke)
    res["meta"]["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(out, "benchmarks.json"), "w") as f:
        json.dump(res, f, indent=1)
    md = report.markdown(res, out)
    with open(os.path.join(out, "BENCHMARKS.md"), "w") as f:
        f.write(md)
    print(md)
    print("wrote", os.path.join(out, "BENCHMARKS.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
