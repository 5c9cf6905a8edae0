"""`edgebus report`: what the fleet sent, from the table `edgebus ingest` writes.

    edgebus report --table DIR [--audit DIR] [--plot FILE.png] [--master URL]

Prints the table's summary (edgebus.ingest.report.summary); with a delivery
audit table (edgebus.ingest.report.audit), per device boot what was late,
missing and why, duplicated, and one line for the whole.  --plot writes a
PNG of each boot's deliveries and their latency (edgebus.ingest.report.plot).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from edgebus.ingest.report.summary import format_report, summarize

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
    p.add_argument("--master", help="Spark master URL (default: local[*])")


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
    from edgebus.ingest.report.audit import format_audit, summarize_audit
    from edgebus.ingest.report.plot import plot_audit
    from edgebus.ingest.session import session

    spark = session(args.master, app="edgebus-report", source=False)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        s = summarize(spark, table)
        print(format_report(s, args.table))
        a = summarize_audit(spark, table, audit_dir(table, args.audit))
        if a is not None:
            print("\n" + format_audit(a))
        if args.plot:
            width = plot_audit(spark, table, args.plot)
            if width is None:
                print("\nplot: nothing to plot (no numbered device readings)")
            else:
                print(
                    "\nplot: %s (each boot's readings on time, late, missing; %s bins)"
                    % (args.plot, _human(width))
                )
    finally:
        spark.stop()
    return 0
