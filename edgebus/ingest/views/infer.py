"""`edgebus views infer`: draft a typed view from the ingest table.

    edgebus views infer --table DIR --topic PATTERN [--name NAME] [--spark] [--master URL]

Reads the table's rows whose topic matches PATTERN and prints a ``[[view]]``
block for the views file (docs/spark.md, "Typed views"), its schema inferred
from the payloads as a refresh infers a new column (types.infer), with
a comment per key whose values had more than one type: review it, then paste
it into the file given to ``edgebus ingest --views``.
The table's committed files are read with pyarrow in this process
(edgebus.ingest.views.arrow), in about a second; --spark (or --master) reads
them with Spark instead, which starts a JVM first.  Either counts the same
types (Spark's schema_of_variant, or json_types' copy of it) and prints the
same block.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = sub.add_parser("infer", help="print a [[view]] block with a schema inferred from the table")
    q.add_argument("--table", required=True, help="the table edgebus ingest writes")
    q.add_argument(
        "--topic", required=True, help="the view's topic pattern (+ one token, # the rest)"
    )
    q.add_argument(
        "--name", help="the view's name (default: from the pattern's last literal token)"
    )
    q.add_argument(
        "--spark",
        action="store_true",
        help="read the table with Spark (starts a JVM) instead of pyarrow in this process",
    )
    q.add_argument(
        "--master", help="read the table with Spark on this master URL (implies --spark)"
    )


def infer_block(spark: SparkSession | None, table: str, topic: str, name: str | None = None) -> str:
    """The [[view]] TOML block for the table's rows of the pattern topic, read
    with spark, or with pyarrow when spark is None (ValueError for a bad
    pattern or name, or no matching row)."""
    from edgebus.ingest.views.config import parse

    if name is None:
        words = [t for t in topic.split("/") if t not in ("+", "#") and t.isidentifier()]
        name = words[-1] if words else "view"
    view = parse({"view": [{"name": name, "topic": topic}]}, "--topic/--name").views[0]
    if spark is None:
        from edgebus.ingest.views import arrow

        counts = arrow.key_types(table, view.tokens)
    else:
        from edgebus.ingest.report.tables import read_table
        from edgebus.ingest.views.payloads import key_types, payload_map, topic_filter

        rows = read_table(spark, os.path.abspath(table)).where(topic_filter(view.tokens))
        counts = key_types(rows.select(payload_map().alias("_m"))).get(None, ({}, 0))[0]
    if not counts:
        raise ValueError("no row of %s has a non-null payload on %s" % (table, topic))
    return _block(table, topic, name, counts)


def _block(table: str, topic: str, name: str, counts: dict[str, list[tuple[str, int]]]) -> str:
    """The block of the per-key (type text, rows) counts."""
    from edgebus.ingest.views import types as views_types
    from edgebus.ingest.views.config import PROVENANCE

    cols, notes = [], []
    for key in sorted(counts):
        ddl = views_types.infer(counts[key])
        if len(counts[key]) > 1:
            seen = sorted(counts[key], key=lambda c: (-c[1], c[0]))  # ties in a fixed order
            notes.append("# %s: %s" % (key, ", ".join("%s x%d" % c for c in seen)))
        if ddl is None:
            notes.append("# %s: every value null so far; left out (added when one is not)" % key)
        elif key.lower() in PROVENANCE or not key or "`" in key:
            notes.append(
                "# %s: cannot be a declared column (a refresh adds it as payload_%s)" % (key, key)
            )
        else:
            cols.append("%s %s" % (views_types.quote(key), ddl))
    lines = (
        ["# inferred from %s (%s)" % (os.path.abspath(table), topic)]
        + notes
        + [
            "[[view]]",
            "name = %s" % _toml(name),
            "topic = %s" % _toml(topic),
            "schema = %s" % _toml(", ".join(cols)),
        ]
    )
    return "\n".join(lines) + "\n"


def _toml(s: str) -> str:
    """s as a TOML basic string: JSON's escapes, but a character beyond U+FFFF
    as itself (TOML refuses the surrogate pair JSON escapes it as)."""
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def run(args: argparse.Namespace) -> int:
    from edgebus.ingest.compaction import META

    if not os.path.isdir(os.path.join(args.table, META)):
        print(
            "edgebus views infer: no table at %s (edgebus ingest writes it)" % args.table,
            file=sys.stderr,
        )
        return 2
    spark = None
    if args.spark or args.master:
        from edgebus.ingest.session import session

        spark = session(args.master, app="edgebus-views", source=False)  # reads the table only
        spark.sparkContext.setLogLevel("ERROR")
    try:
        sys.stdout.write(infer_block(spark, args.table, args.topic, args.name))
    except ValueError as e:
        print("edgebus views infer: %s" % e, file=sys.stderr)
        return 2
    finally:
        if spark is not None:
            spark.stop()
    return 0
