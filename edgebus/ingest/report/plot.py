"""`edgebus report --plot`: a PNG of each device boot's deliveries over the
time the readings were taken (the device's clock, ts_device): a timeline row
per boot coloured on time / late / missing, so an outage shows as a late (or
missing) stretch; below it every reading's latency (ts_host - ts_device).
"""

from __future__ import annotations

import datetime
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MAX_BOOTS = 24  # rows of the timeline; the boots with the most readings
MAX_POINTS = 20000  # latency points drawn (a sample beyond)
BINS = 60  # about this many bins across the timeline
FILL = 4  # empty bins between two of a boot drawn over (beyond: a silence)
_NICE: tuple[float, ...] = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900)
_NICE += (1800, 3600, 7200, 10800, 21600, 43200, 86400, 7 * 86400)
COLOURS = {"on time": "#2ca02c", "late": "#ff7f0e", "missing": "#d62728"}


def bin_seconds(span: float, bins: int = BINS) -> float:
    """A round bin width giving about bins bins over span seconds."""
    want = span / bins
    return next((b for b in _NICE if b >= want), _NICE[-1])


def plot_data(spark: SparkSession, table: str) -> dict[str, Any] | None:
    """The table's rows for draw(), read with Spark; None without numbered
    device readings."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from edgebus.ingest.audit.queries import first_copies
    from edgebus.ingest.report.tables import read_table

    per = first_copies(read_table(spark, table))
    # When the reading was taken: the device's clock, else its arrival.
    per = per.withColumn("x", F.coalesce("td", "t")).cache()
    span = per.agg(F.min("x").alias("lo"), F.max("x").alias("hi"), F.count("x").alias("n")).first()
    if span is None or not span["n"]:
        per.unpersist()
        return None
    width = bin_seconds(max(span["hi"] - span["lo"], 1.0))
    boots = (
        per.groupBy("peer_node", "peer_sid")
        .agg(F.count(F.lit(1)).alias("n"), F.min("x").alias("start"))
        .orderBy(F.desc("n"))
        .limit(MAX_BOOTS)
        .collect()
    )
    keep = [(b["peer_node"], b["peer_sid"]) for b in boots]
    sel = per.join(
        F.broadcast(spark.createDataFrame(keep, "peer_node STRING, peer_sid STRING")),
        ["peer_node", "peer_sid"],
    )
    bins = (
        sel.groupBy("peer_node", "peer_sid", F.floor(F.col("x") / width).alias("bin"))
        .agg(F.count(F.lit(1)).alias("n"), F.count(F.when(F.col("late"), 1)).alias("late"))
        .collect()
    )
    nxt = Window.partitionBy("peer_node", "peer_sid").orderBy("seq")
    gaps = (
        sel.select(
            "peer_node",
            "peer_sid",
            "seq",
            "x",
            F.lead("seq").over(nxt).alias("next"),
            F.lead("x").over(nxt).alias("next_x"),
        )
        .where(F.try_subtract(F.col("next"), F.col("seq")) > 1)
        .collect()
    )
    n = span["n"]
    frac = min(1.0, MAX_POINTS / n)
    pts = sel.where(F.col("td").isNotNull())
    if frac < 1.0:
        pts = pts.sample(fraction=frac, seed=1)
    points = pts.select("x", (F.col("t") - F.col("td")).alias("lat"), "late").collect()
    per.unpersist()
    return {"width": width, "boots": boots, "bins": bins, "gaps": gaps, "points": points}


def _when(ts: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)


def plot_audit(spark: SparkSession, table: str, png: str) -> float | None:
    """Write the PNG, from the table read with Spark; returns the timeline's
    bin width (seconds), or None when the table has no numbered device readings."""
    return draw(plot_data(spark, table), png)


def draw(d: dict[str, Any] | None, png: str) -> float | None:
    """Write the PNG of d (the table's rows for the plot: plot_data(), or
    edgebus.ingest.report.arrow.plot_data() without Spark); returns the
    timeline's bin width (seconds), or None when d is None (nothing to plot)."""
    if d is None:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    w = d["width"]
    rows = sorted(d["boots"], key=lambda b: (b["peer_node"], b["start"]))
    fig, (ax, lx) = plt.subplots(
        2,
        1,
        sharex=True,
        figsize=(11, 2.2 + 0.45 * len(rows) + 3.2),
        dpi=100,
        gridspec_kw={"height_ratios": [max(1.2, 0.45 * len(rows)), 3.2]},
    )
    _timeline(ax, d, rows)
    _latencies(lx, d["points"])
    lx.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M:%S", tz=datetime.timezone.utc))
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
    return w if not math.isnan(w) else None


def _timeline(ax: Any, d: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """The upper plot: a row per boot (rows), its bins on time or late, its
    missing numbers."""
    import matplotlib.dates as mdates
    from matplotlib.patches import Patch

    w = d["width"]
    at = {(b["peer_node"], b["peer_sid"]): i for i, b in enumerate(rows)}
    day = w / 86400.0  # matplotlib's dates are in days
    bins = sorted(d["bins"], key=lambda r: (r["peer_node"], r["peer_sid"], r["bin"]))
    for r, nxt in zip(bins, bins[1:] + [None]):
        y = at[(r["peer_node"], r["peer_sid"])]
        late = r["late"] / r["n"]
        colour = COLOURS["late"] if late >= 0.5 else COLOURS["on time"]
        # A bin reaches to the boot's next one across a few empty bins (a
        # device slower than the bins), not across a silence.
        span = 1
        if nxt is not None and (nxt["peer_node"], nxt["peer_sid"]) == (
            r["peer_node"],
            r["peer_sid"],
        ):
            span = nxt["bin"] - r["bin"] if nxt["bin"] - r["bin"] <= FILL else 1
        x0 = mdates.date2num(_when(r["bin"] * w))
        ax.broken_barh([(x0, day * span)], (y - 0.35, 0.7), facecolors=colour, linewidth=0)
    for g in d["gaps"]:
        y = at[(g["peer_node"], g["peer_sid"])]
        x0, x1 = (mdates.date2num(_when(v)) for v in (g["x"], g["next_x"]))
        ax.broken_barh([(x0, max(x1 - x0, day))], (y - 0.45, 0.9), facecolors=COLOURS["missing"])
        ax.annotate(
            "%d missing" % (g["next"] - g["seq"] - 1),
            (x0, y - 0.47),  # above the bar (the rows go down)
            fontsize=7,
            color=COLOURS["missing"],
            va="bottom",
            zorder=5,
        )
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(["%s  boot %s" % (b["peer_node"], b["peer_sid"][-6:]) for b in rows])
    ax.set_ylim(len(rows) - 0.4, -0.8)
    ax.set_title("edgebus delivery audit: each boot's readings by when they were taken")
    ax.legend(
        handles=[Patch(color=c, label=k) for k, c in COLOURS.items()],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize="small",
    )
    ax.grid(True, axis="x", alpha=0.3)


def _latencies(lx: Any, points: list[dict[str, Any]]) -> None:
    """The lower plot: each reading's latency by when it was taken."""
    ok = [p for p in points if not p["late"]]
    late = [p for p in points if p["late"]]
    for pts, k in ((ok, "on time"), (late, "late")):
        if pts:
            lx.scatter(
                [_when(p["x"]) for p in pts],
                [max(p["lat"], 1e-3) for p in pts],
                s=6,
                color=COLOURS[k],
                label=k,
                alpha=0.7,
                linewidths=0,
            )
    lx.set_yscale("log")
    lx.set_ylabel("latency, s (arrival - taken)")
    lx.set_xlabel("time the reading was taken (UTC; device clock)")
    lx.grid(True, alpha=0.3)
    lx.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
