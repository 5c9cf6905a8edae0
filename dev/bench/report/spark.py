"""Section 5: Spark: reading the log beside JSON and Parquet, the jobs' rates
and stages, freshness, and the small fleet's commands."""

from .formats import mmm, num
from .templates import block, fill

# The commands of the small-fleet benchmark (dev/bench/spark_commands.py), as the table says them.
COMMANDS = (
    ("bare", "a bare PySpark session: start, count `spark.range(10)`, stop (the baseline)", ""),
    ("ingest", "`edgebus ingest --once` into a fresh table and checkpoint", "≤ 1.3×"),
    ("ingest_no_audit", "the same without the delivery audit (`--no-audit`)", ""),
    ("report", "`edgebus report` (pyarrow, no JVM)", "≤ 0.25×"),
    ("report_plot", "`edgebus report --plot` (pyarrow, no JVM)", "≤ 3 s"),
    ("report_spark", "`edgebus report --spark`", ""),
    ("infer", "`edgebus views infer` (pyarrow, no JVM)", ""),
    ("infer_spark", "`edgebus views infer --spark`", ""),
)


def commands_section(c):
    """Section 5's small fleet: each command's wall time beside a bare session."""
    if not c:
        return []
    rows = [
        "| %s | %s | %.2f× | %s |" % (what, mmm(c["seconds"][k], " s"), c["vs_bare"][k], goal or "")
        for k, what, goal in COMMANDS
        if k in c["seconds"]
    ]
    return fill(
        "spark_commands", records=num(c["records"]), rounds=c["rounds"], rows="\n".join(rows)
    )


def spark_section(sp):
    if not sp or "spark_parquet_rows_per_s" not in sp:  # results of the version-1 benchmark
        return []
    j = sp["spark_json_rows_per_s"]

    def ratio(key):
        return "%.2f" % (sp[key]["median"] / j["median"])

    parquet_job = (
        block(
            fill(
                "spark_parquet_job",
                rate=mmm(sp["parquet_job_rows_per_s"]),
                ratio="%.2f" % sp["parquet_job_ratio_median"],
            )
        )
        if "parquet_job_rows_per_s" in sp
        else ""
    )
    return fill(
        "spark",
        records=num(sp["records"]),
        master=sp["master"],
        v2_bytes=num(sp["log_v2_bytes"]),
        v1_bytes=num(sp["log_v1_bytes"]),
        json_bytes=num(sp["json_bytes"]),
        v2_rate=mmm(sp["edgebus_rows_per_s"]),
        v2_ratio=ratio("edgebus_rows_per_s"),
        v1_rate=mmm(sp["edgebus_v1_rows_per_s"]),
        v1_ratio=ratio("edgebus_v1_rows_per_s"),
        json_rate=mmm(j),
        json_ratio=ratio("spark_json_rows_per_s"),
        parquet_rate=mmm(sp["spark_parquet_rows_per_s"]),
        parquet_ratio=ratio("spark_parquet_rows_per_s"),
        job_rate=mmm(sp["ingest_job_rows_per_s"]),
        job_ratio="%.2f" % sp["job_ratio_median"],
        json_job_rate=mmm(sp["json_job_rows_per_s"]),
        running=block(_running(sp)),
        parquet_job=parquet_job,
        stages=block(_stages(sp.get("job_stages"))),
        writer_v1="%.2f" % sp["writer_cpu_us_per_record_v1"],
        writer_v2="%.2f" % sp["writer_cpu_us_per_record_v2"],
        seal_s="%g" % sp["fresh_segment_seconds"],
        trigger_s="%g" % sp["fresh_trigger_interval_s"],
        fresh_records="%d" % sp["fresh_records"],
        fresh_batches="%d" % sp["fresh_batches"],
        p50="%.1f" % sp["publish_to_queryable_p50_s"],
        p99="%.1f" % sp["publish_to_queryable_p99_s"],
        max="%.1f" % sp["publish_to_queryable_max_s"],
    )


def _running(sp):
    """The long-running job's rows: rows/s in micro-batches, and query starts."""
    if "running_ratio_median" not in sp:
        return []
    return fill(
        "spark_running",
        run_rate=mmm(sp["ingest_job_running_rows_per_s"]),
        run_ratio="%.2f" % sp["running_ratio_median"],
        json_run_rate=mmm(sp["json_job_running_rows_per_s"]),
        start=mmm(sp["ingest_job_start_s"]),
        json_start=mmm(sp["json_job_start_s"]),
    )


def _stages(st):
    """Where the jobs' time goes: the table of spark_bench's job_stages."""
    if not st:
        return []
    rows = []
    for name, what in (("ingest_job", "`edgebus ingest`"), ("json_job", "JSON-source job")):
        s = st[name]
        rows.append(
            "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %s |"
            % (
                what,
                s["read"]["add_batch_s"],
                s["dedup"]["add_batch_s"],
                s["full"]["add_batch_s"],
                s["full"]["wall_s"],
                s["full"]["outside_batches_s"],
                "%.2f" % s["full"]["start_s"] if "start_s" in s["full"] else "",
            )
        )
    js = st["json_job"]
    write = js["full"]["add_batch_s"] - js["dedup"]["add_batch_s"]
    bound = (
        fill(
            "spark_write_bound",
            write="%.2f" % write,
            wall="%.2f" % js["full"]["wall_s"],
            bound="%.2f" % (js["full"]["wall_s"] / write),
        )
        if write > 0
        else []
    )
    return fill("spark_stages", rows="\n".join(rows), write_bound=block(bound))
