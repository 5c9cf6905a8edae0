"""Shared pieces of the Spark tests: a small local session and log builders."""

import json
import sys

import pytest

from dev.harness.process import env, python, run_module
from tests.conftest import ROOT  # noqa: F401 (the Spark tests take it from here)

CLI = "edgebus.tools.cli"


def spark_env(**more):
    """The environment for a Spark job of this checkout: its packages first,
    Spark's Python workers on this CPython, and ``more``."""
    e = env()
    e["PYSPARK_PYTHON"] = sys.executable
    e.update(more)
    return e


def _ingest_args(log, table, ckpt, extra):
    logs = log if isinstance(log, list) else [log]
    # The delivery audit costs each run seconds of Spark jobs: on only where a
    # test asks for it (--audit DIR); test_spark_audit and the demo cover it.
    audit = [] if any(str(x).startswith("--audit") for x in extra) else ["--no-audit"]
    return ["ingest", "--log", *logs, "--table", table, "--checkpoint", ckpt, *audit, *extra]


def ingest_cmd(log, table, ckpt, *extra):
    """argv of `edgebus ingest` from log (a directory or a glob, or a list of
    them) into table with its checkpoint ckpt, and the options in extra."""
    return python(CLI, *_ingest_args(log, table, ckpt, extra))


def ingest(log, table, ckpt, *extra, env=None, timeout=240):
    """`edgebus ingest` (as ingest_cmd) run to its end, in env (spark_env()
    by default): the CompletedProcess."""
    return run_module(
        CLI, *_ingest_args(log, table, ckpt, extra), env=env or spark_env(), timeout=timeout
    )


def ingest_here(spark, log, table, ckpt, *extra):
    """`edgebus ingest` (as ingest()) run in this process on the session spark
    (the shared one, left running), for the tests about what ingest does to
    the table rather than about its process: no JVM of its own, 10-20 s
    less a run. argv is ingest()'s, parsed by the command's own parser
    (edgebus.tools.cli: edgebus.ingest.job.add_arguments), and run by the
    command's own job.run, so options (--compact, --max-records-per-trigger,
    ...) and checks (the log list, the table lock) do what they do on the
    command line. A CompletedProcess with its exit code and what it printed
    (its stderr: the job's own lines, not Spark's logs)."""
    import argparse
    import contextlib
    import io
    import signal
    import subprocess

    from edgebus.ingest import job

    argv = _ingest_args(log, table, ckpt, extra)
    p = argparse.ArgumentParser(prog="edgebus ingest")
    job.add_arguments(p)
    args = p.parse_args([str(x) for x in argv[1:]])
    assert args.once, "ingest_here runs to an end: --once"
    out, err = io.StringIO(), io.StringIO()
    sigint = signal.getsignal(signal.SIGINT)  # the job's Ctrl-C handler is for its process
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = job.run(args, spark)
    finally:
        signal.signal(signal.SIGINT, sigint)
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def make_session():
    """A local[2] SparkSession for one test module, with format("edgebus")."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from edgebus.ingest.session import small_session

    return small_session("edgebus-tests")


def device_record(node, sid, seq, t, gen=1, payload=None, topic=None, late=False):
    """What the bridge logs for a device message (provenance from the link);
    late: delivered out of the device's spool (extra["late"])."""
    extra = {"seq": seq, "ts": 1000.0 + seq}
    if late:
        extra["late"] = True
    return {
        "ts_host": t,
        "topic": topic or ("dev", node, "temp"),
        "payload": {"temp": 20.0 + seq % 7, "n": seq} if payload is None else payload,
        "ts_device": 1000.0 + seq,
        "seq": seq,
        "origin_kind": "link",
        "conn_id": "c-" + node,
        "principal": "device:" + node,
        "link_id": "uart0",
        "peer_node": node,
        "peer_sid": sid,
        "generation": gen,
        "extra": extra,
    }


def local_record(i, t):
    """Host-local traffic: no device key (peer_node/peer_sid/seq null)."""
    return {
        "ts_host": t,
        "topic": ("host", "load"),
        "payload": i * 0.5,
        "origin_kind": "local",
        "conn_id": "c-host",
        "principal": "app",
    }


def expected_row(rec, pos, gateway=None):
    """The row the data source must produce for a record dict logged at pos
    (by a writer naming gateway)."""
    from edgebus.tlog import encode_value

    def js(v):
        return json.dumps(encode_value(v), ensure_ascii=False, separators=(",", ":"))

    topic = rec["topic"].split("/") if isinstance(rec["topic"], str) else rec["topic"]
    toks = [str(t) for t in topic]

    def i64(v):
        return v if v is None or -(2**63) <= v < 2**63 else None

    extra = rec.get("extra") or None
    td = rec.get("ts_device")
    return {
        "topic": "/".join(toks),
        "topic_tokens": toks,
        "payload": None if rec["payload"] is None else js(rec["payload"]),
        "ts_device": None if td is None or abs(td) > 1e308 else float(td),
        "ts_host": float(rec["ts_host"]),
        "link_id": rec.get("link_id"),
        "peer_node": rec.get("peer_node"),
        "peer_sid": rec.get("peer_sid"),
        "generation": i64(rec.get("generation")),
        "seq": i64(rec.get("seq")),
        "origin_kind": rec.get("origin_kind"),
        "conn_id": rec.get("conn_id"),
        "principal": rec.get("principal"),
        "extra": None if extra is None else js(extra),
        "late": isinstance(extra, dict) and extra.get("late") is True,
        "gateway": gateway,
        "segment": pos[0],
        "offset": pos[1],
    }
