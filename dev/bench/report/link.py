"""Section 3: the link: bytes on the wire, a serial line's rate, and the
acknowledgements', the seal's and the spool's tables."""

from .formats import figure, mmm, num
from .templates import block, fill

# The wire table's columns: bytes (overhead) of a message each way it is sent.
WIRE = (
    "on_line",
    "on_line_sealed",
    "on_line_encrypted",
    "mqtt",
    "mqtt_sealed",
    "mqtt_bare",
    "mqtt_bare_encrypted",
)
RUNTIMES = (("cpython", "CPython"), ("micropython", "MicroPython unix port (`.mpy`)"))


def link(lk):
    if not lk:
        return []
    wire = []
    for w in lk["wire"]:
        wire.append(
            "| %d B | %s | %.0f%% |"
            % (
                w["payload"],
                " | ".join("%d (%d)" % (w[k], w["over_" + k]) if k in w else "–" for k in WIRE),
                100 * w["efficiency"],
            )
        )
    p = lk["pty"]
    L = fill(
        "link",
        topic_json="%d" % lk["wire"][0]["topic_and_json"],
        wire="\n".join(wire),
        baud=num(p["baud"]),
        payload="%d" % p["payload"],
        pty_rate=mmm(p["msgs_per_s"]),
        line_limit=figure(p["line_limit_msgs_per_s"]),
        of_limit="%.2f" % p["of_limit"],
        below_limit=block(fill("link_below_limit")) if p["of_limit"] < 0.9 else "",
        roundtrips=mmm(lk["roundtrips_per_s"]),
    )
    return L + _acks(lk.get("acks")) + _seal(lk.get("seal")) + _spool(lk.get("spool_cover"))


def _acks(a):
    if not a:
        return []
    rows = []
    for k, name in RUNTIMES:
        r = a[k]
        rows.append(
            "| %s | %s | %s | %.2f× | %.3f |"
            % (name, mmm(r["on"]), mmm(r["off"]), r["ratio"], r["acks_per_msg"])
        )
    return [""] + fill(
        "link_acks",
        messages=num(a["messages"]),
        mpy_messages=num(a["mpy_messages"]),
        window="%d" % a["window"],
        reps="%d" % a["reps"],
        rows="\n".join(rows),
    )


def _seal(se):
    if not se:
        return []
    rows = []
    for k, name in RUNTIMES:
        r = se[k]
        e = r.get("encrypt")
        rows.append(
            "| %s | %s | %s | %s | %.2f× | %s | %s |"
            % (
                name,
                mmm(r["mac"]["rate"]),
                mmm(e["rate"]) if e else "(no AES)",
                mmm(r["off"]["rate"]),
                r["mac"]["of_off"],
                "%.2f×" % e["of_off"] if e else "–",
                "%.2f×" % (e["of_off"] / r["mac"]["of_off"]) if e else "–",
            )
        )
    return [""] + fill(
        "link_seal",
        reps="%d" % se["reps"],
        cpython_backend=se["cpython"]["backend"],
        mpy_backend=se["micropython"]["backend"],
        rows="\n".join(rows),
    )


def _spool_rows(sc):
    """A row per board: its spool, the readings it holds, and for how long."""
    hs = sc["health"]
    rows = []
    for r in sc["boards"]:
        sh = r["seconds_health"]
        worst = min([r["seconds"]] + list(sh.values()))
        rows.append(
            "| %s | %s B | %d / %d | %d | %d | %.1f | %.1f / %.1f | %s |"
            % (
                r["board"],
                num(r["spool"]),
                r["held_boot"],
                r["held_day"],
                r["held_health_%d" % hs[0]],
                r["held_health_%d" % hs[1]],
                r["seconds"],
                sh[str(hs[0])],
                sh[str(hs[1])],
                "yes" if worst >= 10 else "**no**",
            )
        )
    return rows


def _spool(sc):
    if not sc:
        return []
    hs = sc["health"]
    rows = _spool_rows(sc)
    j = sc["journal"]
    rd = dict(sc["reading"])
    tbh = rd.pop("table_bytes_health")
    unix = [r for r in sc["boards"] if r["board"] == "unix"][0]
    u1 = unix["seconds_health"][str(hs[1])]
    return [""] + fill(
        "link_spool",
        rate="%d" % sc["rate"],
        h0="%d" % hs[0],
        h1="%d" % hs[1],
        rows="\n".join(rows),
        spooled_boot="%.1f" % rd["boot"]["spooled"],
        spooled_day="%.1f" % rd["day"]["spooled"],
        sent_boot="%.1f" % rd["boot"]["sent"],
        sent_day="%.1f" % rd["day"]["sent"],
        as_sent_boot="%.1f" % (rd["boot"]["sent"] + 10),
        as_sent_day="%.1f" % (rd["day"]["sent"] + 10),
        table_bytes=num(rd["day"]["table_bytes"]),
        table_bytes_health=num(tbh),
        reading_goal="met" if max(r["spooled"] for r in rd.values()) <= 36 else "**not met**",
        unix_spool=num(unix["spool"]),
        unix_h1="%.1f" % u1,
        unix_goal="met" if u1 >= 30 else "**not met**",
        journal_bytes=num(j["bytes"]),
        journal_boot=num(j["held_boot"]),
        journal_day=num(j["held_day"]),
        journal_seconds="%.0f" % j["seconds"],
        firmware_default=num(sc["firmware_default"]),
    )
