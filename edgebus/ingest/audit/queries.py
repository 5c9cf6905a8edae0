"""The delivery audit's queries over the ingest table (edgebus.ingest.audit.rows
assembles their results): what is new since the audit's marks, and per
device boot its windows, gaps, ``bridge/gaps`` records and journal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import Window
from pyspark.sql import functions as F

from edgebus.ingest.audit.gaps import START_GRACE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

BOOT = ["peer_node", "peer_sid"]
GAPS_TOPIC = "bridge/gaps"
_GAP_RECORD = "node STRING, sid STRING, first BIGINT, last BIGINT, why STRING"


def gw() -> Column:
    """The gateway as the audit's marks key it ("" for a log that names none)."""
    return F.coalesce(F.col("gateway"), F.lit(""))


def _keyed() -> Column:
    return F.col("peer_node").isNotNull() & F.col("peer_sid").isNotNull() & F.col("seq").isNotNull()


def _gap_record() -> Column:
    return F.from_json(F.col("payload"), _GAP_RECORD)


def _is_gap_record() -> Column:
    return F.col("peer_node").isNull() & (F.col("topic") == GAPS_TOPIC)


def news(df: DataFrame, marks: dict[str, list[int]]) -> list[Any]:
    """Rows (gw, peer_node, peer_sid, pos: (segment, offset)) of what the
    table holds past marks: per gateway and boot touched (a device row, or a
    gap record naming the boot) the highest position; None boot for the rest."""
    # Plain comparisons on the columns, so that Parquet's row-group statistics
    # skip the files of earlier micro-batches.
    named = [g for g in marks if g]
    after = ~F.col("gateway").isin(named) if named else F.col("gateway").isNotNull()
    if "" not in marks:
        after = after | F.col("gateway").isNull()
    for g, (s, o) in marks.items():
        past = (F.col("segment") > s) | ((F.col("segment") == s) & (F.col("offset") > o))
        after = after | ((F.col("gateway").isNull() if g == "" else F.col("gateway") == g) & past)
    rec = _gap_record()
    node = (
        F.when(_keyed(), F.col("peer_node"))
        .when(_is_gap_record(), rec["node"])
        .otherwise(F.lit(None))
    )
    sid = F.when(_keyed(), F.col("peer_sid")).when(_is_gap_record(), rec["sid"])
    return (
        df.where(after)
        .select(
            gw().alias("gw"),
            node.alias("peer_node"),
            sid.alias("peer_sid"),
            F.struct("segment", "offset").alias("pos"),
        )
        .groupBy("gw", "peer_node", "peer_sid")
        .agg(F.max("pos").alias("pos"))
        .collect()
    )


def first_copies(df: DataFrame, boots: DataFrame | None = None) -> DataFrame:
    """One row per (boot, seq) of df (of the boots, a DataFrame of peer_node,
    peer_sid, when given): its first arrival (ts_host t), the device's time
    (td) and late flag of that copy (false at the boot's start: START_GRACE),
    and the gateways of every copy (the logging bridge and a relayed
    reading's extra.via)."""
    via = F.from_json(F.col("extra"), "via ARRAY<STRING>")["via"]
    gws = F.concat(F.array(F.col("gateway")), F.coalesce(via, F.array().cast("array<string>")))
    rows = df.where(_keyed())
    if boots is not None:
        rows = rows.join(F.broadcast(boots), BOOT)
    per = rows.groupBy(*BOOT, "seq").agg(
        F.min("ts_host").alias("t"),
        F.min_by("ts_device", "ts_host").alias("td"),
        F.min_by("late", "ts_host").alias("late"),
        F.max("generation").alias("generation"),
        F.flatten(F.collect_list(gws)).alias("gws"),
    )
    # Late: delivered out of the spool, but not what the boot took before its
    # first session, when that came up promptly (gaps.START_GRACE). Before it:
    # taken before the boot's first reading in session and before its first
    # number arrived; the second bound keeps an outage that begins before the
    # first reading in session (the session's first frames all spooled ones)
    # late.
    boot = Window.partitionBy(*BOOT)
    t0 = F.min("t").over(boot)
    first_on_time = F.min(F.when(~F.col("late"), F.col("td"))).over(boot)
    before = F.coalesce(F.col("td") < first_on_time, F.lit(True)) & (F.col("td") < t0)
    start = before & (t0 - F.min("td").over(boot) <= START_GRACE)
    return per.withColumn("late", F.col("late") & ~F.coalesce(start, F.lit(False)))


def windows(df: DataFrame, boots: DataFrame, window: float) -> tuple[list[Any], list[Any]]:
    """For the boots (a DataFrame of peer_node, peer_sid): their windows'
    figures, and their gaps between received numbers as (peer_node,
    peer_sid, first, last, w: the window of the number after)."""
    prev = F.lag("seq").over(Window.partitionBy(*BOOT).orderBy("seq"))
    per = first_copies(df, boots).select(
        "*",
        (F.floor(F.col("t") / window) * window).cast("long").alias("w"),
        (F.col("t") - F.col("td")).alias("lat"),
        prev.alias("prev"),
    )
    # A run of missing numbers counts in the window of the number after it:
    # the row whose predecessor is more than one below it.
    gap = F.when(
        F.try_subtract(F.col("seq"), F.col("prev")) > 1,
        F.struct((F.col("prev") + 1).alias("first"), (F.col("seq") - 1).alias("last")),
    )
    late_lat = F.when(F.col("late"), F.col("lat"))
    q = F.array(F.lit(0.5), F.lit(0.99))
    rows = (
        per.groupBy(*BOOT, "w")
        .agg(
            F.count(F.lit(1)).alias("received"),
            F.count(late_lat).alias("late"),
            F.min("seq").alias("first_seq"),
            F.max("seq").alias("last_seq"),
            F.min("t").alias("first_t"),
            F.max("t").alias("last_t"),
            F.max("generation").alias("generation"),
            F.percentile(F.col("lat"), q).alias("lat_q"),
            F.max("lat").alias("lat_max"),
            F.percentile(late_lat, q).alias("late_q"),
            F.max(late_lat).alias("late_max"),
            F.array_sort(
                F.array_distinct(
                    F.filter(F.flatten(F.collect_list("gws")), lambda x: x.isNotNull())
                )
            ).alias("gateways"),
            F.collect_list(gap).alias("gaps"),  # (nulls are left out)
        )
        .collect()
    )
    gaps = [
        {"peer_node": r["peer_node"], "peer_sid": r["peer_sid"], "w": r["w"], **g.asDict()}
        for r in rows
        for g in r["gaps"]
    ]
    return rows, gaps


def gap_records(df: DataFrame, boots: DataFrame, window: float) -> list[Any]:
    """The bridge/gaps records naming the boots: (peer_node, peer_sid, first,
    last, why, w: the record's window)."""
    rec = _gap_record()
    return (
        df.where(_is_gap_record())
        .select(
            rec["node"].alias("peer_node"),
            rec["sid"].alias("peer_sid"),
            rec["first"].alias("first"),
            rec["last"].alias("last"),
            F.coalesce(rec["why"], F.lit("unexplained")).alias("why"),
            (F.floor(F.col("ts_host") / window) * window).cast("long").alias("w"),
        )
        .join(F.broadcast(boots), BOOT)
        .where(F.col("first").isNotNull() & F.col("last").isNotNull())
        .collect()
    )


def journals(df: DataFrame, boots: DataFrame) -> set[tuple[str, str]]:
    """The boots whose sys/health says the device sleeps: a duty-cycled device
    needs the flash journal (firmware/config.py), so its unacknowledged
    readings outlive a reboot.  Nothing else in the table says whether a
    device has a journal."""
    toks = F.col("topic_tokens")
    health = (
        (F.element_at(toks, -2) == "sys")
        & (F.element_at(toks, -1) == "health")
        & F.col("peer_node").isNotNull()
    )
    sleeps = F.get_json_object(F.col("payload"), "$.sleep").isNotNull()
    found = (
        df.where(health & sleeps).join(F.broadcast(boots), BOOT).select(*BOOT).distinct().collect()
    )
    return {(r["peer_node"], r["peer_sid"]) for r in found}


def with_boot_end(audit: DataFrame) -> DataFrame:
    """audit with boot_end set: null while the boot is its device's newest;
    once a later boot of the node started, "journal" if the boot's device
    keeps a flash journal, else "no_journal_known"."""
    start = F.min("first_time").over(Window.partitionBy(*BOOT))
    a = audit.withColumn("_start", start)
    newest = F.max("_start").over(Window.partitionBy("peer_node"))
    end = (
        F.when(F.col("_start") >= newest, F.lit(None).cast("string"))
        .when(F.col("journal"), F.lit("journal"))
        .otherwise(F.lit("no_journal_known"))
    )
    return a.withColumn("boot_end", end).drop("_start")
