"""The ingest table's rows as the views read them: the rows of a topic pattern,
the payload parsed to a map, the types its keys had, and the provenance
columns a view keeps beside them.  `edgebus views infer` reads them too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgebus.ingest.views.config import PROVENANCE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

KeyTypes = tuple[dict[str, list[tuple[str, int]]], int]  # key_types: per key, rows


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


def provenance() -> list[Column]:
    """The PROVENANCE columns of a table row (``via`` out of its ``extra``)."""
    from pyspark.sql import functions as F

    via = F.from_json(F.get_json_object("extra", "$.via"), "array<string>").alias("via")
    return [via if c == "via" else F.col(c) for c in PROVENANCE]
