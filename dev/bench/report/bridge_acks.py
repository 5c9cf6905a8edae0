"""Section 4's acknowledgements and seal through mosquitto: the acks table
(with and without the bridge's log), the ACK latency, the notes its figures
call for, and the seal's table."""

from .formats import figure, mmm, num, p50_p99
from .templates import block, fill

# The acks table's rows: the key in the bridge part's acks, and what it measured.
ACKS = (
    ("off", "acks off, no log"),
    ("on", "acks on, no log (ACK on delivery)"),
    ("log_off", "acks off, bridge writing its log"),
    ("log_on", "acks on, bridge writing its log (ACK after the group commit)"),
)


def bridge_acks(res, br):
    a = br.get("acks")
    if not a:
        return []
    L = [""] + fill(
        "bridge_acks",
        rows="\n".join(_acks_rows(a)),
        paho_rate=mmm(br["paho_msgs_per_s"]),
        paho_cpu=mmm(br["rx_cpu_us_per_msg"]["paho"]),
    )
    if br.get("paced_ack_latency"):
        L += [""] + _ack_latency(res, br)
    ps = br["paho_msgs_per_s"]
    if ps["max"] > 1.5 * ps["min"]:
        L += [""] + fill(
            "bridge_noisy",
            cpus=res["meta"]["cpus"],
            low=figure(ps["min"]),
            high=figure(ps["max"]),
            reps="%d" % br["reps"],
        )
    L += _ahead(a)
    if "retransmitted" in a["on"]:
        L += [""] + fill(
            "bridge_retransmitted",
            no_log="%d" % a["on"]["retransmitted"],
            log="%d" % a["log_on"]["retransmitted"],
        )
    return L + [""] + fill("bridge_acks_cost")


def _acks_rows(a):
    rows = []
    for k, name in ACKS:
        r = a[k]
        if r.get("lost"):
            name += " (%s of %s dropped past its share of the queue, counted)" % (
                figure(r["lost"]),
                figure(r["sent"]),
            )
        rows.append(
            "| %s | %s | %s | %.2f× | %s µs | %s | %s |"
            % (
                name,
                mmm(r["msgs_per_s"]),
                "%.2f×" % r["of_off"] if "of_off" in r else "1×",
                r["of_paho"],
                mmm(r["rx_cpu_us_per_msg"]),
                mmm(r["acked_msgs_per_s"]) if "acked_msgs_per_s" in r else "",
                figure(r["acks_in"]) if r["acks_in"] else "",
            )
        )
    return rows


def _ack_latency(res, br):
    """The paced ACK latency, beside the log part's appender at a 20 ms commit."""
    pl, al = br["paced_latency"], br["paced_ack_latency"]
    c20 = None
    for r in (res.get("log") or {}).get("by_commit_ms", []):
        if r["commit_ms"] == 20:
            c20 = r
    appender = (
        block(
            fill(
                "bridge_ack_appender",
                p50="%.1f" % c20["latency_p50_ms"]["median"],
                p99="%.1f" % c20["latency_p99_ms"]["median"],
            )
        )
        if c20
        else ""
    )
    return fill(
        "bridge_ack_latency",
        rate="%d" % pl["rate"],
        messages=num(br["paced_messages"]),
        bus=p50_p99(al["bus"], "%.2f / %.2f"),
        log=p50_p99(al["log"], "%.1f / %.1f"),
        appender=appender,
        host_bus=p50_p99(pl["edgebus_log"], "%.2f / %.2f"),
    )


def _ahead(a):
    """The note when acks on went faster than acks off: the ratios, and the
    CPU per message the acks cost."""
    ahead = [k for k in ("on", "log_on") if a[k]["of_off"] > 1]
    if not ahead:
        return []

    def cpu(k):
        off = a[k.replace("on", "off")]["rx_cpu_us_per_msg"]["median"]
        return "%+.0f%% %s" % (
            100 * (a[k]["rx_cpu_us_per_msg"]["median"] / off - 1),
            "without the log" if k == "on" else "with it",
        )

    return [""] + fill(
        "bridge_acks_ahead",
        ratios=", ".join("%.2f×" % a[k]["of_off"] for k in ahead),
        cpu=" and ".join(cpu(k) for k in ("on", "log_on")),
    )


def bridge_seal(br):
    """The seal through mosquitto: the acks table's *acks on* row is the default
    (sealed, encrypted, bare) beside devices whose bridge entry says mac or off."""
    a = br.get("acks", {})
    if "seal_off" not in a:
        return []
    rows = []
    for k, name in (("seal_off", "off"), ("seal_mac", "mac"), ("on", "encrypt (auto)")):
        r = a[k]
        rows.append(
            "| %s | %s | %s | %s | %.2f× | %s µs |"
            % (
                name,
                "; ".join(r.get("negotiated", [])),
                mmm(r["msgs_per_s"]),
                "%.2f×" % r["of_unsealed"] if "of_unsealed" in r else "1×",
                r["of_paho"],
                mmm(r["rx_cpu_us_per_msg"]),
            )
        )
    return [""] + fill(
        "bridge_seal",
        rows="\n".join(rows),
        paho_rate=mmm(br["paho_msgs_per_s"]),
        paho_cpu=mmm(br["rx_cpu_us_per_msg"]["paho"]),
    )
