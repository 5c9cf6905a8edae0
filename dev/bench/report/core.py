"""Section 1: the core on CPython: throughput beside zenoh and a naive bus,
the compiled core's rows, and the publish cost curve."""

import os

from .formats import figure, mmm
from .plots import publish_curve
from .templates import fill


def core_cpython(res, out, md_dir):
    if "core_throughput" not in res:
        return []
    rows = []
    for r in res["core_throughput"]:
        e, z, n = r["edgebus"]["median"], r["zenoh"]["median"], r["naive"]["median"]
        rows.append(_throughput_row(r, mmm(r["naive"]), "%.2f×" % (e / z), "%.2f×" % (e / n)))
    c = res["core_publish_curve"]
    png = publish_curve(res, out)
    return fill(
        "core_cpython",
        rows="\n".join(rows),
        compiled=_compiled_rows(res.get("core_throughput_compiled"), res["core_throughput"]),
        curve="\n".join(
            "| %s | %s |" % (figure(p["patterns"]), mmm(p["ns_per_publish"])) for p in c["points"]
        ),
        slope="%.3f" % c["loglog_slope"],
        last=figure(c["points"][-1]["patterns"]),
        ratio="%.2f" % c["ratio_last_first"],
        first=figure(c["points"][0]["patterns"]),
        plot="![publish cost curve](%s)" % os.path.relpath(png, md_dir) if png else "",
    )


def _compiled_rows(cc, pure):
    """The compiled core's rows (dev/compiled.py), each beside the pure
    modules' of the same part, or the line saying why there are none."""
    if not cc:
        return "| (not measured in this run) | | | | |"
    if "error" in cc:
        return "| (not measured in this run: %s) | | | | |" % cc["error"]
    rows = []
    for r, p in zip(cc["rows"], pure):
        # zenoh's median in the compiled run's process or in the pure one's,
        # whichever is higher: its own spread on 2 cores is wide.
        e, z = r["edgebus"]["median"], max(r["zenoh"]["median"], p["zenoh"]["median"])
        rows.append(
            _throughput_row(r, "%.2f×" % (e / p["edgebus"]["median"]), "**%.2f×**" % (e / z))
        )
    return "\n".join(rows)


def _throughput_row(r, *more):
    """A throughput row: subscriptions (matching), edgebus's and zenoh's
    msgs/s, then the cells given."""
    head = "| %d (%d) | %s | %s | " % (
        r["subscriptions"],
        r["matching"],
        mmm(r["edgebus"]),
        mmm(r["zenoh"]),
    )
    return head + " | ".join(more) + " |"
