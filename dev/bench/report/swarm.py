"""Section 8: the swarm trial (dev/bench/swarm_bench.py): a column per
scenario and tree, a row per figure."""

from .formats import figure, num
from .templates import block, fill


def _ms_pair(a, b):
    return "%s / %s" % ("–" if a is None else figure(a), "–" if b is None else figure(b))


def _limit(f):
    """Which process held a swarm trial back: the bridge when it used a
    whole core (its loop and its log's worker share one interpreter lock;
    over the steady phase where measured), else the machine when its cores
    were all but full."""
    if f.get("machine_busy") is None:
        return "–"
    w = f.get("bridge_workers", 1)  # processes, a core each at most
    if f["bridge_core_share"] >= 0.9 * w or (f.get("bridge_steady_core_share") or 0) >= 0.85 * w:
        return "the bridge (one core)" if w == 1 else "the bridge (%d cores)" % w
    if f["machine_busy"] >= 0.85:
        return "the machine (%.0f%% of its cores; the devices %.0f%% of one)" % (
            100 * f["machine_busy"],
            100 * f["devices_core_share"],
        )
    return "none saturated"


def _percent(x):
    return "–" if x is None else "%.0f%%" % (100 * x)


# The table's rows: what each says, and its cell from one trial's figures.
ROWS = (
    (
        "outage / steady readings before it and after its drain, s",
        lambda f: "%s / %s" % (figure(f["outage_s"]), figure(f["steady_s"])),
    ),
    (
        "devices with a session / all",
        lambda f: "%s / %s" % (figure(f["ever_up"]), figure(f["devices"])),
    ),
    (
        "all sessions up, s from the first start",
        lambda f: "–" if f["sessions_up_s"] is None else figure(f["sessions_up_s"]),
    ),
    (
        "sessions the devices counted / the bridge's (above the devices: churn)",
        lambda f: (
            "%s / %s"
            % (
                figure(f["sessions"]),
                figure(f.get("bridge_links", {}).get("sessions")) if "bridge_links" in f else "–",
            )
        ),
    ),
    ("readings sent / acknowledged", lambda f: "%s / %s" % (figure(f["sent"]), figure(f["acked"]))),
    (
        "**acknowledged readings missing from the log**",
        lambda f: "**%s**" % figure(f["check"]["acked_missing"]),
    ),
    (
        "readings missing, not acknowledged (still spooled + evicted)",
        lambda f: (
            "%s + %s"
            % (figure(f["check"]["spooled_missing"]), figure(f["check"]["evicted_missing"]))
        ),
    ),
    ("duplicates in the log", lambda f: figure(f["check"]["duplicates"])),
    (
        "flush after the outage drained, s from the broker's restart",
        lambda f: (
            "–"
            if not f["outage_s"]
            else "not in time"
            if f["drain_s"] is None
            else figure(f["drain_s"])
        ),
    ),
    (
        "ACK p50 / p99, ms (readings published with a session up, acknowledged before the outage)",
        lambda f: _ms_pair(f["ack_p50_ms"], f["ack_p99_ms"]),
    ),
    (
        "ACK p50 / p99, ms (the same, acknowledged once it began)",
        lambda f: _ms_pair(f.get("ack_after_p50_ms"), f.get("ack_after_p99_ms")),
    ),
    (
        "ACK p50 / p99, ms (readings published with none: spooled)",
        lambda f: _ms_pair(f["ack_spooled_p50_ms"], f["ack_spooled_p99_ms"]),
    ),
    (
        "CPU, share of one core: the bridge (its workers together) / the devices' processes "
        "/ mosquitto",
        lambda f: " / ".join(
            _percent(f.get(k))
            for k in ("bridge_core_share", "devices_core_share", "broker_core_share")
        ),
    ),
    ("the machine's cores busy (all processes)", lambda f: _percent(f.get("machine_busy"))),
    ("the limit", _limit),
    (
        "bridge RSS per device: configured / with its session up",
        lambda f: (
            "–"
            if f.get("rss_per_device_kib") is None
            else "%s / %s KiB"
            % (figure(f["rss_per_configured_kib"]), figure(f["rss_per_device_kib"]))
        ),
    ),
    ("bridge peak RSS", lambda f: figure(f["bridge_peak_rss_mib"], " MiB")),
    ("group commits/s (the log's sync points)", lambda f: figure(f["commits_per_s"])),
    (
        "steady phase: records logged/s; CPU µs per record, the bridge / the devices",
        lambda f: (
            "–"
            if f.get("bridge_us_per_record") is None
            else "%s; %s / %s"
            % (
                figure(f["steady_records_per_s"]),
                figure(f["bridge_us_per_record"]),
                figure(f["devices_us_per_record"]),
            )
        ),
    ),
    (
        "messages mosquitto dropped (its queues past their limits)",
        lambda f: "–" if f.get("broker_dropped") is None else figure(f["broker_dropped"]),
    ),
    (
        "records the log's subscription dropped / gaps the links counted",
        lambda f: "%s / %s" % (figure(f["log_dropped"]), figure(f["gaps"])),
    ),
)


def swarm_section(sw):
    """Section 8: the swarm trial (dev/bench/swarm_bench.py)."""
    if not sw:
        return []
    cols = [
        (r, t, r["by_tree"][t]) for r in sw["scenarios"] for t in sw["trees"] if t in r["by_tree"]
    ]
    f0 = cols[0][2]
    L = [
        "| figure | " + " | ".join("%s: %s" % (r["label"], t) for r, t, _ in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for what, cell in ROWS:
        L.append("| %s | %s |" % (what, " | ".join(cell(f) for _, _, f in cols)))
    storm = fill("swarm_storm") if any(f.get("ramp_s") == 0 for _, _, f in cols) else []
    return fill(
        "swarm",
        workers="%d" % f0["workers"],
        spool=num(sw.get("spool", 32768)),
        cpus=sw.get("cpus", "the"),
        table="\n".join(L),
        storm=block(storm),
    )
