"""`edgebus ingest`: stream telemetry logs into a Parquet table, exactly once.

    edgebus ingest --log DIR [DIR|GLOB ...] --table DIR --checkpoint DIR [--master URL] [--once]
                   [--watermark SECONDS] [--trigger-interval SECONDS]
                   [--max-records-per-trigger N] [--max-bytes-per-trigger N] [--compact]
    spark-submit ingest/job.py --log DIR --table DIR --checkpoint DIR ...   (same options)

The table is partitioned by ``date`` (UTC day of ts_host) and ``peer_node``.
Several logs (one per gateway: a list of directories or globs) go into one
table through one query, each log a source of its own; the ``gateway`` column
says which bridge logged a row.  Records logged twice by a device (same
peer_node, peer_sid, seq; e.g. a link replay, or the same boot heard by two
gateways) are kept once when the copies are at most --watermark seconds apart
(by ts_host).  Records without those keys (local traffic) are all kept.
Exactly once: the source's offsets are log positions, Spark's checkpoint
records which were planned and committed, and the file sink's metadata log
(``TABLE/_spark_metadata``) lists only files of committed batches, so a
killed job restarted on the same checkpoint neither loses nor repeats a row.
Read the table with Spark (``spark.read.parquet(TABLE)``), which honours that
log.  Skipped corrupt log data is listed in ``TABLE/_corrupt/``.  --compact
merges each partition's small files (edgebus.ingest.compaction) before the query
starts and, with --once, after it ends; one job writes a table at a time.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from edgebus.ingest import compaction
from edgebus.ingest.logdirs import check_log_dirs, check_logs, log_dirs
from edgebus.ingest.session import session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType

DEFAULT_WATERMARK = 600.0
# With the bridge's 10 s seals: publish -> row p50 about 8 s (docs/spark.md).
DEFAULT_TRIGGER_INTERVAL = 2.0
DEFAULT_REFRESH_EVERY = 30.0
# The packages of the tables derived from the table (edgebus.ingest.NAME): each
# has add_arguments(p) and refresh(spark, args) -> a line for the user or None.
DERIVED: tuple[str, ...] = ("views", "audit")


def _table_schema() -> StructType:
    from pyspark.sql.types import DateType, StructField, StructType

    from edgebus.ingest.schema import SCHEMA

    # The file sink writes the data columns, then the partition columns.
    fields = [f for f in SCHEMA.fields if f.name != "peer_node"]
    return StructType(
        fields
        + [
            StructField("date", DateType(), True),
            StructField("peer_node", SCHEMA["peer_node"].dataType, True),
        ]
    )


def __getattr__(name: str) -> Any:  # TABLE_SCHEMA without importing pyspark at import time
    if name == "TABLE_SCHEMA":
        return _table_schema()
    raise AttributeError(name)


def add_arguments(p: argparse.ArgumentParser) -> None:
    _place_arguments(p)
    _query_arguments(p)
    _upkeep_arguments(p)
    for mod in _derived():
        mod.add_arguments(p)


def _place_arguments(p: argparse.ArgumentParser) -> None:
    """Where: the logs read, the table and checkpoint written, the Spark run on."""
    p.add_argument(
        "--log",
        required=True,
        nargs="+",
        metavar="DIR",
        help="the bridges' telemetry log directories (one per gateway; a glob "
        "such as '/srv/tlog/*' is expanded, sorted); the list is fixed "
        "for a checkpoint",
    )
    p.add_argument("--table", required=True, help="the Parquet table directory (created)")
    p.add_argument(
        "--checkpoint",
        required=True,
        help="the streaming checkpoint directory; keep it with the table",
    )
    p.add_argument(
        "--master", help="Spark master URL (default: local[*], or the one spark-submit was given)"
    )
    p.add_argument(
        "--remote",
        metavar="URL",
        help="run on a Spark Connect server (sc://host:port; default: $SPARK_REMOTE, "
        "else --master); its Python must import edgebus (docs/spark.md)",
    )


def _query_arguments(p: argparse.ArgumentParser) -> None:
    """How the streaming query runs: once or on, its dedup, its micro-batches."""
    p.add_argument(
        "--once",
        action="store_true",
        help="process what the log holds now, then exit (availableNow)",
    )
    p.add_argument(
        "--watermark",
        type=float,
        default=DEFAULT_WATERMARK,
        metavar="SECONDS",
        help="how far apart (by ts_host) duplicate copies of a device record may "
        "be and still be removed; also the dedup state kept (default %(default)s)",
    )
    p.add_argument(
        "--trigger-interval",
        type=float,
        default=DEFAULT_TRIGGER_INTERVAL,
        metavar="SECONDS",
        help="without --once: how often to look for newly sealed segments (default %(default)s)",
    )
    p.add_argument(
        "--max-records-per-trigger",
        type=int,
        metavar="N",
        help="bound each micro-batch to N records",
    )
    p.add_argument(
        "--max-bytes-per-trigger",
        type=int,
        metavar="N",
        help="bound each micro-batch to about N bytes of log",
    )


def _upkeep_arguments(p: argparse.ArgumentParser) -> None:
    """The table's upkeep: compaction, and how often the derived tables catch up."""
    p.add_argument(
        "--compact",
        action="store_true",
        help="merge each table partition's small files into one, before the "
        "query starts and (with --once) after it ends (docs/spark.md)",
    )
    p.add_argument(
        "--refresh-every",
        type=float,
        default=DEFAULT_REFRESH_EVERY,
        metavar="SECONDS",
        help="without --once: how often the derived tables (typed views, the "
        "delivery audit) catch up with the table (default %(default)s); with "
        "--once they do at the end",
    )


def _derived() -> list[Any]:
    import importlib

    return [importlib.import_module("edgebus.ingest." + name) for name in DERIVED]


def refresh_derived(spark: SparkSession, args: argparse.Namespace) -> bool:
    """Bring each derived table up to what the table holds; False when one failed
    (said on stderr; the others and the table go on)."""
    ok = True
    for mod in _derived():
        try:
            line = mod.refresh(spark, args)
        except Exception as e:  # a bad view must not stop the table's ingest
            print("edgebus ingest: %s: %s" % (mod.__name__.rsplit(".", 1)[-1], e), file=sys.stderr)
            ok = False
            continue
        if line:
            print("edgebus ingest: " + line, flush=True)
    return ok


def ingest_frame(
    spark: SparkSession,
    logs: str | list[str],
    watermark: float = DEFAULT_WATERMARK,
    corrupt_dir: str | None = None,
    **options: Any,
) -> DataFrame:
    """The streaming DataFrame the job writes: the records of the log
    directory (or list of them) logs, deduplicated, with a ``date`` column.
    options go to the edgebus source."""
    from pyspark.sql import functions as F

    df = None
    for i, log_dir in enumerate(log_dirs(logs)):
        r = spark.readStream.format("edgebus")
        if corrupt_dir:
            r = r.option("corruptDir", corrupt_dir)
        for k, v in options.items():
            if v is not None:
                r = r.option(k, str(v))
        one = r.load(log_dir).withColumn("_log", F.lit(i))
        df = one if df is None else df.union(one)
    if df is None:
        raise ValueError("no log directory given")
    return deduplicated(df, watermark)


def deduplicated(df: DataFrame, watermark: float = DEFAULT_WATERMARK) -> DataFrame:
    """df (a stream with the source's columns and ``_log``, the index of the
    log each row comes from) deduplicated per device boot within the
    watermark, with a ``date`` column."""
    from pyspark.sql import functions as F

    keyed = (
        F.col("peer_node").isNotNull() & F.col("peer_sid").isNotNull() & F.col("seq").isNotNull()
    )
    # Rows without a full device key get a unique stand-in (their log and log
    # position), so that null keys never collapse into one row; as three long
    # columns, not one string, which cost a string per row to build and hash.
    stand_in = [
        F.when(keyed, F.lit(None)).otherwise(F.col(c)).alias("_dedup_" + c)
        for c in ("_log", "segment", "offset")
    ]
    df = df.select("*", *stand_in).drop("_log")
    key = ["peer_node", "peer_sid", "seq", "_dedup__log", "_dedup_segment", "_dedup_offset"]
    df = (
        df.withWatermark("ts_host_time", "%d milliseconds" % int(watermark * 1000))
        .dropDuplicatesWithinWatermark(key)
        .drop(*key[3:])
    )
    # The UTC day, whatever the session time zone.
    return df.withColumn(
        "date", F.date_from_unix_date(F.floor(F.col("ts_host") / 86400).cast("int"))
    )


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    """Start the streaming query for parsed args; returns the StreamingQuery."""
    from edgebus.ingest.source import default_parallelism

    table = os.path.abspath(args.table)
    df = ingest_frame(
        spark,
        args.log,
        args.watermark,
        corrupt_dir=os.path.join(table, "_corrupt"),
        minPartitions=default_parallelism(spark),
        maxRecordsPerTrigger=args.max_records_per_trigger,
        maxBytesPerTrigger=args.max_bytes_per_trigger,
    )
    return write_table(df, table, args.checkpoint, args.once, args.trigger_interval)


def write_table(
    df: DataFrame, table: str, checkpoint: str, once: bool, trigger_interval: float
) -> StreamingQuery:
    """Start the query writing the stream df (ingest_frame's) to the table:
    the file sink, partitioned by date and peer_node; availableNow when once,
    else a micro-batch every trigger_interval seconds."""
    w = (
        df.writeStream.format("parquet")
        .outputMode("append")
        .option("path", os.path.abspath(table))
        .option("checkpointLocation", os.path.abspath(checkpoint))
        .partitionBy("date", "peer_node")
        .queryName("edgebus_ingest")
    )
    if once:
        w = w.trigger(availableNow=True)
    else:
        w = w.trigger(processingTime="%d milliseconds" % int(trigger_interval * 1000))
    return w.start()


def run(args: argparse.Namespace, spark: SparkSession | None = None) -> int:
    """The command: args as add_arguments' parser gives them; the exit code.
    spark: a session to run in, left running at the end (the tests' shared
    one); by default the job makes its own (session()) and stops it."""
    try:
        logs = log_dirs(args.log)
        check_log_dirs(logs)  # before the checkpoint is bound to them
        check_logs(os.path.abspath(args.checkpoint), logs)
    except ValueError as e:
        print("edgebus ingest: %s" % e, file=sys.stderr)
        return 2
    args.log = logs
    try:
        lock = compaction.table_lock(os.path.abspath(args.table))
    except compaction.TableLocked as e:
        print("edgebus ingest: %s" % e, file=sys.stderr)
        return 2
    try:
        return _run(args, spark)
    finally:
        lock.close()


def _compact(args: argparse.Namespace) -> None:
    """--compact: the table's small files merged, and each derived table's."""
    tables = [os.path.abspath(args.table)]
    for mod in _derived():
        tables += getattr(mod, "tables", lambda args: [])(args)
    for table in tables:
        if not os.path.isdir(table):
            continue  # a derived table not written yet
        r = compaction.compact(table)
        name = "" if table == tables[0] else " %s:" % os.path.basename(table)
        if r["skipped"]:
            print("edgebus ingest:%s compaction skipped: %s" % (name, r["skipped"]), flush=True)
        elif r["files_before"] or not name:
            print(
                "edgebus ingest:%s compacted %d small files into %d (%d rows)"
                % (name, r["files_before"], r["files_after"], r["rows"]),
                flush=True,
            )


def _run(args: argparse.Namespace, spark: SparkSession | None) -> int:
    if args.compact:
        _compact(args)
    own = spark is None
    if spark is None:
        spark = session(args.master, remote=args.remote)
    counter = _progress_listener()
    spark.streams.addListener(counter)
    q = start(spark, args)
    print(
        "edgebus ingest: %s -> %s (checkpoint %s)%s"
        % (", ".join(args.log), args.table, args.checkpoint, ", once" if args.once else ""),
        flush=True,
    )
    rc = _await(spark, q, args)
    # Listener events arrive asynchronously: wait (briefly) for the last batch's.
    last = q.lastProgress
    deadline = time.monotonic() + 5
    while last and counter.last_batch < last["batchId"] and time.monotonic() < deadline:
        time.sleep(0.05)
    _say_what_was_read(counter, args)
    spark.streams.removeListener(counter)  # on Spark Connect, before the session ends
    if own:
        spark.stop()
    if args.compact and args.once and rc == 0:
        _compact(args)
    return rc


def _await(spark: SparkSession, q: StreamingQuery, args: argparse.Namespace) -> int:
    """Wait for the query to end (--once, Ctrl-C, or its failure), the derived
    tables catching up while it runs and once at its end; the exit code."""
    from pyspark.errors import StreamingQueryException

    stopping = _stop_on_interrupt(q)
    try:
        if args.once:
            q.awaitTermination()
        else:
            while not q.awaitTermination(args.refresh_every):
                refresh_derived(spark, args)
        if stopping.is_set():
            print("edgebus ingest: stopped; derived tables catch up at the next run", flush=True)
        elif not refresh_derived(spark, args):
            return 1
    except KeyboardInterrupt:  # a second Ctrl-C: leave now
        q.stop()
    except StreamingQueryException as e:
        print("edgebus ingest: the query failed: %s" % e, file=sys.stderr)
        return 1
    return 0


def _say_what_was_read(counter: Any, args: argparse.Namespace) -> None:
    """The closing lines: records and micro-batches read, records dropped as
    older than the watermark, corrupt log data skipped."""
    from edgebus.ingest.corruption import corrupt_report

    print(
        "edgebus ingest: read %d log records in %d micro-batches" % (counter.rows, counter.batches),
        flush=True,
    )
    if counter.too_old:
        # Only when the bridge's clock went back by more than the watermark.
        print(
            "edgebus ingest: WARNING: %d records were older than the watermark (%g s "
            "before the newest ts_host seen) and were dropped; see docs/spark.md"
            % (counter.too_old, args.watermark),
            flush=True,
        )
    bad = corrupt_report(os.path.join(os.path.abspath(args.table), "_corrupt"))
    if bad["regions"] or bad["missing"]:
        print(
            "edgebus ingest: the log has %d corrupt region(s) and %d missing segment "
            "range(s), skipped (listed in %s)"
            % (len(bad["regions"]), len(bad["missing"]), os.path.join(args.table, "_corrupt")),
            flush=True,
        )


def _stop_on_interrupt(q: StreamingQuery) -> threading.Event:
    """Ctrl-C (SIGINT) stops the query from another thread, and the job ends as
    after --once; a second one leaves at once.  pyspark's own handler makes a
    py4j call inside the one the main thread waits in (py4j's "reentrant call"
    tracebacks)."""
    stopping = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        return stopping

    def interrupted(signum: int, frame: Any) -> None:
        if stopping.is_set():
            raise KeyboardInterrupt
        stopping.set()
        threading.Thread(target=q.stop, name="edgebus-ingest-stop", daemon=True).start()

    signal.signal(signal.SIGINT, interrupted)
    return stopping


def _progress_listener() -> Any:
    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):
        """Counts what the query read (recentProgress keeps only the last batches)."""

        def __init__(self) -> None:
            self.rows = self.batches = self.too_old = 0
            self.last_batch = -1

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            self.batches += 1
            self.rows += event.progress.numInputRows
            self.too_old += sum(
                op.numRowsDroppedByWatermark for op in event.progress.stateOperators
            )
            self.last_batch = max(self.last_batch, event.progress.batchId)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return Progress()


if __name__ == "__main__":  # spark-submit ingest/job.py ...
    import argparse

    ap = argparse.ArgumentParser(prog="job.py", description=__doc__.splitlines()[0])
    add_arguments(ap)
    sys.exit(run(ap.parse_args()))
