"""What a user waits for with a small fleet's log: each edgebus command that
writes or reads the table, run as a user runs it (a process of its own, wall
time from its start to its exit), beside a bare PySpark session that starts,
counts ``spark.range(10)`` and stops (the least a command that starts Spark
can take here). The log holds RECORDS device records (16 devices, one boot
each), as the bridge writes it. Each round runs every command once, in turn;
median/min/max over the rounds.

    python -m dev.bench.spark_commands [--smoke]
"""

import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from dev.bench.spark_bench import _record
from dev.harness.process import ROOT, env, python
from edgebus import tlog

RECORDS = 754
BARE = (
    "from pyspark.sql import SparkSession\n"
    "s = SparkSession.builder.master('local[*]').getOrCreate()\n"
    "assert s.range(10).count() == 10\n"
    "s.stop()\n"
)
CLI = "edgebus.tools.cli"
SMOKE = ("bare", "ingest", "report", "report_plot", "infer")


def _ingest(d, table, ckpt, *more):
    """argv of `edgebus ingest --once` of d's log into d/table (checkpoint d/ckpt)."""
    t, c = os.path.join(d, table), os.path.join(d, ckpt)
    return python(
        CLI,
        "ingest",
        "--log",
        os.path.join(d, "tlog"),
        "--table",
        t,
        "--checkpoint",
        c,
        "--once",
        *more,
    )


def _commands(d, table):
    """name -> argv; ingest's table and checkpoint are per round (fresh)."""
    views = ["views", "infer", "--table", table, "--topic", "sensors/+/env"]
    return {
        "bare": [sys.executable, "-c", BARE],
        "ingest": lambda r: _ingest(d, "t%d" % r, "c%d" % r),
        "ingest_no_audit": lambda r: _ingest(d, "n%d" % r, "m%d" % r, "--no-audit"),
        "report": python(CLI, "report", "--table", table),
        "report_plot": python(CLI, "report", "--table", table, "--plot", os.path.join(d, "p.png")),
        "report_spark": python(CLI, "report", "--table", table, "--spark"),
        "infer": python(CLI, *views),
        "infer_spark": python(CLI, *views, "--spark"),
    }


def _wall(argv):
    import subprocess

    e = dict(env(), PYSPARK_PYTHON=sys.executable)
    t = time.perf_counter()
    r = subprocess.run(argv, cwd=ROOT, env=e, capture_output=True, text=True, timeout=600)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (argv[3:5], r.returncode, r.stderr[-2000:]))
    return dt


def _summary(v):
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}


def run(smoke=False):
    """{command: wall seconds (median/min/max)}, with ratios to the bare session."""
    rounds = 1 if smoke else 3
    d = tempfile.mkdtemp(prefix="edgebus-commands-bench-")
    try:
        with tlog.LogWriter(os.path.join(d, "tlog"), segment_seconds=None, gateway="gw") as w:
            for i in range(RECORDS):
                w.append(_record(i, time.time() - RECORDS * 0.001))
        table = os.path.join(d, "t0")
        cmds = _commands(d, table)
        if smoke:  # that each command runs: the Spark paths once (ingest) are enough
            cmds = {k: v for k, v in cmds.items() if k in SMOKE}
        walls = {k: [] for k in cmds}
        for r in range(rounds):
            for k, argv in cmds.items():  # ingest first: the others read round 0's table
                walls[k].append(_wall(argv(r) if callable(argv) else argv))
        out = {k: _summary(v) for k, v in walls.items()}
        bare = out["bare"]["median"]
        return {
            "records": RECORDS,
            "rounds": rounds,
            "seconds": out,
            "vs_bare": {k: round(v["median"] / bare, 2) for k, v in out.items()},
        }
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(run(smoke="--smoke" in sys.argv[1:]), indent=1))
