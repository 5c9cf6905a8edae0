"""Section 6: the bridge's log: records/s and latency by group commit, beside
the disk's fsync floor."""

from .formats import mmm, num
from .templates import fill


def log_section(res):
    lg = res.get("log")
    if not lg:
        return []
    f = lg["fsync_floor_ms"]
    base = lg["no_sync_records_per_s"]["median"]
    rows = []
    for r in lg["by_commit_ms"]:
        rows.append(
            "| %d | %s | %.2f× | %s ms | %s ms | %.0f |"
            % (
                r["commit_ms"],
                mmm(r["records_per_s"]),
                r["records_per_s"]["median"] / base,
                mmm(r["latency_p50_ms"]),
                mmm(r["latency_p99_ms"]),
                r["syncs_per_s_paced"],
            )
        )
    return fill(
        "log",
        records_tp=num(lg["records_tp"]),
        records_latency=num(lg["records_latency"]),
        rate="%d" % lg["rate_paced"],
        fsync_p50="%.2f" % f["p50"],
        fsync_p99="%.2f" % f["p99"],
        no_sync=mmm(lg["no_sync_records_per_s"]),
        rows="\n".join(rows),
        syncs_0="%.0f" % lg["by_commit_ms"][0]["syncs_per_s_paced"],
    )
