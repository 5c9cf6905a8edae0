"""Spark ingestion benchmark (the `edgebus` data source, ingest/) on local[2].

    python -m dev.bench.spark_bench [--smoke]

throughput: rows/s reading the same N telemetry records (a) from the bridge's
log through the `edgebus` data source, (b) with Spark's own JSON file source
from the same record bodies written as JSON lines, read with an explicit
schema and projected to the same columns, and (c) through a Python data source
that does no reading (dev/bench/spark_ceiling.py: the same partitions, the
batches kept in memory), the ceiling of any Python data source here.  All are
forced through every column with the `noop` sink; each is run `repeats` times,
alternating, after one warm-up run each (Python worker start-up, JIT);
median/min/max.

latency: publish -> queryable.  A record is appended to the log and its
segment sealed (what the bridge's size/time roll does), and the clock runs
until a running streaming query over the log (foreachBatch, polling as fast
as Spark allows) holds it.  In production add the bridge's seal delay
(segment_seconds, 60 s by default, plus its tick period).
"""
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tlog  # noqa: E402

T0 = 1_712_000_000.0


def _summary(vals):
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "n": len(vals)}


def _record(i):
    """A device record as the bridge logs it (about 330 bytes of JSON)."""
    node = "node-%02d" % (i % 16)
    return {"ts_host": T0 + i * 0.001, "topic": ("sensors", node, "env"),
            "payload": {"temp": 20.0 + (i % 100) / 10, "hum": 40 + i % 20, "ok": True},
            "ts_device": 1000.0 + i * 0.001, "seq": i // 16, "origin_kind": "link",
            "conn_id": "c-" + node, "principal": "device:" + node, "link_id": "uart0",
            "peer_node": node, "peer_sid": node + "-boot1", "generation": 3,
            "extra": {"seq": i // 16, "ts": 1000.0 + i * 0.001}}


def _session():
    from ingest.job import small_session
    return small_session("edgebus-spark-bench")


def _write_inputs(d, n):
    """The log (8 MiB segments) and the same bodies as JSON lines."""
    log = os.path.join(d, "log")
    with tlog.LogWriter(log, segment_bytes=8 * 1024 * 1024, segment_seconds=None) as w:
        for i in range(n):
            w.append(_record(i))
    jdir = os.path.join(d, "json")
    os.makedirs(jdir)
    with open(os.path.join(jdir, "records.jsonl"), "w", encoding="utf-8") as f:
        for _pos, rec in tlog.read_log(log, decode_payload=False):
            rec["topic"] = list(rec["topic"])
            f.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")))
            f.write("\n")
    size = sum(os.path.getsize(os.path.join(log, x)) for x in os.listdir(log)
               if x.endswith(".seg"))
    return log, jdir, size, os.path.getsize(os.path.join(jdir, "records.jsonl"))


def _json_frame(spark, jdir):
    """Spark's JSON source over the same bodies, as the same columns (but
    segment/offset, which JSON lines do not have)."""
    from pyspark.sql import functions as F

    schema = ("ts_host double, topic array<string>, payload string, ts_device double, "
              "seq long, origin_kind string, conn_id string, principal string, "
              "link_id string, peer_node string, peer_sid string, generation long, "
              "extra string")
    df = spark.read.schema(schema).json(jdir)
    return df.select(
        F.array_join("topic", "/").alias("topic"), F.col("topic").alias("topic_tokens"),
        "payload", "ts_device", "ts_host", F.timestamp_micros(
            F.round(F.col("ts_host") * 1e6).cast("long")).alias("ts_host_time"),
        "link_id", "peer_node", "peer_sid", "generation", "seq", "origin_kind", "conn_id",
        "principal", "extra")


def _time_noop(df):
    t = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t


def throughput(spark, log, jdir, n, repeats):
    from dev.bench.spark_ceiling import CeilingSource
    spark.dataSource.register(CeilingSource)
    frames = {"edgebus": lambda: spark.read.format("edgebus").load(log),
              "spark_json": lambda: _json_frame(spark, jdir),
              "ceiling": lambda: spark.read.format("edgebus-ceiling").load(log)}
    for f in frames.values():
        assert f().count() == n
        _time_noop(f())            # warm-up (the ceiling source keeps its batches here)
    rates = {k: [] for k in frames}
    for _ in range(repeats):       # alternating, so drifts hit all three alike
        for k, f in frames.items():
            rates[k].append(n / _time_noop(f()))
    med = {k: statistics.median(v) for k, v in rates.items()}
    return {"edgebus_rows_per_s": _summary(rates["edgebus"]),
            "spark_json_rows_per_s": _summary(rates["spark_json"]),
            "python_source_ceiling_rows_per_s": _summary(rates["ceiling"]),
            "partitions": frames["edgebus"]().rdd.getNumPartitions(),
            "ratio_median": med["edgebus"] / med["spark_json"],
            "ceiling_ratio_median": med["ceiling"] / med["spark_json"]}


def latency(spark, d, samples):
    """Seconds from appending a record (and sealing its segment) to a running
    streaming query holding it."""
    log = os.path.join(d, "lat-log")
    w = tlog.LogWriter(log, segment_seconds=None)
    w.append(_record(0))
    w.roll()
    seen = {}
    cv = threading.Condition()

    def on_batch(df, _batch_id):
        got = [r["seq"] for r in df.select("seq").collect()]
        now = time.perf_counter()
        with cv:
            for s in got:
                seen.setdefault(s, now)
            cv.notify_all()

    q = (spark.readStream.format("edgebus").load(log).writeStream
         .foreachBatch(on_batch).trigger(processingTime="0 seconds")
         .option("checkpointLocation", os.path.join(d, "lat-ckpt")).start())
    try:
        with cv:
            if not cv.wait_for(lambda: 0 in seen, timeout=120):
                raise RuntimeError("the streaming query never delivered the first record")
        out = []
        for k in range(1, samples + 1):
            time.sleep(0.2)
            rec = _record(0)
            rec["seq"] = k
            t = time.perf_counter()
            w.append(rec)
            w.roll()
            with cv:
                if not cv.wait_for(lambda: k in seen, timeout=60):
                    raise RuntimeError("record %d not delivered within 60 s" % k)
                out.append(seen[k] - t)
    finally:
        q.stop()
        w.close()
    return {"publish_to_queryable_s": _summary(out)}


def run(smoke=False):
    """The figures as a dict (see the module docstring)."""
    n = 20_000 if smoke else 200_000
    repeats = 2 if smoke else 5
    d = tempfile.mkdtemp(prefix="edgebus-spark-bench-")
    try:
        t = time.perf_counter()
        log, jdir, log_bytes, json_bytes = _write_inputs(d, n)
        write_s = time.perf_counter() - t
        spark = _session()
        try:
            res = {"records": n, "repeats": repeats, "master": "local[2]",
                   "log_bytes": log_bytes, "json_bytes": json_bytes,
                   "log_write_s": write_s}
            res.update(throughput(spark, log, jdir, n, repeats))
            res.update(latency(spark, d, 3 if smoke else 10))
        finally:
            spark.stop()
        return res
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(run(smoke="--smoke" in sys.argv[1:]), indent=1))
