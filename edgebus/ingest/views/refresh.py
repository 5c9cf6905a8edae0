"""Typed views: one typed, partitioned table per topic family, refreshed from
the ingest table by ``edgebus ingest --views FILE`` (docs/spark.md, "Typed views").

A view's rows are the table rows whose topic matches its pattern: a JSON
object payload's keys are its columns (a scalar or array payload is the one
column ``value``), beside the row's provenance (views_config.PROVENANCE),
partitioned by (``peer_node``, ``date``).  A key the view has no column for
adds one, typed from the batch's values (views_types.infer); a value that
does not fit its column (views_types.fits, then the cast) sends its row to
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
from typing import TYPE_CHECKING, Any, NamedTuple

from edgebus.ingest import tablelog
from edgebus.ingest.compaction import newest_log_file
from edgebus.ingest.views import types as views_types
from edgebus.ingest.views.config import MAX_KEY, PROVENANCE, Config, View, load

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

Marks = dict[str, list[int]]  # gateway ("" for none) -> [segment, offset]
KeyTypes = tuple[dict[str, list[tuple[str, int]]], int]  # key_types: per key, rows

# The provenance columns' types, in PROVENANCE's order.
_PROVENANCE_DDL = (
    "peer_node STRING, peer_sid STRING, seq BIGINT, ts_device DOUBLE, ts_host DOUBLE, "
    "gateway STRING, topic STRING, late BOOLEAN, via ARRAY<STRING>, segment BIGINT, "
    "offset BIGINT, date DATE"
)
REJECTS_DDL = (
    "view STRING, reason STRING, `column` STRING, expected STRING, value STRING, "
    "payload STRING, " + _PROVENANCE_DDL
)


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
    tops = _tops(src, _lowest(view_marks + [rej_marks.get(v.name, {}) for v in cfg.views]))
    plans: list[_Plan] = []
    todo: list[tuple[View, list[list[str]], Marks, Marks]] = []
    errors = []
    parsed = None
    try:
        for v, state in zip(cfg.views, states):
            try:  # checked at every refresh, so that a changed file is said at once
                columns = _columns(v, state)
            except ValueError as e:
                errors.append(str(e))
                continue
            marks, rm = state.get("marks", {}), rej_marks.get(v.name, {})
            if not (_ahead(tops, marks) and _ahead(tops, rm)):
                todo.append((v, columns, marks, rm))
        if todo:
            parsed = _parsed(src, [(v, _lowest([m, rm])) for v, _, m, rm in todo], tops)
            counts = key_types(parsed, "_views")
            for i, (v, columns, marks, rm) in enumerate(todo):
                mine = parsed.where(F.array_contains("_views", i))
                plans.append(_plan(mine, v, columns, marks, rm, counts.get(i, ({}, 0))))
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
    plans: list[_Plan],
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
    new_rej = dict(rej_marks, **{p.view.name: _advanced(p.rej_marks, tops) for p in plans})
    before = set(tablelog.files(rej_path))
    tablelog.write_batch(union, rej_path, {"marks": new_rej}, ("view", "date"))
    for f in set(tablelog.files(rej_path)) - before:
        news[_partition(f, "view")][1] += _num_rows(f)
    for p in plans:
        state = {
            "topic": p.view.topic,
            "schema": p.view.schema,
            "columns": p.columns,
            "marks": _advanced(p.marks, tops),
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


class _Plan(NamedTuple):
    view: View
    columns: list[list[str]]  # [name, payload key, DDL type] of every column
    new: list[str]  # the names of the columns this batch adds
    marks: Marks
    rej_marks: Marks
    rows: DataFrame
    rejects: DataFrame
    n: int  # rows matched above the lower of the two marks

    def summary(self, n_rows: int, n_rejects: int) -> str:
        s = "%s +%d rows" % (self.view.name, n_rows)
        if self.new:
            s += " (%d new column%s: %s)" % (
                len(self.new),
                "" if len(self.new) == 1 else "s",
                ", ".join(self.new),
            )
        return s + ", %d reject%s" % (n_rejects, "" if n_rejects == 1 else "s")


def _parsed(src: DataFrame, views: list[tuple[View, Marks]], tops: Marks) -> DataFrame:
    """The rows of the table new to some view (each with its lower mark),
    parsed once for all (``_m``: payload_map) and persisted; ``_views`` holds
    the indexes (in views) of the views each row is new to."""
    from pyspark.sql import functions as F
    from pyspark.storagelevel import StorageLevel

    which = F.array(
        *[F.when(topic_filter(v.tokens) & _above(lo), F.lit(i)) for i, (v, lo) in enumerate(views)]
    )
    return (
        src.where(_above(_lowest([lo for _, lo in views])) & _at_most(tops))
        .select(*_provenance(), "payload", F.filter(which, lambda x: x.isNotNull()).alias("_views"))
        .where(F.size("_views") > 0)
        .select("*", payload_map().alias("_m"))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )


def _plan(
    parsed: DataFrame,
    view: View,
    columns: list[list[str]],
    marks: Marks,
    rej_marks: Marks,
    types: KeyTypes,
) -> _Plan:
    """What a refresh writes for one view, from its rows of _parsed and
    their key_types."""
    from pyspark.sql import functions as F

    counts, n = types
    new = []
    taken = {c[0].lower() for c in columns} | set(PROVENANCE)
    keys = {c[1] for c in columns}
    for key in sorted(set(counts) - keys):
        ddl = views_types.infer(counts[key])
        name = key if key.lower() not in taken else "payload_" + key
        if ddl is None or _no_column(key, name, taken) or len(columns) >= view.max_columns:
            continue  # all null so far, or no room or name for it: its rows say so in rejects
        columns.append([name, key, views_types.type_ddl(_parse_type(ddl))])
        taken.add(name.lower())
        new.append(name)
    m = F.col("_m")
    p = F.col("payload")
    fails = [
        F.when(p.isNull(), _why("payload is null", None, None, F.lit(None))),
        # The log holds JSON; were it not, a row of nulls would say nothing.
        F.when(m.isNull(), _why("payload is not JSON", None, None, F.lit(None))),
    ]
    typed = []
    for name, key, ddl in columns:
        v = m[key]
        dt = _parse_type(ddl)
        wrong = [
            t for t, _ in counts.get(key, []) if not views_types.fits(dt, views_types.parse(t))
        ]
        present = v.isNotNull() & ~F.is_variant_null(v)
        cast = F.try_variant_get(v, "$", ddl)
        bad = present & (F.schema_of_variant(v).isin(wrong) | cast.isNull())
        got = F.concat(F.lit("expected %s, got " % ddl), F.schema_of_variant(v))
        fails.append(F.when(bad, _why(got, name, ddl, F.to_json(v))))
        typed.append(cast.alias(name))
    # The keys no column takes, as one expression whatever their number: one
    # per key made Spark generate code beyond its driver's heap for a device
    # that sent 500 invented keys.
    known = [c[1] for c in columns]
    left = F.filter(
        F.map_keys(m), lambda k: ~k.isin(*known) & ~F.is_variant_null(F.element_at(m, k))
    )
    k = F.element_at(left, 1)
    full = len(columns) >= view.max_columns
    why = (
        F.when((k == "") | k.contains("`"), F.lit("an empty name or a backtick"))
        .when(F.length(k) > MAX_KEY, F.lit("a name longer than %d" % MAX_KEY))
        .otherwise(
            F.lit("the view has its max_columns, %d" % view.max_columns)
            if full
            else F.lit("its name is taken")
        )
    )
    kname = F.substring(k, 1, MAX_KEY)
    text = F.concat(F.lit("key '"), kname, F.lit("' has no column ("), why, F.lit(")"))
    fails.append(F.when(F.size(left) > 0, _why(text, kname, None, F.to_json(F.element_at(m, k)))))
    checked = parsed.withColumn("_bad", F.coalesce(*fails))
    rows = checked.where(F.col("_bad").isNull() & _above(marks)).select(
        *typed, *[c for c in PROVENANCE if c not in ("peer_node", "date")], "peer_node", "date"
    )
    rejects = checked.where(F.col("_bad").isNotNull() & _above(rej_marks)).select(
        F.lit(view.name).alias("view"), "_bad.*", "payload", *PROVENANCE
    )
    return _Plan(view, columns, new, marks, rej_marks, rows, rejects, n)


def _no_column(key: str, name: str, taken: set[str]) -> str | None:
    """Why the payload key cannot be a column named name, or None."""
    if not key or "`" in key:
        return "an empty name or a backtick"
    if len(key) > MAX_KEY:
        return "a name longer than %d" % MAX_KEY
    return "its name is taken" if name.lower() in taken else None


def _why(reason: Any, column: Any, expected: str | None, value: Column) -> Column:
    from pyspark.sql import functions as F

    return F.struct(
        (F.lit(reason) if isinstance(reason, str) else reason).alias("reason"),
        F.lit(column).cast("string").alias("column"),
        F.lit(expected).cast("string").alias("expected"),
        value.cast("string").alias("value"),
    )


def _columns(view: View, state: dict[str, Any]) -> list[list[str]]:
    """The view's columns: its state's, with the declared ones it lacks; a
    declared column whose type differs from the table's is an error."""
    columns: list[list[str]] = [list(c) for c in state.get("columns", [])]
    if state and state.get("topic") != view.topic:
        raise ValueError(
            "view %s: its table holds topic %s, the file says %s (remove the "
            "view's directory to rebuild it)" % (view.name, state["topic"], view.topic)
        )
    have = {c[0].lower(): c for c in columns}
    for f in _declared(view).fields:
        ddl = views_types.type_ddl(f.dataType)
        c = have.get(f.name.lower())
        if c is None:
            columns.append([f.name, f.name, ddl])
        elif _parse_type(c[2]) != f.dataType:
            raise ValueError(
                "view %s: column %s is %s in its table, the file says %s (a column keeps its "
                "type: remove the view's directory to rebuild it)" % (view.name, f.name, c[2], ddl)
            )
    return columns


def _declared(view: View) -> StructType:
    from pyspark.sql.types import StructType

    if not view.schema.strip():
        return StructType([])
    try:
        t = _parse_type(view.schema)
    except Exception as e:  # Spark's parse error: its first line says where
        raise ValueError(
            "view %s: bad schema %r: %s" % (view.name, view.schema, str(e).strip().splitlines()[0])
        ) from None
    if not isinstance(t, StructType):
        raise ValueError('view %s: schema must name its columns ("temp DOUBLE")' % view.name)
    return t


def _parse_type(ddl: str) -> Any:
    from pyspark.sql.types import DataType

    return DataType.fromDDL(ddl)  # public since Spark 4.0 (the spark extra's floor)


def payload_map() -> Column:
    """The payload as map<string, variant>: an object's members, or
    {"value": the payload} for any other JSON value; null for a null payload."""
    from pyspark.sql import functions as F

    p = F.col("payload")
    j = F.try_parse_json(p)
    return F.when(p.startswith("{"), F.from_json(p, "map<string,variant>")).when(
        j.isNotNull(), F.create_map(F.lit("value"), j)
    )


def key_types(parsed: DataFrame, by: str | None = None) -> dict[Any, KeyTypes]:
    """Per value of the column ``by`` (an array: each of its values; None:
    one group, None), ({payload key: [(schema_of_variant text, rows), ...]},
    rows) over parsed's ``_m``, in one pass."""
    from pyspark.sql import functions as F

    entries = F.map_entries(F.coalesce("_m", F.create_map().cast("map<string,variant>")))
    # Each row adds one entry of key null, to count the rows in the same pass.
    row = F.struct(
        F.lit(None).cast("string").alias("key"), F.lit(None).cast("variant").alias("value")
    )
    group = F.explode(by) if by else F.lit(None)
    kv = parsed.select(group.alias("_g"), "_m").select(
        "_g", F.explode(F.concat(entries, F.array(row))).alias("e")
    )
    out: dict[Any, KeyTypes] = {}
    agg = kv.groupBy("_g", "e.key", F.schema_of_variant("e.value").alias("t")).count()
    for r in agg.collect():
        counts, n = out.setdefault(r["_g"], ({}, 0))
        if r["key"] is None:
            out[r["_g"]] = (counts, r["count"])
        else:
            counts.setdefault(r["key"], []).append((r["t"], r["count"]))
    return out


def topic_filter(tokens: tuple[str, ...]) -> Column:
    """The rows whose topic_tokens match a pattern's tokens (+ one token,
    # the rest, none included)."""
    from pyspark.sql import functions as F

    # try_element_at: Spark may test a token before the size (ANSI mode fails
    # element_at out of bounds).
    toks = F.col("topic_tokens")
    rest = tokens[-1:] == ("#",)
    fixed = tokens[:-1] if rest else tokens
    cond = F.size(toks) >= len(fixed) if rest else F.size(toks) == len(fixed)
    for i, t in enumerate(fixed):
        if t != "+":
            cond = cond & (F.try_element_at(toks, F.lit(i + 1)) == t)
    return cond


def _provenance() -> list[Column]:
    from pyspark.sql import functions as F

    via = F.from_json(F.get_json_object("extra", "$.via"), "array<string>").alias("via")
    return [via if c == "via" else F.col(c) for c in PROVENANCE]


def _gateway(g: str) -> Column:
    from pyspark.sql import functions as F

    return F.col("gateway").isNull() if g == "" else F.col("gateway") == g


def _above(marks: Marks) -> Column:
    """Rows past marks (a gateway without a mark: all its rows)."""
    from pyspark.sql import functions as F

    expr = None
    for g, (s, o) in marks.items():
        past = (F.col("segment") > s) | ((F.col("segment") == s) & (F.col("offset") > o))
        expr = F.when(_gateway(g), past) if expr is None else expr.when(_gateway(g), past)
    return F.lit(True) if expr is None else expr.otherwise(F.lit(True))


def _at_most(tops: Marks) -> Column:
    """Rows up to tops (a gateway without one: none)."""
    from pyspark.sql import functions as F

    expr = None
    for g, (s, o) in tops.items():
        upto = (F.col("segment") < s) | ((F.col("segment") == s) & (F.col("offset") <= o))
        expr = F.when(_gateway(g), upto) if expr is None else expr.when(_gateway(g), upto)
    return F.lit(False) if expr is None else expr.otherwise(F.lit(False))


def _lowest(all_marks: list[Marks]) -> Marks:
    """Per gateway, the lowest of the marks (a gateway some lack: no mark)."""
    if not all_marks:
        return {}
    common = set.intersection(*[set(m) for m in all_marks])
    return {g: min(m[g] for m in all_marks) for g in common}


def _ahead(tops: Marks, marks: Marks) -> bool:
    return all(g in marks and marks[g] >= t for g, t in tops.items())


def _advanced(marks: Marks, tops: Marks) -> Marks:
    out = dict(marks)
    for g, t in tops.items():
        if g not in out or out[g] < t:
            out[g] = t
    return out


def _tops(src: DataFrame, floor: Marks) -> Marks:
    """Per gateway, the newest log position of the table's rows (above floor)."""
    from pyspark.sql import functions as F

    top = (
        src.where(_above(floor))
        .groupBy("gateway")
        .agg(F.max(F.struct("segment", "offset")).alias("top"))
    )
    return {r["gateway"] or "": [r["top"]["segment"], r["top"]["offset"]] for r in top.collect()}


def view_schema(spark: SparkSession, path: str) -> StructType:
    """The view at path's whole schema (its typed columns as of its last
    refresh, then the provenance columns), to read it with."""
    from pyspark.sql.types import StructType

    cols = tablelog.committed(path)[1].get("columns", [])
    typed = ", ".join("%s %s" % (views_types.quote(n), t) for n, _, t in cols)
    prov = _parse_type(_PROVENANCE_DDL)
    fields = [] if not typed else list(_parse_type(typed).fields)
    ordered = [f for f in prov.fields if f.name not in ("peer_node", "date")]
    return StructType(fields + ordered + [prov["peer_node"], prov["date"]])


def read_view(spark: SparkSession, path: str) -> DataFrame:
    """A view as a DataFrame with all its columns (a row written before a
    column appeared has null there); only committed files are read."""
    return spark.read.schema(view_schema(spark, path)).parquet(os.path.abspath(path))
