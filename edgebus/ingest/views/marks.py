"""A view's marks: per gateway, the log position (segment, offset) up to which
a table has taken the ingest table's rows, and the row filters they make."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

Marks = dict[str, list[int]]  # gateway ("" for none) -> [segment, offset]


def _gateway(g: str) -> Column:
    from pyspark.sql import functions as F

    return F.col("gateway").isNull() if g == "" else F.col("gateway") == g


def above(marks: Marks) -> Column:
    """Rows past marks (a gateway without a mark: all its rows)."""
    from pyspark.sql import functions as F

    expr = None
    for g, (s, o) in marks.items():
        past = (F.col("segment") > s) | ((F.col("segment") == s) & (F.col("offset") > o))
        expr = F.when(_gateway(g), past) if expr is None else expr.when(_gateway(g), past)
    return F.lit(True) if expr is None else expr.otherwise(F.lit(True))


def at_most(tops: Marks) -> Column:
    """Rows up to tops (a gateway without one: none)."""
    from pyspark.sql import functions as F

    expr = None
    for g, (s, o) in tops.items():
        upto = (F.col("segment") < s) | ((F.col("segment") == s) & (F.col("offset") <= o))
        expr = F.when(_gateway(g), upto) if expr is None else expr.when(_gateway(g), upto)
    return F.lit(False) if expr is None else expr.otherwise(F.lit(False))


def lowest(all_marks: list[Marks]) -> Marks:
    """Per gateway, the lowest of the marks (a gateway some lack: no mark)."""
    if not all_marks:
        return {}
    common = set.intersection(*[set(m) for m in all_marks])
    return {g: min(m[g] for m in all_marks) for g in common}


def ahead(tops: Marks, marks: Marks) -> bool:
    """Whether marks are at or past tops for every gateway of tops."""
    return all(g in marks and marks[g] >= t for g, t in tops.items())


def advanced(marks: Marks, tops: Marks) -> Marks:
    """marks moved up to tops where they are behind (or have none)."""
    out = dict(marks)
    for g, t in tops.items():
        if g not in out or out[g] < t:
            out[g] = t
    return out


def newest(src: DataFrame, floor: Marks) -> Marks:
    """Per gateway, the newest log position of the table's rows (above floor)."""
    from pyspark.sql import functions as F

    top = (
        src.where(above(floor))
        .groupBy("gateway")
        .agg(F.max(F.struct("segment", "offset")).alias("top"))
    )
    return {r["gateway"] or "": [r["top"]["segment"], r["top"]["offset"]] for r in top.collect()}
