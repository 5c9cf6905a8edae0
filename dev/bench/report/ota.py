"""Section 9: updates over the bus: MQTT to one device and a fleet, the serial
line's pushes, and the emulated board's heaps."""

from .formats import figure, num
from .templates import block, fill


def ota_section(o):
    """Section 9: updates over the bus (dev/bench/ota_bench.py)."""
    if not o:
        return []
    one, fl, bd = o["mqtt_one"], o["mqtt_fleet"], o.get("board") or {}
    board = _board(o, bd)
    se = o.get("serial")
    serial = _serial(o, se) if se else ["The serial line is not measured in a smoke run."]
    return fill(
        "ota",
        bytes=num(o["bundle_bytes"]),
        files=o["files"],
        one_sent=figure(one["sent_s"]),
        one_wall=figure(one["wall_s"]),
        n=o["fleet"],
        fleet_wall=figure(fl["wall_s"]),
        fleet_sent=figure(fl["sent_max_s"]),
        fleet_median=figure(fl["sent_median_s"]),
        serial=block(serial),
        board=board,
    )


def _board(o, bd):
    """The emulated board's block: a row per heap, or why there is none."""
    if "error" in bd or not bd:
        return "not measured in this run (%s)" % bd.get("error", "no result")
    rows = []
    for r in bd.values():
        if "error" in r:  # that heap's run ended before its figures
            rows.append(
                "| %s | not measured: %s | — | — | — | — | — |" % (num(r["heap"]), r["error"])
            )
            continue
        rows.append(
            "| %s | %s | %s | %s | %s | %s | %s |"
            % (
                num(r["heap"]),
                figure(r["transfer_s"]) + " s" if r.get("transfer_s") else "—",
                num(r["ready_alloc"]),
                num(r["transfer_alloc"]) if r.get("transfer_alloc") else "—",
                num(r["trial_alloc"]) if r.get("trial_alloc") else "—",
                figure(r["seconds"]) + " s" if r.get("seconds") else "—",
                r["outcome"].split(": ", 1)[-1],
            )
        )
    first = next((r for r in bd.values() if "error" not in r), None) or {
        "bundle_bytes": o["bundle_bytes"],
        "line_s": o["bundle_bytes"] * 10 / o["baud"],
    }
    return block(
        fill(
            "ota_board",
            bytes=num(first["bundle_bytes"]),
            limit=figure(first["line_s"]),
            rows="\n".join(rows),
        )
    )


# The serial pushes' rows (dev/bench/ota_bench.SERIAL): what each sent.
OTA_PUSHES = {
    "plain": "the whole bundle as it is (`--full --no-compress`)",
    "full": "the whole bundle, compressed (`--full`)",
    "delta": "one service changed: a delta, compressed",
}


def _serial(o, se):
    """Section 9's serial pushes: a row each, and the delta against the full
    push before it in the same run."""
    if "pushes" not in se:  # a result from before the pushes were several
        return ["The serial line's figures are from an older run: refresh the ota part."]
    ps = se["pushes"]
    rows = [
        "| %s | %s of %s | %s | %s s | %s s |"
        % (
            OTA_PUSHES[p["name"]],
            num(p["sent"]),
            num(p["total"]),
            num(p["wire_bytes"]),
            figure(p["sent_s"]),
            figure(p["wall_s"]),
        )
        for p in ps
    ]
    pairs = [(a, b) for a, b in zip(ps, ps[1:]) if (a["name"], b["name"]) == ("full", "delta")]
    ratios = [b["sent_s"] / a["sent_s"] for a, b in pairs]
    plain = next(p for p in ps if p["name"] == "plain")
    full = pairs[0][0]
    return fill(
        "ota_serial",
        baud=num(o["baud"]),
        rows="\n".join(rows),
        limit=figure(se["limit_s"]),
        ratio=figure(plain["sent_s"] / se["limit_s"]),
        full_pct="%.0f" % (100 * full["sent"] / full["total"]),
        changed=se["changed"],
        copied=o["files"] - 1,
        pairs=" and ".join("%.1f %%" % (100 * r) for r in ratios),
        delta_pct="%.1f" % (100 * sum(ratios) / len(ratios)),
    )
