"""`edgebus report`: what the fleet sent, from the table `edgebus ingest` writes.

    edgebus report --table DIR [--audit DIR] [--plot FILE.png] [--spark] [--master URL]

Prints the table's summary (edgebus.ingest.report.summary); with a delivery
audit table (edgebus.ingest.report.audit), per device boot what was late,
missing and why, duplicated, and one line for the whole.  --plot writes a
PNG of each boot's deliveries and their latency (edgebus.ingest.report.plot).
The tables' committed files are read with pyarrow in this process
(edgebus.ingest.report.arrow), in about a second; --spark (or --master) reads
them with Spark instead, which starts a JVM first.  Either gives the same
figures, printed by the same functions.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Callable

from edgebus.ingest.report.summary import format_report

if TYPE_CHECKING:
    import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--table", required=True, help="the table directory edgebus ingest writes")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="write a PNG of each device boot's deliveries (on time, late, missing) "
        "and their latency",
    )
    p.add_argument(
        "--audit",
        metavar="DIR",
        help="the delivery audit table (default: the table's directory + '.audit')",
    )
    p.add_argument(
        "--spark",
        action="store_true",
        help="read the tables with Spark (starts a JVM) instead of pyarrow in this process",
    )
    p.add_argument(
        "--master", help="read the tables with Spark on this master URL (implies --spark)"
    )


def _human(seconds: float) -> str:
    if seconds % 86400 == 0:
        return "%d d" % (seconds // 86400)
    if seconds % 3600 == 0:
        return "%d h" % (seconds // 3600)
    if seconds % 60 == 0:
        return "%d min" % (seconds // 60)
    return "%g s" % seconds


def run(args: argparse.Namespace) -> int:
    table = os.path.abspath(args.table)
    if not os.path.isdir(table):
        print(
            "edgebus report: no table at %s (run edgebus ingest first)" % args.table,
            file=sys.stderr,
        )
        return 2
    from edgebus.ingest.audit import audit_dir

    audit = audit_dir(table, args.audit)
    if args.spark or args.master:
        return _with_spark(args, table, audit)
    from edgebus.ingest.report import arrow

    _print(
        args,
        arrow.summarize(table),
        arrow.summarize_audit(table, audit),
        lambda: arrow.plot_data(table),
    )
    return 0


def _with_spark(args: argparse.Namespace, table: str, audit: str) -> int:
    """The report from the tables read with Spark: the session this process
    already runs (a notebook's, a job's), left running, else one of its own,
    stopped at the end."""
    from pyspark.sql import SparkSession

    from edgebus.ingest.report import plot
    from edgebus.ingest.report.audit import summarize_audit
    from edgebus.ingest.report.summary import summarize
    from edgebus.ingest.session import session

    spark = SparkSession.getActiveSession()
    mine = spark is None
    if spark is None:
        spark = session(args.master, app="edgebus-report", source=False)
        spark.sparkContext.setLogLevel("ERROR")
    try:
        _print(
            args,
            summarize(spark, table),
            summarize_audit(spark, table, audit),
            lambda: plot.plot_data(spark, table),
        )
    finally:
        if mine:
            spark.stop()
    return 0


def _print(
    args: argparse.Namespace,
    summary: dict[str, Any],
    audit: dict[str, Any] | None,
    plot_data: Callable[[], dict[str, Any] | None],
) -> None:
    """Print the report of summary and audit (either path's); with --plot,
    draw plot_data()."""
    from edgebus.ingest.report.audit import format_audit
    from edgebus.ingest.report.plot import draw

    print(format_report(summary, args.table))
    if audit is not None:
        print("\n" + format_audit(audit))
    if args.plot:
        width = draw(plot_data(), args.plot)
        if width is None:
            print("\nplot: nothing to plot (no numbered device readings)")
        else:
            print(
                "\nplot: %s (each boot's readings on time, late, missing; %s bins)"
                % (args.plot, _human(width))
            )
