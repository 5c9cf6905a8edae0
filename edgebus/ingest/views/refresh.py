"""Typed views: one typed, partitioned table per topic family, refreshed from
the ingest table by ``edgebus ingest --views FILE`` (docs/spark.md, "Typed views").

A view's rows are the table rows whose topic matches its pattern: a JSON
object payload's keys are its columns (a scalar or array payload is the one
column ``value``), beside the row's provenance (config.PROVENANCE),
partitioned by (``peer_node``, ``date``).  A key the view has no column for
adds one, typed from the batch's values (types.infer); a value that
does not fit its column (types.fits, then the cast) sends its row to
the rejects table with the reason, never a null into the view.

Each table (every view, and the rejects) is an edgebus.ingest.tablelog table
whose state holds, per gateway, the log position (segment, offset) up to
which it has taken the ingest table's rows; a view's state also holds its
columns.  A refresh takes the rows above each mark and at most the newest
position the table held when the refresh began, writes the rejects, then
each view, each with its own marks: a crash between them is made good by the
next refresh, and no row goes in twice.  The new rows are read and parsed
once for all the views (one pass for their payloads' key types), then each
view's rows and rejects are written from that persisted set.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from edgebus.ingest import tablelog
from edgebus.ingest.compaction import newest_log_file
from edgebus.ingest.views.config import Config, View, load
from edgebus.ingest.views.marks import Marks, above, advanced, ahead, at_most, lowest, newest
from edgebus.ingest.views.payloads import key_types, payload_map, provenance, topic_filter
from edgebus.ingest.views.plan import Plan, plan, view_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--views",
        type=_config,
        metavar="FILE",
        help="typed views to keep beside the table: a TOML file of [[view]] name, "
        "topic pattern and schema (docs/spark.md, 'Typed views'; keep it beside "
        "the bridge's config); `edgebus views infer` drafts one",
    )


def _config(fname: str) -> Config:
    try:
        return load(fname)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def tables(args: argparse.Namespace) -> list[str]:
    """The tables args.views keeps: each view's and the rejects (for --compact)."""
    cfg: Config | None = getattr(args, "views", None)
    if cfg is None:
        return []
    return [cfg.view_path(v, args.table) for v in cfg.views] + [cfg.rejects_path(args.table)]


def refresh(spark: SparkSession, args: argparse.Namespace) -> str | None:
    """Bring every view of args.views up to the table args.table; a line
    saying what changed, or None."""
    cfg: Config | None = getattr(args, "views", None)
    if cfg is None:
        return None
    from pyspark.sql import functions as F

    from edgebus.ingest.report.tables import read_table

    table = os.path.abspath(args.table)
    if newest_log_file(table) is None:
        return None  # no batch committed yet
    src = read_table(spark, table)
    rej_path = cfg.rejects_path(table)
    _, rej_state = tablelog.committed(rej_path)
    rej_marks: dict[str, Marks] = rej_state.get("marks", {})
    states = [tablelog.committed(cfg.view_path(v, table))[1] for v in cfg.views]
    view_marks = [s.get("marks", {}) for s in states]
    tops = newest(src, lowest(view_marks + [rej_marks.get(v.name, {}) for v in cfg.views]))
    plans: list[Plan] = []
    todo: list[tuple[View, list[list[str]], Marks, Marks]] = []
    errors = []
    parsed = None
    try:
        for v, state in zip(cfg.views, states):
            try:  # checked at every refresh, so that a changed file is said at once
                columns = view_columns(v, state)
            except ValueError as e:
                errors.append(str(e))
                continue
            marks, rm = state.get("marks", {}), rej_marks.get(v.name, {})
            if not (ahead(tops, marks) and ahead(tops, rm)):
                todo.append((v, columns, marks, rm))
        if todo:
            parsed = _parsed(src, [(v, lowest([m, rm])) for v, _, m, rm in todo], tops)
            counts = key_types(parsed, "_views")
            for i, (v, columns, marks, rm) in enumerate(todo):
                mine = parsed.where(F.array_contains("_views", i))
                plans.append(plan(mine, v, columns, marks, rm, counts.get(i, ({}, 0))))
        line = _write(cfg, table, plans, rej_path, rej_marks, tops) if plans else None
    finally:
        if parsed is not None:
            parsed.unpersist()
    if errors:
        if line:  # the other views' news, said before the error
            print("edgebus ingest: " + line, flush=True)
        raise ValueError("%s: %s" % (cfg.file, "; ".join(errors)))
    return line


def _write(
    cfg: Config,
    table: str,
    plans: list[Plan],
    rej_path: str,
    rej_marks: dict[str, Marks],
    tops: Marks,
) -> str | None:
    """Commit the plans: the rejects of all, then each view; the line saying
    what each got (counted from the new files' footers: no second pass), for
    the views that got something; None when none did."""
    news = {p.view.name: [0, 0] for p in plans}
    union = None
    for p in plans:
        if p.n:
            union = p.rejects if union is None else union.unionByName(p.rejects)
    new_rej = dict(rej_marks, **{p.view.name: advanced(p.rej_marks, tops) for p in plans})
    before = set(tablelog.files(rej_path))
    tablelog.write_batch(union, rej_path, {"marks": new_rej}, ("view", "date"))
    for f in set(tablelog.files(rej_path)) - before:
        news[_partition(f, "view")][1] += _num_rows(f)
    for p in plans:
        state = {
            "topic": p.view.topic,
            "schema": p.view.schema,
            "columns": p.columns,
            "marks": advanced(p.marks, tops),
        }
        path = cfg.view_path(p.view, table)
        before = set(tablelog.files(path))
        tablelog.write_batch(p.rows if p.n else None, path, state, ("peer_node", "date"))
        news[p.view.name][0] = sum(map(_num_rows, set(tablelog.files(path)) - before))
    said = [p.summary(*news[p.view.name]) for p in plans if p.new or any(news[p.view.name])]
    return "views: " + "; ".join(said) if said else None


def _num_rows(fname: str) -> int:
    import pyarrow.parquet as pq

    return int(pq.read_metadata(fname).num_rows)


def _partition(fname: str, column: str) -> str:
    d = os.path.basename(os.path.dirname(os.path.dirname(fname)))
    assert d.startswith(column + "="), fname
    return d[len(column) + 1 :]


def _parsed(src: DataFrame, views: list[tuple[View, Marks]], tops: Marks) -> DataFrame:
    """The rows of the table new to some view (each with its lower mark),
    parsed once for all (``_m``: payload_map) and persisted; ``_views`` holds
    the indexes (in views) of the views each row is new to."""
    from pyspark.sql import functions as F
    from pyspark.storagelevel import StorageLevel

    which = F.array(
        *[F.when(topic_filter(v.tokens) & above(lo), F.lit(i)) for i, (v, lo) in enumerate(views)]
    )
    return (
        src.where(above(lowest([lo for _, lo in views])) & at_most(tops))
        .select(*provenance(), "payload", F.filter(which, lambda x: x.isNotNull()).alias("_views"))
        .where(F.size("_views") > 0)
        .select("*", payload_map().alias("_m"))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
