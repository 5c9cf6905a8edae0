"""`edgebus report` without Spark: the report's figures computed with pyarrow,
in this process (no JVM), from the files the tables' metadata logs list.

Both tables are file sink tables (``DIR/_spark_metadata``): the ingest table,
written by Spark's file sink, and the delivery audit, written in batches by
edgebus.ingest.tablelog.  Only the files a log lists are committed; a file a
killed job left in the folder is not read (:func:`listed_files`).  The
results are the Spark path's data structures (summary.summarize,
audit.summarize_audit, plot's data), so one set of functions renders either
(summary.format_report, audit.format_audit, plot.draw).
"""

from __future__ import annotations

import datetime
import math
import os
from typing import TYPE_CHECKING, Any

from edgebus.ingest.compaction import META, local_path, newest_log_file, read_log_file
from edgebus.ingest.report.summary import HOST_CLIENT, by_name, device_row, session_row

if TYPE_CHECKING:
    import pyarrow as pa

BOOT = ["peer_node", "peer_sid"]
# The ingest table's columns the report reads, and their types (the table's
# schema: edgebus.ingest.job TABLE_SCHEMA).
_COLUMNS = {
    "peer_node": "string",
    "peer_sid": "string",
    "generation": "int64",
    "seq": "int64",
    "ts_host": "float64",
    "ts_device": "float64",
    "late": "bool",
    "origin_kind": "string",
}


def listed_files(table: str) -> list[str]:
    """Local paths of the files the table's metadata log lists: those of its
    newest compaction file (``N.compact``, the whole listing) and of the batch
    files after it, in that order, less the ones they delete; [] without a log."""
    newest = newest_log_file(table)
    if newest is None:
        return []
    meta = os.path.join(table, META)
    heads = [n[: -len(".compact")] for n in os.listdir(meta) if n.endswith(".compact")]
    compacts = [int(h) for h in heads if h.isdigit()]  # not a hidden temporary
    start = max((c for c in compacts if c <= newest[0]), default=-1)
    found: dict[str, None] = {}
    for batch in range(max(start, 0), newest[0] + 1):
        name = "%d.compact" % batch if batch == start else str(batch)
        for e in read_log_file(os.path.join(meta, name)):
            if e.get("isDir"):
                continue
            if e.get("action", "add") == "add":
                found[local_path(e["path"])] = None
            else:
                found.pop(local_path(e["path"]), None)
    return list(found)


def read_files(table: str, columns: list[str]) -> pa.Table | None:
    """columns of the rows of the table's committed files (listed_files), the
    partition columns from their directories (strings; null where Spark wrote
    its default partition); None when the log lists no file.  Each file is
    read on its own, not as a pyarrow dataset, whose import takes pandas'
    (about a second)."""
    import urllib.parse

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = os.path.abspath(table)
    parts = []
    for f in listed_files(table):
        pf = pq.ParquetFile(f)
        have = set(pf.schema_arrow.names)
        t = pf.read(columns=[c for c in columns if c in have])
        keys = {}
        for d in os.path.relpath(os.path.dirname(f), table).split(os.sep):
            k, eq, v = d.partition("=")
            if eq:
                keys[k] = None if v == "__HIVE_DEFAULT_PARTITION__" else urllib.parse.unquote(v)
        cols = {
            c: t[c] if c in have else pa.array([keys.get(c)] * t.num_rows, pa.string())
            for c in columns
        }
        parts.append(pa.table(cols))
    return pa.concat_tables(parts, promote_options="permissive") if parts else None


def read_table(table: str, columns: list[str]) -> pa.Table:
    """columns of the ingest table's committed rows (no rows without a log)."""
    import pyarrow as pa

    schema = pa.schema([(c, _COLUMNS[c]) for c in columns])
    t = read_files(table, columns)
    return schema.empty_table() if t is None else t.cast(schema)


def summarize(table: str) -> dict[str, Any]:
    """summary.summarize's dict, from the committed files."""
    import pyarrow.compute as pc

    from edgebus.ingest.corruption import corrupt_report

    t = read_table(table, ["peer_node", "peer_sid", "generation", "seq", "ts_host", "origin_kind"])
    return {
        "rows": t.num_rows,
        "first": pc.min(t["ts_host"]).as_py(),
        "last": pc.max(t["ts_host"]).as_py(),
        "host_clients": pc.sum(pc.equal(t["origin_kind"], HOST_CLIENT)).as_py() or 0,
        "devices": _devices(t),
        "sessions": _sessions(t),
        "corrupt": corrupt_report(os.path.join(os.path.abspath(table), "_corrupt")),
    }


def _count_all() -> Any:
    import pyarrow.compute as pc

    return pc.CountOptions(mode="all")


def _devices(t: pa.Table) -> list[dict[str, Any]]:
    import pyarrow.compute as pc

    g = t.group_by("peer_node").aggregate(
        [
            ("ts_host", "count", _count_all()),
            ("peer_sid", "count_distinct", pc.CountOptions(mode="only_valid")),
            ("generation", "distinct"),
            ("ts_host", "min"),
            ("ts_host", "max"),
        ]
    )
    return by_name(
        device_row(
            r["peer_node"],
            r["ts_host_count"],
            r["peer_sid_count_distinct"],
            r["generation_distinct"] or (),
            r["ts_host_min"],
            r["ts_host_max"],
        )
        for r in g.to_pylist()
    )


def _valid(t: pa.Table, cols: list[str]) -> pa.Table:
    """t's rows where none of cols is null."""
    import pyarrow.compute as pc

    mask = pc.is_valid(t[cols[0]])
    for c in cols[1:]:
        mask = pc.and_(mask, pc.is_valid(t[c]))
    return t.filter(mask)


def _sorted(t: pa.Table, cols: list[str]) -> pa.Table:
    return t.sort_by([(c, "ascending") for c in cols])


def _same(t: pa.Table, cols: list[str]) -> tuple[pa.Table, pa.Table, Any]:
    """For sorted t: each row but the last (a), the row after it (b), and
    whether the two have the same cols (none null)."""
    import pyarrow.compute as pc

    n = t.num_rows
    a, b = t.slice(0, max(n - 1, 0)), t.slice(1)
    same = pc.equal(a[cols[0]], b[cols[0]])
    for c in cols[1:]:
        same = pc.and_(same, pc.equal(a[c], b[c]))
    return a, b, same


def _sessions(t: pa.Table) -> list[dict[str, Any]]:
    import pyarrow.compute as pc

    dev = _valid(t, BOOT)
    g = dev.group_by(BOOT).aggregate(
        [
            ("ts_host", "count", _count_all()),
            ("seq", "count"),
            ("generation", "distinct"),
            ("seq", "min"),
            ("seq", "max"),
        ]
    )
    sess = {
        (r["peer_node"], r["peer_sid"]): session_row(
            r["peer_node"],
            r["peer_sid"],
            r["generation_distinct"] or (),
            r["ts_host_count"],
            r["seq_count"],
            r["seq_min"],
            r["seq_max"],
        )
        for r in g.to_pylist()
    }
    # Each run of numbers missing between two received ones.
    seqs = _valid(dev, ["seq"]).group_by([*BOOT, "seq"]).aggregate([])
    a, b, same = _same(_sorted(seqs, [*BOOT, "seq"]), BOOT)
    gap = pc.and_(same, pc.greater(pc.subtract(b["seq"], a["seq"]), 1))
    for node, sid, first, nxt in zip(
        *(x.filter(gap).to_pylist() for x in (a["peer_node"], a["peer_sid"], a["seq"], b["seq"]))
    ):
        s = sess[(node, sid)]
        s["gaps"].append((first + 1, nxt - 1))
        s["missing"] += nxt - first - 1
    return [sess[k] for k in sorted(sess)]


def first_copies(t: pa.Table) -> pa.Table:
    """audit.queries.first_copies without the gateways: one row per (boot,
    seq), its first arrival (t), that copy's device time (td) and late flag."""
    import pyarrow as pa
    import pyarrow.compute as pc

    s = _sorted(_valid(t, [*BOOT, "seq"]), [*BOOT, "seq", "ts_host"])
    _, _, same = _same(s, [*BOOT, "seq"])
    if s.num_rows:
        s = s.filter(pa.chunked_array([[True], *pc.invert(same).chunks], pa.bool_()))
    per = pa.table(
        {
            "peer_node": s["peer_node"],
            "peer_sid": s["peer_sid"],
            "seq": s["seq"],
            "t": s["ts_host"],
            "td": s["ts_device"],
            "late": s["late"],
        }
    )
    return _start_on_time(per)


def _start_on_time(per: pa.Table) -> pa.Table:
    """per with late false for what a boot took while its first session came
    up (audit.gaps.START_GRACE), as queries.first_copies has it."""
    import pyarrow.compute as pc

    from edgebus.ingest.audit.gaps import START_GRACE

    if not per.num_rows:
        return per
    t0 = per.group_by(BOOT).aggregate([("t", "min"), ("td", "min")])
    # the device's time of each boot's first reading taken in session; before
    # the session: taken before it and before the boot's first number arrived
    on = per.filter(pc.invert(pc.fill_null(per["late"], False)))
    first = on.group_by(BOOT).aggregate([("td", "min")]).rename_columns([*BOOT, "td_on"])
    per = per.join(t0, BOOT, join_type="inner").join(first, BOOT, join_type="left outer")
    per = _sorted(per, [*BOOT, "seq"])
    before = pc.and_kleene(
        pc.fill_null(pc.less(per["td"], per["td_on"]), True), pc.less(per["td"], per["t_min"])
    )
    start = pc.and_kleene(
        before, pc.less_equal(pc.subtract(per["t_min"], per["td_min"]), START_GRACE)
    )
    late = pc.and_(per["late"], pc.invert(pc.fill_null(start, False)))
    return per.drop_columns(["t_min", "td_min", "td_on", "late"]).append_column("late", late)


def _percentiles(v: Any) -> list[float | None]:
    """p50 and p99 of sorted values v as Spark's percentile computes them
    (linear between the two nearest, the same formula to the last bit)."""
    out: list[float | None] = []
    for p in (0.5, 0.99):
        pos = (len(v) - 1) * p
        lo, hi = math.floor(pos), math.ceil(pos)
        x, y = float(v[lo]), float(v[hi])
        out.append(x if lo == hi or x == y else (hi - pos) * x + (pos - lo) * y)
    return out


def late_latency(firsts: pa.Table) -> dict[Any, list[float | None]]:
    """audit.late_latency's dict from first_copies(): the late readings'
    latency p50 and p99 per boot, and over all under None."""
    import pyarrow.compute as pc

    late = firsts.filter(pc.fill_null(firsts["late"], False))
    late = late.append_column("lat", pc.subtract(late["t"], late["td"]))
    late = _sorted(_valid(late, ["lat"]), [*BOOT, "lat"])
    if not late.num_rows:
        return {}
    _, _, same = _same(late, BOOT)
    import numpy as np

    ends = [int(i) + 1 for i in np.flatnonzero(~same.to_numpy())] + [late.num_rows]
    lat = late["lat"].to_numpy()
    out: dict[Any, list[float | None]] = {None: _percentiles(np.sort(lat))}
    start = 0
    for end in ends:
        row = late.slice(start, 1).to_pylist()[0]
        out[(row["peer_node"], row["peer_sid"])] = _percentiles(lat[start:end])
        start = end
    return out


def _spark_time(micros: int | None) -> datetime.datetime | None:
    """A timestamp as pyspark's collect() gives it: naive, local time."""
    if micros is None:
        return None
    return datetime.datetime.fromtimestamp(micros // 1000000).replace(microsecond=micros % 1000000)


def summarize_audit(table: str, audit: str) -> dict[str, Any] | None:
    """audit.summarize_audit's dict (None without an audit table), from the
    audit's committed files and the ingest table's."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from edgebus.ingest.report.audit import audit_totals

    if not os.path.isdir(os.path.join(audit, META)):
        return None
    lat = late_latency(
        first_copies(read_table(table, [*BOOT, "seq", "ts_host", "ts_device", "late"]))
    )
    cols = [*BOOT, "received", "late", "missing", "duplicates", "boot_end"]
    a = read_files(audit, cols + ["first_time", "last_time", "missing_why", "gateways"])
    if a is None:
        return audit_totals([], lat)
    for c in ("first_time", "last_time"):  # as microseconds, which Spark keeps
        a = a.set_column(
            a.schema.get_field_index(c), c, pc.cast(pc.cast(a[c], pa.timestamp("us")), pa.int64())
        )
    g = a.group_by(BOOT).aggregate(
        [(c, "sum") for c in ("received", "late", "missing", "duplicates")]
        + [("boot_end", "max"), ("first_time", "min"), ("last_time", "max")]
    )
    whys: dict[tuple[str, str], dict[str, int]] = {}
    gws: dict[tuple[str, str], set[str]] = {}
    for r in a.select([*BOOT, "missing_why", "gateways"]).to_pylist():
        key = (r["peer_node"], r["peer_sid"])
        gws.setdefault(key, set()).update(x for x in r["gateways"] or [] if x is not None)
        for why, n in r["missing_why"] or []:
            if n is not None:
                whys.setdefault(key, {})[why] = whys.get(key, {}).get(why, 0) + n
    boots = []
    for r in g.to_pylist():
        key = (r["peer_node"], r["peer_sid"])
        q = lat.get(key) or [None, None]
        boots.append(
            {
                "peer_node": r["peer_node"],
                "peer_sid": r["peer_sid"],
                **{c: r[c + "_sum"] for c in ("received", "late", "missing", "duplicates")},
                "boot_end": r["boot_end_max"],
                "first_time": _spark_time(r["first_time_min"]),
                "last_time": _spark_time(r["last_time_max"]),
                "gateways": sorted(gws.get(key, ())),
                "missing_why": whys.get(key, {}),
                "late_p50": q[0],
                "late_p99": q[1],
            }
        )
    # Spark's orderBy("peer_node", "first_time"): nulls first.
    boots.sort(key=lambda b: tuple((b[c] is not None, b[c]) for c in ("peer_node", "first_time")))
    return audit_totals(boots, lat)


def plot_data(table: str) -> dict[str, Any] | None:
    """plot's data for plot.draw (None without numbered device readings): the
    bin width, the boots drawn, their bins, their gaps, the latency points."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from edgebus.ingest.report.plot import MAX_BOOTS, MAX_POINTS, bin_seconds

    per = first_copies(read_table(table, [*BOOT, "seq", "ts_host", "ts_device", "late"]))
    if not per.num_rows:
        return None
    # When the reading was taken: the device's clock, else its arrival.
    per = per.append_column("x", pc.coalesce(per["td"], per["t"]))
    lo, hi = pc.min(per["x"]).as_py(), pc.max(per["x"]).as_py()
    width = bin_seconds(max(hi - lo, 1.0))
    boots = [
        {
            "peer_node": r["peer_node"],
            "peer_sid": r["peer_sid"],
            "n": r["x_count"],
            "start": r["x_min"],
        }
        for r in per.group_by(BOOT).aggregate([("x", "count"), ("x", "min")]).to_pylist()
    ]
    boots = sorted(boots, key=lambda b: -b["n"])[:MAX_BOOTS]
    keep = pa.table({c: pa.array([b[c] for b in boots], pa.string()) for c in BOOT})
    sel = _sorted(per.join(keep, BOOT, join_type="inner"), [*BOOT, "seq"])
    sel = sel.append_column("bin", pc.cast(pc.floor(pc.divide(sel["x"], width)), pa.int64()))
    sel = sel.append_column("late_n", pc.cast(sel["late"], pa.int64()))
    bins = [
        {**{c: r[c] for c in (*BOOT, "bin")}, "n": r["x_count"], "late": r["late_n_sum"]}
        for r in sel.group_by([*BOOT, "bin"])
        .aggregate([("x", "count"), ("late_n", "sum")])
        .to_pylist()
    ]
    a, b, same = _same(sel, BOOT)
    gap = pc.and_(same, pc.greater(pc.subtract(b["seq"], a["seq"]), 1))
    a, b = a.filter(gap), b.filter(gap)
    gaps = pa.table(
        {
            "peer_node": a["peer_node"],
            "peer_sid": a["peer_sid"],
            "seq": a["seq"],
            "x": a["x"],
            "next": b["seq"],
            "next_x": b["x"],
        }
    ).to_pylist()
    pts = _valid(sel, ["td"])
    frac = min(1.0, MAX_POINTS / per.num_rows)
    if frac < 1.0:
        pts = pts.filter(pa.array(np.random.default_rng(1).random(pts.num_rows) < frac))
    points = pa.table(
        {"x": pts["x"], "lat": pc.subtract(pts["t"], pts["td"]), "late": pts["late"]}
    ).to_pylist()
    return {"width": width, "boots": boots, "bins": bins, "gaps": gaps, "points": points}
