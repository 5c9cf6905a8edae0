"""Spark ingestion benchmark (the `edgebus` data source and job, ingest/) on local[2].

    python -m dev.bench.spark_bench [--smoke]

The same N telemetry records are written as a version-2 log (Parquet sealed
segments, what the bridge writes), as a version-1 log (row segments, the
format before), and as JSON lines (the bodies).

source: rows/s reading them (a) through the `edgebus` data source from the
version-2 log, (b) the same from the version-1 log, (c) with Spark's own JSON
file source (explicit schema, projected to the same columns), (d) with
Spark's own Parquet reader straight from the sealed segments (the ceiling:
Spark's vectorised reader, no Python).  Each is forced through every column
with the `noop` sink, run `repeats` times alternating after a warm-up;
median/min/max.

job: rows/s of `edgebus ingest --once` (log -> deduplicated, partitioned
Parquet table) against a plain job doing the same from the JSON lines
(Spark's JSON stream source -> the same deduplication -> the same sink),
and the same job reading the sealed segments with Spark's Parquet file
stream source, each on a fresh table and checkpoint, wall time including
query start; the long-running job's figure from the same runs: rows per
second in micro-batches (Spark's triggerExecution), what a running query
pays per batch, and each query's start (start() to its first micro-batch).
Where the time goes (job_stages, one warm round): the edgebus and JSON
queries cut short, reading only and reading + dedup into the noop
sink, against the full query; Spark's per-batch addBatch time and the time
outside micro-batches (query start and stop).

writer: CPU per record of the log writer (append, group-commit flushes, and
the seals) sealing as Parquet (version 2) against sealing row files
(version 1): what columnar sealing adds to the bridge.

fresh: publish -> queryable at the defaults.  A writer with the bridge's
default segment_seconds, ticked every second as the bridge does, takes a
steady stream of records while `edgebus ingest` runs with its default
trigger interval; a record is queryable when the micro-batch whose end
offset passes its position has committed.  p50/p99 over every record.
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

from edgebus import tlog  # noqa: E402

T0 = 1_712_000_000.0
JSON_SCHEMA = (
    "ts_host double, topic array<string>, payload string, ts_device double, "
    "seq long, origin_kind string, conn_id string, principal string, "
    "link_id string, peer_node string, peer_sid string, generation long, "
    "extra string"
)


def _summary(vals):
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def _pct(vals, q):
    s = sorted(vals)
    return s[min(len(s) - 1, int(q * len(s)))]


def _record(i, t0=T0):
    """A device record as the bridge logs it (about 330 bytes of JSON)."""
    node = "node-%02d" % (i % 16)
    return {
        "ts_host": t0 + i * 0.001,
        "topic": ("sensors", node, "env"),
        "payload": {"temp": 20.0 + (i % 100) / 10, "hum": 40 + i % 20, "ok": True},
        "ts_device": 1000.0 + i * 0.001,
        "seq": i // 16,
        "origin_kind": "link",
        "conn_id": "c-" + node,
        "principal": "device:" + node,
        "link_id": "uart0",
        "peer_node": node,
        "peer_sid": node + "-boot1",
        "generation": 3,
        "extra": {"seq": i // 16, "ts": 1000.0 + i * 0.001},
    }


def _session():
    from edgebus.ingest.session import small_session

    return small_session("edgebus-spark-bench")


def _dir_bytes(d):
    return sum(
        os.path.getsize(os.path.join(d, x))
        for x in os.listdir(d)
        if x.endswith((".seg", ".parquet"))
    )


def _write_inputs(d, n):
    """The logs (8 MiB row segments) and the same bodies as JSON lines."""
    logs = {}
    for version in (2, 1):
        logs[version] = os.path.join(d, "log-v%d" % version)
        with tlog.LogWriter(
            logs[version],
            segment_bytes=8 * 1024 * 1024,
            segment_seconds=None,
            version=version,
            gateway="bench" if version == 2 else None,
        ) as w:
            for i in range(n):
                w.append(_record(i))
    jdir = os.path.join(d, "json")
    os.makedirs(jdir)
    with open(os.path.join(jdir, "records.jsonl"), "w", encoding="utf-8") as f:
        for _pos, rec in tlog.read_log(logs[1], decode_payload=False):
            rec["topic"] = list(rec["topic"])
            f.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")))
            f.write("\n")
    sizes = {
        "log_v2_bytes": _dir_bytes(logs[2]),
        "log_v1_bytes": _dir_bytes(logs[1]),
        "json_bytes": os.path.getsize(os.path.join(jdir, "records.jsonl")),
    }
    return logs, jdir, sizes


def _json_columns(df):
    """The JSON bodies as the source's columns (segment/offset, which JSON lines
    do not have, as 0: every benchmark record has a device key)."""
    from pyspark.sql import functions as F

    return df.select(
        F.array_join("topic", "/").alias("topic"),
        F.col("topic").alias("topic_tokens"),
        "payload",
        "ts_device",
        "ts_host",
        F.timestamp_micros(F.round(F.col("ts_host") * 1e6).cast("long")).alias("ts_host_time"),
        "link_id",
        "peer_node",
        "peer_sid",
        "generation",
        "seq",
        "origin_kind",
        "conn_id",
        "principal",
        "extra",
        F.lit(0).cast("long").alias("segment"),
        F.lit(0).cast("long").alias("offset"),
    )


def _parquet_frame(spark, log):
    """Spark's own Parquet reader on the sealed segments, the source's columns."""
    from edgebus.ingest.schema import SCHEMA

    return spark.read.option("pathGlobFilter", "*.parquet").parquet(log).select(*SCHEMA.names)


def _time_noop(df):
    t = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t


def source(spark, logs, jdir, n, repeats):
    frames = {
        "edgebus": lambda: spark.read.format("edgebus").load(logs[2]),
        "edgebus_v1": lambda: spark.read.format("edgebus").load(logs[1]),
        "spark_json": lambda: _json_columns(spark.read.schema(JSON_SCHEMA).json(jdir)),
        "spark_parquet": lambda: _parquet_frame(spark, logs[2]),
    }
    for f in frames.values():
        assert f().count() == n
        _time_noop(f())  # warm-up (Python workers, JIT)
    rates = {k: [] for k in frames}
    for _ in range(repeats):  # alternating, so drifts hit all alike
        for k, f in frames.items():
            rates[k].append(n / _time_noop(f()))
    med = {k: statistics.median(v) for k, v in rates.items()}
    out = {"%s_rows_per_s" % k: _summary(v) for k, v in rates.items()}
    out.update(
        partitions=frames["edgebus"]().rdd.getNumPartitions(),
        ratio_median=med["edgebus"] / med["spark_json"],
        v1_ratio_median=med["edgebus_v1"] / med["spark_json"],
        parquet_ratio_median=med["spark_parquet"] / med["spark_json"],
    )
    return out


def _run_query(df, table, sink="parquet"):
    """Run df to the end (availableNow) into the table's file sink (or noop):
    (wall seconds, {durationMs part: total ms over its micro-batches}, seconds
    from the start to the first micro-batch: the query's start)."""
    import datetime

    from edgebus.ingest import job

    t0 = time.time()
    t = time.perf_counter()
    if sink == "parquet":
        q = job.write_table(df, table, table + ".ckpt", True, 5.0)
    else:
        q = (
            df.writeStream.format("noop")
            .option("checkpointLocation", table + ".ckpt")
            .trigger(availableNow=True)
            .start()
        )
    q.awaitTermination()
    dt = time.perf_counter() - t
    parts = {}
    for p in q.recentProgress:
        for k, v in p["durationMs"].items():
            parts[k] = parts.get(k, 0) + v
    first = datetime.datetime.fromisoformat(q.recentProgress[0]["timestamp"].replace("Z", "+00:00"))
    return dt, parts, first.timestamp() - t0


def jobs(spark, d, logs, jdir, n, repeats):
    """rows/s of the ingest job, of the same job over Spark's JSON source and
    over Spark's Parquet file source on the sealed segments; and where the
    time goes (module docstring)."""
    from pyspark.sql import functions as F

    from edgebus.ingest import job
    from edgebus.ingest.report import read_table

    def edgebus():
        return (
            spark.readStream.format("edgebus")
            .option("minPartitions", spark.sparkContext.defaultParallelism)
            .load(logs[2])
        )

    def plain_json():
        return _json_columns(spark.readStream.schema(JSON_SCHEMA).json(jdir))

    def parquet_files():
        return (
            spark.readStream.schema(_parquet_frame(spark, logs[2]).schema)
            .option("pathGlobFilter", "*.parquet")
            .parquet(logs[2])
        )

    sources = {"ingest_job": edgebus, "json_job": plain_json, "parquet_job": parquet_files}

    def full(src):
        return job.deduplicated(src().withColumn("_log", F.lit(0)))

    rates = {k: [] for k in sources}
    running = {k: [] for k in sources}  # rows / seconds in micro-batches
    starts = {k: [] for k in sources}
    stages = {k: {} for k in ("ingest_job", "json_job")}
    for r in range(repeats + 1):  # the first round warms up
        for name, src in sources.items():
            table = os.path.join(d, "%s-%d" % (name, r))
            dt, parts, start_s = _run_query(full(src), table)
            if r == 0:
                assert read_table(spark, table).count() == n, name
            else:
                rates[name].append(n / dt)
                running[name].append(n / (parts["triggerExecution"] / 1e3))
                starts[name].append(start_s)
            if r == 1 and name in stages:
                # The same query cut short: reading only, then reading and the
                # dedup, both into the noop sink (Spark's per-batch addBatch).
                stages[name]["full"] = {
                    "wall_s": dt,
                    "add_batch_s": parts["addBatch"] / 1e3,
                    "outside_batches_s": dt - parts["triggerExecution"] / 1e3,
                    "start_s": start_s,
                }
                for stage, frame in (
                    ("read", src().withColumn("date", F.to_date("ts_host_time"))),
                    ("dedup", full(src)),
                ):
                    t2, p2, _ = _run_query(frame, table + "-" + stage, sink="noop")
                    stages[name][stage] = {"wall_s": t2, "add_batch_s": p2["addBatch"] / 1e3}
            shutil.rmtree(table, ignore_errors=True)
            shutil.rmtree(table + ".ckpt", ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    run_med = {k: statistics.median(v) for k, v in running.items()}
    return {
        "ingest_job_running_rows_per_s": _summary(running["ingest_job"]),
        "json_job_running_rows_per_s": _summary(running["json_job"]),
        "running_ratio_median": run_med["ingest_job"] / run_med["json_job"],
        "ingest_job_start_s": _summary(starts["ingest_job"]),
        "json_job_start_s": _summary(starts["json_job"]),
        "ingest_job_rows_per_s": _summary(rates["ingest_job"]),
        "json_job_rows_per_s": _summary(rates["json_job"]),
        "parquet_job_rows_per_s": _summary(rates["parquet_job"]),
        "job_ratio_median": med["ingest_job"] / med["json_job"],
        "parquet_job_ratio_median": med["parquet_job"] / med["json_job"],
        "job_stages": stages,
    }


def writer_cpu(d, n, segments=10):
    """CPU microseconds per record of LogWriter: appends, a flush every 64
    records (group commits), a seal every n/segments records."""
    out = {}
    per_seg = max(1, n // segments)
    recs = [_record(i) for i in range(n)]
    for version in (1, 2, 1, 2):  # twice each, the second counts
        log = os.path.join(d, "cpu-v%d" % version)
        shutil.rmtree(log, ignore_errors=True)
        with tlog.LogWriter(log, segment_seconds=None, version=version, gateway="bench") as w:
            t = time.process_time()
            for i, r in enumerate(recs):
                w.append(r)
                if i % 64 == 63:
                    w.flush()
                if i % per_seg == per_seg - 1:
                    w.roll()
            dt = time.process_time() - t
        out["writer_cpu_us_per_record_v%d" % version] = 1e6 * dt / n
        shutil.rmtree(log, ignore_errors=True)
    return out


def fresh(spark, d, seconds, rate):
    """Publish -> queryable at the defaults (module docstring)."""
    from pyspark.sql.streaming import StreamingQueryListener

    from edgebus.bridge.config import Config
    from edgebus.ingest import job

    cfg = Config()
    log, table = os.path.join(d, "fresh-log"), os.path.join(d, "fresh-table")
    w = tlog.LogWriter(log, segment_seconds=cfg.segment_seconds, gateway="bench")
    appended = []  # (position, wall time)
    committed = []  # (end position, wall time)
    lock = threading.Lock()

    class Ends(StreamingQueryListener):
        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            end = event.progress.sources[0].endOffset
            if end:
                e = json.loads(end)
                with lock:
                    committed.append(((e["segment"], e["offset"]), time.time()))

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    listener = Ends()
    spark.streams.addListener(listener)
    # The stream needs the directory; an empty sealed segment is never made.
    w.append(_record(0, time.time()))
    w.roll()
    q = job.write_table(
        job.ingest_frame(spark, log, minPartitions=2),
        table,
        table + ".ckpt",
        False,
        job.DEFAULT_TRIGGER_INTERVAL,
    )
    try:
        stop = time.time() + seconds
        last_tick, i = 0.0, 1
        while time.time() < stop:
            now = time.time()
            pos = w.append(_record(i, now))
            i += 1
            appended.append((pos, now))
            if now - last_tick >= 1.0:  # the bridge's IDLE tick: age rolls
                w.tick()
                last_tick = now
            time.sleep(1.0 / rate)
        w.roll()
        last = appended[-1][0]
        deadline = time.time() + 120
        while time.time() < deadline:
            with lock:
                if committed and committed[-1][0] > last:
                    break
            time.sleep(0.2)
    finally:
        q.stop()
        w.close()
        spark.streams.removeListener(listener)
    lat = []
    with lock:
        ends = list(committed)
    for pos, t in appended:
        done = next((ct for end, ct in ends if end > pos), None)
        if done is None:
            raise RuntimeError("record at %r never became queryable" % (pos,))
        lat.append(done - t)
    return {
        "fresh_segment_seconds": cfg.segment_seconds,
        "fresh_trigger_interval_s": job.DEFAULT_TRIGGER_INTERVAL,
        "fresh_records": len(lat),
        "fresh_batches": len(ends),
        "publish_to_queryable_p50_s": _pct(lat, 0.5),
        "publish_to_queryable_p99_s": _pct(lat, 0.99),
        "publish_to_queryable_max_s": max(lat),
    }


def run(smoke=False):
    """The figures as a dict (see the module docstring)."""
    n = 20_000 if smoke else 200_000
    repeats = 2 if smoke else 5
    d = tempfile.mkdtemp(prefix="edgebus-spark-bench-")
    try:
        t = time.perf_counter()
        logs, jdir, sizes = _write_inputs(d, n)
        write_s = time.perf_counter() - t
        res = {"records": n, "repeats": repeats, "master": "local[2]", "log_write_s": write_s}
        res.update(sizes)
        res.update(writer_cpu(d, n // 4 if smoke else n))
        spark = _session()
        try:
            res.update(source(spark, logs, jdir, n, repeats))
            res.update(jobs(spark, d, logs, jdir, n, 1 if smoke else 3))
            res.update(fresh(spark, d, 20 if smoke else 120, 50))
        finally:
            spark.stop()
        return res
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(run(smoke="--smoke" in sys.argv[1:]), indent=1))
