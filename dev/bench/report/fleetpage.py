"""Section 11: the bridge's fleet page at thousands of devices."""

from .formats import figure, mmm, num
from .templates import fill


def fleetpage_section(f):
    """Section 11: /fleet.json beside a /metrics scrape of the same bridge
    (dev/bench/fleetpage_bench.py)."""
    if not f:
        return []
    rows = [
        "| `%s` | %s | %s | %s | %s |"
        % (
            r["request"],
            mmm(r["wall_ms"]),
            figure(r["rows_ms"]) if r["rows_ms"] else "—",
            figure(r["loop_held_ms"]) if r["loop_held_ms"] else "—",
            num(int(r["bytes"])) if r["bytes"] else "—",
        )
        for r in f["requests"]
    ]
    return fill("fleetpage", devices=num(f["devices"]), rounds=f["rounds"], rows="\n".join(rows))
