"""Render benchmark results as BENCHMARKS.md (and a plot when matplotlib is there).

The words are in templates/ (Markdown with ``$name`` fields, string.Template);
this module computes the figures that fill them and the rows of the tables."""

import os
import re
from string import Template

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")

# ./do bench's parts (dev/bench/__main__.py PARTS) and the section each fills.
SECTIONS = (
    ("core", "1"),
    ("mpy", "2"),
    ("link", "3"),
    ("bridge", "4"),
    ("fleet", "4, a fleet"),
    ("device", "4, a device's cost"),
    ("spark", "5"),
    ("commands", "5, a small fleet's commands"),
    ("log", "6"),
    ("swarm", "8"),
    ("ota", "9"),
    ("tls", "10"),
)


def _t(name, **fields):
    """templates/NAME.md with its fields filled in, as a list of lines."""
    with open(os.path.join(TEMPLATES, name + ".md"), encoding="utf-8") as f:
        text = Template(f.read()).substitute(fields)
    return text.rstrip("\n").split("\n")


def _block(lines):
    """Lines as one field's value: a block of its own, or nothing."""
    return "\n".join(lines)


def _n(x):
    return "{:,}".format(x)


def _f(x, unit=""):
    if isinstance(x, float):
        x = ("%.3g" % x) if abs(x) < 100 else "{:,.0f}".format(x)
    else:
        x = "{:,}".format(x)
    return x + unit


def _mmm(s, unit=""):
    return "%s (%s–%s)" % (_f(s["median"], unit), _f(s["min"]), _f(s["max"]))


def _plot(res, out):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    pts = res["core_publish_curve"]["points"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.errorbar(
        [p["patterns"] for p in pts],
        [p["ns_per_publish"]["median"] for p in pts],
        yerr=[
            [p["ns_per_publish"]["median"] - p["ns_per_publish"]["min"] for p in pts],
            [p["ns_per_publish"]["max"] - p["ns_per_publish"]["median"] for p in pts],
        ],
        marker="o",
    )
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("stored patterns (siblings of the published topic)")
    ax.set_ylabel("ns per publish")
    ax.set_title("edgebus publish cost vs stored patterns (CPython)")
    fig.tight_layout()
    path = os.path.join(out, "bench_publish_curve.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _plot_latency(br, out):
    """The paced latency distribution (CDF) of the bridge path vs raw paho."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    cdf = br["paced_cdf"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in (
        ("edgebus", "edgebus device (CPython) → bridge"),
        ("micropython", "edgebus device (MicroPython) → bridge"),
        ("paho", "raw paho publisher → subscriber"),
    ):
        if key in cdf:
            ax.plot(cdf[key]["ms"], cdf[key]["q"], label=label, drawstyle="steps-post")
    ax.set_xscale("log")
    ax.set_ylim(0, 100)
    ax.set_xlabel("device → host latency, ms (log scale)")
    ax.set_ylabel("% of messages at or below")
    ax.set_title("Latency through mosquitto, paced at %d/s" % br["paced_latency"]["rate"])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = os.path.join(out, "bench_bridge_latency.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _header(res):
    m = res["meta"]
    parts = m.get("parts", {})
    rows = [
        "| %s | %s | %s | %s |" % (name, sec, parts[name]["date"], parts[name]["commit"])
        for name, sec in SECTIONS
        if name in parts
    ]
    return _t(
        "header", machine=m["machine"], cpus=m["cpus"], python=m["python"], parts="\n".join(rows)
    )


def _core_cpython(res, out, md_dir):
    if "core_throughput" not in res:
        return []
    rows = []
    for r in res["core_throughput"]:
        e, z, n = r["edgebus"]["median"], r["zenoh"]["median"], r["naive"]["median"]
        rows.append(_throughput_row(r, _mmm(r["naive"]), "%.2f×" % (e / z), "%.2f×" % (e / n)))
    c = res["core_publish_curve"]
    png = _plot(res, out)
    return _t(
        "core_cpython",
        rows="\n".join(rows),
        compiled=_compiled_rows(res.get("core_throughput_compiled"), res["core_throughput"]),
        curve="\n".join(
            "| %s | %s |" % (_f(p["patterns"]), _mmm(p["ns_per_publish"])) for p in c["points"]
        ),
        slope="%.3f" % c["loglog_slope"],
        last=_f(c["points"][-1]["patterns"]),
        ratio="%.2f" % c["ratio_last_first"],
        first=_f(c["points"][0]["patterns"]),
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
        _mmm(r["edgebus"]),
        _mmm(r["zenoh"]),
    )
    return head + " | ".join(more) + " |"


def _core_mpy(res):
    if "core_mpy" not in res:
        return []
    mp = res["core_mpy"]
    runs = mp["runs"]

    def med(k):
        vals = sorted(r[k] for r in runs)
        return vals[len(vals) // 2]

    dv = mp.get("device")
    device = (
        _t(
            "core_mpy_device",
            smallest="%s KB" % dv["smallest_heap_kb"]
            if dv["smallest_heap_kb"]
            else "(full run only)",
            code=_f(dv["code"]),
            data=_f(dv["data_at_ready"]),
        )
        if dv
        else []
    )
    nat = mp.get("native_runs") or []
    speed = []
    for n, goal in ((1, "≥ 1.0×"), (10, "≥ 1.5×")):
        k = "msgs_per_s_%dsub" % n
        e, b = med(k), med("naive_" + k)
        if nat:
            x = sorted(r[k] / r["naive_" + k] for r in nat)[len(nat) // 2]
            xe = sorted(r[k] for r in nat)[len(nat) // 2]
            speed.append(
                "| %d | %s | %s | %s | %.2f× | **%.2f×** | %s |"
                % (n, _f(e), _f(xe), _f(b), e / b, x, goal)
            )
        else:
            speed.append("| %d | %s | – | %s | %.2f× | – | %s |" % (n, _f(e), _f(b), e / b, goal))
    return _t(
        "core_mpy",
        import_core=_f(med("import_core")),
        import_asyncio=_f(med("import_asyncio")),
        per_subscription=_f(med("per_subscription_q8")),
        per_retained=_f(med("per_retained_topic")),
        per_endpoint=_f(med("per_endpoint_q1")),
        alloc_1=_f(med("alloc_per_publish_1sub")),
        alloc_10=_f(med("alloc_per_publish_10subs")),
        max_subs=_f(mp["max_subscriptions_q8_in_64K"])
        if mp.get("import_core_in_64K") is not None
        else "0: the core did not import in this run's 64 KB heap",
        device=_block(device),
        speed="\n".join(speed),
        board=_block(_core_board(mp.get("board"), med("alloc_per_publish_1sub"))),
    )


def _core_board(bd, unix_alloc_1):
    """The core_mpy_board block: the emulated board's speed runs (ratio per
    run, the median's msgs/s), or the line saying why there are none."""
    if not bd:
        return []
    if "error" in bd:
        return ["On the emulated 32-bit board: not measured in this run (%s)." % bd["error"]]
    runs = bd["runs"]

    def med(k):
        return sorted(r[k] for r in runs)[len(runs) // 2]

    speed = []
    for n, goal in ((1, "≥ 1.0×"), (10, "≥ 1.5×")):
        ratios = sorted(r["msgs_per_s_%dsub" % n] / r["naive_msgs_per_s_%dsub" % n] for r in runs)
        e, b = med("msgs_per_s_%dsub" % n), med("naive_msgs_per_s_%dsub" % n)
        spread = "" if len(runs) < 2 else " (runs %.3f–%.3f)" % (ratios[0], ratios[-1])
        speed.append(
            "| %d | %s | %s | %.2f×%s | %s |"
            % (n, _f(e), _f(b), ratios[len(ratios) // 2], spread, goal)
        )
    return _t(
        "core_mpy_board",
        heap=bd["heap"] // 1024,
        nruns=len(runs),
        mips="%.0f" % (1000 / 2 ** bd["icount_shift"]),
        shift=bd["icount_shift"],
        speed="\n".join(speed),
        alloc_1=_f(med("alloc_per_publish_1sub")),
        alloc_10=_f(med("alloc_per_publish_10subs")),
        unix_alloc_1=_f(unix_alloc_1),
        seconds="%.0f" % bd["seconds"],
    )


def _link(lk):
    if not lk:
        return []
    wire = []
    for w in lk["wire"]:
        wire.append(
            "| %d B | %s | %.0f%% |"
            % (
                w["payload"],
                " | ".join(
                    "%d (%d)" % (w[k], w["over_" + k]) if k in w else "–"
                    for k in (
                        "on_line",
                        "on_line_sealed",
                        "on_line_encrypted",
                        "mqtt",
                        "mqtt_sealed",
                        "mqtt_bare",
                        "mqtt_bare_encrypted",
                    )
                ),
                100 * w["efficiency"],
            )
        )
    p = lk["pty"]
    L = _t(
        "link",
        topic_json="%d" % lk["wire"][0]["topic_and_json"],
        wire="\n".join(wire),
        baud=_n(p["baud"]),
        payload="%d" % p["payload"],
        pty_rate=_mmm(p["msgs_per_s"]),
        line_limit=_f(p["line_limit_msgs_per_s"]),
        of_limit="%.2f" % p["of_limit"],
        below_limit=_block(_t("link_below_limit")) if p["of_limit"] < 0.9 else "",
        roundtrips=_mmm(lk["roundtrips_per_s"]),
    )
    return (
        L
        + _link_acks(lk.get("acks"))
        + _link_seal(lk.get("seal"))
        + _link_spool(lk.get("spool_cover"))
    )


def _link_acks(a):
    if not a:
        return []
    rows = []
    for k, name in (("cpython", "CPython"), ("micropython", "MicroPython unix port (`.mpy`)")):
        r = a[k]
        rows.append(
            "| %s | %s | %s | %.2f× | %.3f |"
            % (name, _mmm(r["on"]), _mmm(r["off"]), r["ratio"], r["acks_per_msg"])
        )
    return [""] + _t(
        "link_acks",
        messages=_n(a["messages"]),
        mpy_messages=_n(a["mpy_messages"]),
        window="%d" % a["window"],
        reps="%d" % a["reps"],
        rows="\n".join(rows),
    )


def _link_seal(se):
    if not se:
        return []
    rows = []
    for k, name in (("cpython", "CPython"), ("micropython", "MicroPython unix port (`.mpy`)")):
        r = se[k]
        e = r.get("encrypt")
        rows.append(
            "| %s | %s | %s | %s | %.2f× | %s | %s |"
            % (
                name,
                _mmm(r["mac"]["rate"]),
                _mmm(e["rate"]) if e else "(no AES)",
                _mmm(r["off"]["rate"]),
                r["mac"]["of_off"],
                "%.2f×" % e["of_off"] if e else "–",
                "%.2f×" % (e["of_off"] / r["mac"]["of_off"]) if e else "–",
            )
        )
    return [""] + _t(
        "link_seal",
        reps="%d" % se["reps"],
        cpython_backend=se["cpython"]["backend"],
        mpy_backend=se["micropython"]["backend"],
        rows="\n".join(rows),
    )


def _link_spool(sc):
    if not sc:
        return []
    hs = sc["health"]
    rows = []
    for r in sc["boards"]:
        sh = r["seconds_health"]
        worst = min([r["seconds"]] + list(sh.values()))
        rows.append(
            "| %s | %s B | %d / %d | %d | %d | %.1f | %.1f / %.1f | %s |"
            % (
                r["board"],
                _n(r["spool"]),
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
    j = sc["journal"]
    rd = dict(sc["reading"])
    tbh = rd.pop("table_bytes_health")
    unix = [r for r in sc["boards"] if r["board"] == "unix"][0]
    u1 = unix["seconds_health"][str(hs[1])]
    return [""] + _t(
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
        table_bytes=_n(rd["day"]["table_bytes"]),
        table_bytes_health=_n(tbh),
        reading_goal="met" if max(r["spooled"] for r in rd.values()) <= 36 else "**not met**",
        unix_spool=_n(unix["spool"]),
        unix_h1="%.1f" % u1,
        unix_goal="met" if u1 >= 30 else "**not met**",
        journal_bytes=_n(j["bytes"]),
        journal_boot=_n(j["held_boot"]),
        journal_day=_n(j["held_day"]),
        journal_seconds="%.0f" % j["seconds"],
        firmware_default=_n(sc["firmware_default"]),
    )


# Section 4's goals against raw paho: device -> host bus, acks on, without
# and with the bridge's log.
GOAL_NO_LOG = 0.9
GOAL_LOG = 0.6


def _bridge_section(res, out, md_dir):
    br = res.get("bridge")
    fl = res.get("fleet")
    dc = res.get("device")
    if not br and not fl and not dc:
        return []
    L = []
    if br:
        pl, bl, cpu = br["paced_latency"], br["burst_latency"], br["rx_cpu_us_per_msg"]
        L += _t(
            "bridge",
            reps="%d" % br["reps"],
            messages=_n(br["messages"]),
            eb_rate=_mmm(br["edgebus_msgs_per_s"]),
            paho_rate=_mmm(br["paho_msgs_per_s"]),
            ratio="%.2f" % br["ratio"],
            eb_cpu=_mmm(cpu["edgebus"]),
            paho_cpu=_mmm(cpu["paho"]),
            lean_rate=_mmm(br["mqtt_conn_msgs_per_s"]) if "mqtt_conn" in cpu else "not run",
            lean_cpu=_mmm(cpu["mqtt_conn"]) if "mqtt_conn" in cpu else "not run",
            lean_ratio="%.2f" % (cpu["mqtt_conn"]["median"] / cpu["paho"]["median"])
            if "mqtt_conn" in cpu
            else "–",
            rate="%d" % pl["rate"],
            eb_paced="%.2f / %.2f" % (pl["edgebus"]["p50_ms"], pl["edgebus"]["p99_ms"]),
            paho_paced="%.2f / %.2f" % (pl["paho"]["p50_ms"], pl["paho"]["p99_ms"]),
            eb_burst="%.1f / %.1f" % (bl["edgebus"]["p50_ms"], bl["edgebus"]["p99_ms"]),
            paho_burst="%.1f / %.1f" % (bl["paho"]["p50_ms"], bl["paho"]["p99_ms"]),
            mpy_rate=_mmm(br["micropython_msgs_per_s"]),
            mpy_messages=_n(br["mpy_messages"]),
            mpy_paced="%.2f / %.2f" % (pl["micropython"]["p50_ms"], pl["micropython"]["p99_ms"]),
            gaps="%d" % br["gaps"],
        )
        L += _bridge_acks(res, br)
        L += _bridge_seal(br)
        png = _plot_latency(br, out)
        if png:
            L += ["", "![bridge latency distribution](%s)" % os.path.relpath(png, md_dir)]
        L += [""] + _t("bridge_profile")
        if pl["edgebus"]["p50_ms"] > pl["paho"]["p50_ms"]:
            L += [""] + _t(
                "bridge_behind_latency",
                times="%.1f" % (pl["edgebus"]["p50_ms"] / pl["paho"]["p50_ms"]),
            )
        a = br.get("acks") or {}
        if br["ratio"] < GOAL_NO_LOG and "log_on" in a:
            L += [""] + _t(
                "bridge_behind_goal",
                ratio="%.2f" % br["ratio"],
                log_ratio="%.2f" % a["log_on"]["of_paho"],
                eb_cpu=_f(cpu["edgebus"]["median"]),
                log_cpu=_f(a["log_on"]["rx_cpu_us_per_msg"]["median"]),
                paho_cpu=_f(cpu["paho"]["median"]),
            )
    if fl:
        L += [""] + _t(
            "bridge_fleet",
            devices="%d" % fl["devices"],
            heap=fl["heap"],
            period="%g" % fl["period_s"],
            cpus=res["meta"]["cpus"],
            window="%g" % fl["window_s"],
            offered=_f(fl["offered_per_s"]),
            sent=_mmm(fl["sent_per_s"]),
            arrived=_mmm(fl["msgs_per_s"]),
            loss="%.2f" % (100 * fl["loss"]),
            gaps="%d" % fl["gaps"],
            bridge_core=_mmm({k: 100 * v for k, v in fl["bridge_core_share"].items()}, "%"),
        )
        if fl["devices"] >= 50:
            L += [""] + _t("bridge_fleet_rate")
    if dc:
        L += [""] + _device_cost(dc)
    return L


def _device_cost(dc):
    """What a reading costs a MicroPython device beside umqtt (dev/bench/device_cost.py)."""
    q1 = dc["umqtt_qos1"]["cpu_us"]
    rows = []
    for key, name in DEVICES:
        r = dc[key]
        rows.append(
            "| %s | %s (%s) | %.2f× | %s |"
            % (
                name,
                _f(r["cpu_us"]),
                "–".join(_f(x) for x in sorted(r["cpu_us_all"])),
                r["cpu_us"] / q1,
                "%.3f" % r["frames_in"],
            )
        )
    return _t(
        "device_cost",
        readings=_n(dc["readings"]),
        rate="%g" % (1000 / dc["pace_ms"]),
        runs="%d" % dc["runs"],
        rows="\n".join(rows),
        # results measured before the heap and the bytes were have no block
        setup=_block(_device_setup(dc["edgebus"], dc)) if "heap" in dc["edgebus"] else "",
        # nor those measured before the variants
        split=_block(_device_split(dc)) if "variants" in dc else "",
    )


# Where the edgebus device's CPU per reading goes (device_cost.VARIANTS): each
# row a variant, its difference from the one named (per round, the two run in
# the same round; "+": this one costs more, "−" below: the full one saves it
# off), and what the difference is.
DEVICE_SPLIT = (
    ("pace_only", None, "the readings' loop alone: no link, nothing published", "pacing loop"),
    ("bus_only", "pace_only", "each reading published into the bus, no link", "+ the bus"),
    (
        "seal_off",
        "bus_only",
        "the link, unsealed (its frames with COBS and CRC), acks on",
        "+ the link: export observer, spool, frame, MQTT, socket, ACKs, its timers",
    ),
    (
        "seal_mac",
        "seal_off",
        "sealed, not encrypted (bare messages: no COBS, no CRC)",
        "+ the seal's counter and tag, less the framing it spares",
    ),
    ("edgebus", "seal_mac", "sealed and encrypted: the full device", "+ encryption (AES-CTR)"),
    (
        "link_idle",
        "pace_only",
        "the session up, the same loop, nothing published",
        "of the link's: its timers alone (ticks, PING, no readings)",
    ),
    (
        "status_off",
        "-edgebus",
        "the full device, its status not retained (the firmware's setting)",
        "of the link's: its status retained on its bus each second",
    ),
    (
        "acks_off",
        "-edgebus",
        "the full device without acknowledgements",
        "of the link's: acknowledgements (ACKs in, the wait for the last)",
    ),
)


def _device_runs(dc, key):
    r = dc[key] if key in dc else dc["variants"][key]
    return r["cpu_us"], r["cpu_us_all"]


def _device_split(dc):
    """The device_cost_split block: the variants' CPU and their differences."""
    rows = []
    d = {}
    for key, ref, what, share in DEVICE_SPLIT:
        med, runs = _device_runs(dc, key)
        cell = "–"
        if ref is not None:
            off = ref.startswith("-")
            other = _device_runs(dc, ref.lstrip("-"))[1]
            # paired by round: the variants of a round ran one after the other
            diffs = sorted((b - a) if off else (a - b) for a, b in zip(runs, other))
            h = len(diffs) // 2  # the median
            d[key] = diffs[h] if len(diffs) % 2 else (diffs[h - 1] + diffs[h]) / 2
            cell = "%+.0f (%+.0f to %+.0f)" % (d[key], diffs[0], diffs[-1])
            cell = cell.replace("-", "−")
        rows.append(
            "| %s | %s (%s) | %s | %s |"
            % (what, _f(med), "–".join(_f(x) for x in sorted(runs)), cell, share)
        )
    full = dc["edgebus"]["cpu_us"]
    goal = 1.5 * dc["umqtt_qos1"]["cpu_us"]

    def us(x):
        return "%.0f" % x

    return _t(
        "device_cost_split",
        rows="\n".join(rows),
        full=us(full),
        goal=us(goal),
        over=us(full - goal),
        link=us(d["seal_off"]),
        share=us(100 * d["seal_off"] / full),
        crypto=us(d["seal_mac"] + d["edgebus"]),
        timers=us(d["link_idle"]),
        status=us(d["status_off"]),
        acks=us(d["acks_off"]),
        rest=us(d["seal_off"] - d["link_idle"] - d["status_off"] - d["acks_off"]),
    )


def _device_setup(eb, dc):
    """The device_cost_setup block: the uplink's heap step by step and the
    bytes before the first reading, message by message."""
    st = eb["heap_steps"]
    status = st["items"]["Link.publish_status"]
    return _t(
        "device_cost_setup",
        ring=_n(st["spool"]),
        setup_rows="\n".join(_device_setup_rows(dc)),
        heap_rows="\n".join(_device_heap_rows(st)),
        status=_n(status),
        without_status="%.1f KB" % ((eb["heap"] - status) / 1024),
        messages="\n".join(_device_message_rows(eb["messages"])),
        hello=_device_fields(eb["messages"], "out", "HELLO"),
        hello_ack=_device_fields(eb["messages"], "in", "HELLO_ACK"),
    )


DEVICES = (
    ("edgebus", "edgebus: sealed, encrypted, acks on, into the bridge's log"),
    ("umqtt_qos0", "umqtt.simple, QoS 0"),
    ("umqtt_qos1", "umqtt.simple, QoS 1"),
)
# The parts of the uplink's heap measured around each call (bridge_device.py's
# PARTS): the step they fall in, and what they are.
DEVICE_PARTS = (
    ("link", "spool", "the spool's object beside its ring"),
    ("link", "handshake.init", "`handshake.init`: the handshake's state"),
    ("link", "tx.init", "`tx.init`: the sending side's state"),
    ("link", "rx.init", "`rx.init`: the receiving side's state"),
    ("link", "calls.init", "`calls.init`"),
    ("open", "asyncio.stream", "`asyncio.stream`, imported by `open_connection`"),
    ("up", "seal.start", "`seal.start`: the session's keys and HMAC states"),
    ("up", "Link.publish_status", "`Link.publish_status`: the link's status retained on the bus"),
    ("up", "tx.observe", "`tx.observe`: the export observer, a bus feed of `out_queue` slots"),
    ("up", "handshake.hello", "`handshake.hello`: the HELLO, kept (`_mine`, `_hs`) for answers"),
    ("up", "Connection.derive", "`Connection.derive`: the importer's bus connection"),
    ("up", "calls.send_routes", "`calls.send_routes`: the routes offered"),
)
DEVICE_STEPS = (
    ("link", None, "`Link()` made (its ring not counted)"),
    ("transport", "link", "`MqttTransport()` made"),
    ("open", "transport", "`open()`: TCP, CONNECT, SUBSCRIBE, presence"),
    ("up", "open", "the session up (0.2 s after: routes and snapshots exchanged)"),
    ("acked", "up", "every reading acknowledged"),
)


def _device_setup_rows(dc):
    """The heap and the bytes until the first reading, each device beside the others."""
    cells = {}
    for key, _ in DEVICES:
        r = dc[key]
        h = r["heap_all"]
        cells[key] = (
            "%.1f (%.1f–%.1f)" % (r["heap"] / 1024, min(h) / 1024, max(h) / 1024),
            "%s / %s" % (_spread(r["bytes_out"]), _spread(r["bytes_in"])),
        )
    return [
        "| uplink heap with the session up, KB (runs) | %s | ≤ 10 |"
        % " | ".join(cells[k][0] for k, _ in DEVICES),
        "| bytes out / in from connect until the first reading | %s | measured, justified |"
        % " | ".join(cells[k][1] for k, _ in DEVICES),
    ]


def _spread(xs):
    """The median of xs, and their range when they differ."""
    m = _n(sorted(xs)[len(xs) // 2])
    return m if min(xs) == max(xs) else "%s (%s–%s)" % (m, _n(min(xs)), _n(max(xs)))


def _device_heap_rows(st):
    """edgebus's heap step by step, with the parts measured within each."""
    items = dict(st["items"], spool=st["items"]["spool"] - st["spool"])
    rows = []
    for step, before, name in DEVICE_STEPS:
        kept = st[step] - (st[before] if before else st["spool"])
        parts = [(items[k], what) for s, k, what in DEVICE_PARTS if s == step]
        rest = kept - sum(b for b, _ in parts)
        text = "; ".join("%s %s" % (what, _n(b)) for b, what in sorted(parts, reverse=True))
        if parts:
            text += "; the rest %s" % _n(rest)
        rows.append("| %s | %s | %s |" % (name, _n(kept), text))
    rows.append("| **all** | **%s** | |" % _n(st["acked"] - st["spool"]))
    return rows


def _device_message_rows(messages):
    """edgebus's messages until its first reading: what each is and its bytes."""
    rows = []
    for m in messages:
        what = m["mqtt"]
        if "frame" in m:
            what = "link %s" % m["frame"]
        elif "topic" in m:
            what = "PUBLISH `%s`" % m["topic"]
        link = (
            "%d / %d / %d / %d" % (m["mqtt_head"], m["framing"], m["seal"], m["body"])
            if "frame" in m
            else ""
        )
        rows.append("| %s | %s | %s | %s |" % (m["dir"], what, _n(m["bytes"]), link))
    for d in ("out", "in"):
        ms = [m for m in messages if m["dir"] == d]
        link = sum(m["bytes"] for m in ms if "frame" in m)
        rows.append(
            "| %s | **all**: MQTT's own / the link's | **%s** | %s / %s |"
            % (d, _n(sum(m["bytes"] for m in ms)), _n(sum(m["bytes"] for m in ms) - link), _n(link))
        )
    return rows


def _device_fields(messages, d, frame):
    """A handshake frame's JSON, field by field: `name` bytes, ..."""
    for m in messages:
        if m["dir"] == d and m.get("frame") == frame:
            return ", ".join("`%s` %d" % kv for kv in m["fields"].items())
    return "–"


def _bridge_acks(res, br):
    a = br.get("acks")
    if not a:
        return []
    rows = []
    names = (
        ("off", "acks off, no log"),
        ("on", "acks on, no log (ACK on delivery)"),
        ("log_off", "acks off, bridge writing its log"),
        ("log_on", "acks on, bridge writing its log (ACK after the group commit)"),
    )
    for k, name in names:
        r = a[k]
        if r.get("lost"):
            name += " (%s of %s dropped past its share of the queue, counted)" % (
                _f(r["lost"]),
                _f(r["sent"]),
            )
        rows.append(
            "| %s | %s | %s | %.2f× | %s µs | %s | %s |"
            % (
                name,
                _mmm(r["msgs_per_s"]),
                "%.2f×" % r["of_off"] if "of_off" in r else "1×",
                r["of_paho"],
                _mmm(r["rx_cpu_us_per_msg"]),
                _mmm(r["acked_msgs_per_s"]) if "acked_msgs_per_s" in r else "",
                _f(r["acks_in"]) if r["acks_in"] else "",
            )
        )
    L = [""] + _t(
        "bridge_acks",
        rows="\n".join(rows),
        paho_rate=_mmm(br["paho_msgs_per_s"]),
        paho_cpu=_mmm(br["rx_cpu_us_per_msg"]["paho"]),
    )
    pl = br["paced_latency"]
    al = br.get("paced_ack_latency")
    if al:
        c20 = None
        for r in (res.get("log") or {}).get("by_commit_ms", []):
            if r["commit_ms"] == 20:
                c20 = r
        appender = (
            _block(
                _t(
                    "bridge_ack_appender",
                    p50="%.1f" % c20["latency_p50_ms"]["median"],
                    p99="%.1f" % c20["latency_p99_ms"]["median"],
                )
            )
            if c20
            else ""
        )
        L += [""] + _t(
            "bridge_ack_latency",
            rate="%d" % pl["rate"],
            messages=_n(br["paced_messages"]),
            bus="%.2f / %.2f" % (al["bus"]["p50_ms"], al["bus"]["p99_ms"]),
            log="%.1f / %.1f" % (al["log"]["p50_ms"], al["log"]["p99_ms"]),
            appender=appender,
            host_bus="%.2f / %.2f" % (pl["edgebus_log"]["p50_ms"], pl["edgebus_log"]["p99_ms"]),
        )
    ps = br["paho_msgs_per_s"]
    if ps["max"] > 1.5 * ps["min"]:
        L += [""] + _t(
            "bridge_noisy",
            cpus=res["meta"]["cpus"],
            low=_f(ps["min"]),
            high=_f(ps["max"]),
            reps="%d" % br["reps"],
        )
    ahead = [k for k in ("on", "log_on") if a[k]["of_off"] > 1]
    if ahead:

        def cpu(k):
            off = a[k.replace("on", "off")]["rx_cpu_us_per_msg"]["median"]
            return "%+.0f%% %s" % (
                100 * (a[k]["rx_cpu_us_per_msg"]["median"] / off - 1),
                "without the log" if k == "on" else "with it",
            )

        L += [""] + _t(
            "bridge_acks_ahead",
            ratios=", ".join("%.2f×" % a[k]["of_off"] for k in ahead),
            cpu=" and ".join(cpu(k) for k in ("on", "log_on")),
        )
    if "retransmitted" in a["on"]:
        L += [""] + _t(
            "bridge_retransmitted",
            no_log="%d" % a["on"]["retransmitted"],
            log="%d" % a["log_on"]["retransmitted"],
        )
    return L + [""] + _t("bridge_acks_cost")


def _bridge_seal(br):
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
                _mmm(r["msgs_per_s"]),
                "%.2f×" % r["of_unsealed"] if "of_unsealed" in r else "1×",
                r["of_paho"],
                _mmm(r["rx_cpu_us_per_msg"]),
            )
        )
    return [""] + _t(
        "bridge_seal",
        rows="\n".join(rows),
        paho_rate=_mmm(br["paho_msgs_per_s"]),
        paho_cpu=_mmm(br["rx_cpu_us_per_msg"]["paho"]),
    )


# The commands of the small-fleet benchmark (dev/bench/spark_commands.py), as the table says them.
_COMMANDS = (
    ("bare", "a bare PySpark session: start, count `spark.range(10)`, stop (the baseline)", ""),
    ("ingest", "`edgebus ingest --once` into a fresh table and checkpoint", "≤ 1.3×"),
    ("ingest_no_audit", "the same without the delivery audit (`--no-audit`)", ""),
    ("report", "`edgebus report` (pyarrow, no JVM)", "≤ 0.25×"),
    ("report_plot", "`edgebus report --plot` (pyarrow, no JVM)", "≤ 3 s"),
    ("report_spark", "`edgebus report --spark`", ""),
    ("infer", "`edgebus views infer` (pyarrow, no JVM)", ""),
    ("infer_spark", "`edgebus views infer --spark`", ""),
)


def _commands_section(c):
    """Section 5's small fleet: each command's wall time beside a bare session."""
    if not c:
        return []
    rows = [
        "| %s | %s | %.2f× | %s |"
        % (what, _mmm(c["seconds"][k], " s"), c["vs_bare"][k], goal or "")
        for k, what, goal in _COMMANDS
        if k in c["seconds"]
    ]
    return _t("spark_commands", records=_n(c["records"]), rounds=c["rounds"], rows="\n".join(rows))


def _spark_section(sp):
    if not sp or "spark_parquet_rows_per_s" not in sp:  # results of the version-1 benchmark
        return []
    j = sp["spark_json_rows_per_s"]

    def ratio(key):
        return "%.2f" % (sp[key]["median"] / j["median"])

    parquet_job = (
        _block(
            _t(
                "spark_parquet_job",
                rate=_mmm(sp["parquet_job_rows_per_s"]),
                ratio="%.2f" % sp["parquet_job_ratio_median"],
            )
        )
        if "parquet_job_rows_per_s" in sp
        else ""
    )
    return _t(
        "spark",
        records=_n(sp["records"]),
        master=sp["master"],
        v2_bytes=_n(sp["log_v2_bytes"]),
        v1_bytes=_n(sp["log_v1_bytes"]),
        json_bytes=_n(sp["json_bytes"]),
        v2_rate=_mmm(sp["edgebus_rows_per_s"]),
        v2_ratio=ratio("edgebus_rows_per_s"),
        v1_rate=_mmm(sp["edgebus_v1_rows_per_s"]),
        v1_ratio=ratio("edgebus_v1_rows_per_s"),
        json_rate=_mmm(j),
        json_ratio=ratio("spark_json_rows_per_s"),
        parquet_rate=_mmm(sp["spark_parquet_rows_per_s"]),
        parquet_ratio=ratio("spark_parquet_rows_per_s"),
        job_rate=_mmm(sp["ingest_job_rows_per_s"]),
        job_ratio="%.2f" % sp["job_ratio_median"],
        json_job_rate=_mmm(sp["json_job_rows_per_s"]),
        running=_block(_spark_running(sp)),
        parquet_job=parquet_job,
        stages=_block(_spark_stages(sp.get("job_stages"))),
        writer_v1="%.2f" % sp["writer_cpu_us_per_record_v1"],
        writer_v2="%.2f" % sp["writer_cpu_us_per_record_v2"],
        seal_s="%g" % sp["fresh_segment_seconds"],
        trigger_s="%g" % sp["fresh_trigger_interval_s"],
        fresh_records="%d" % sp["fresh_records"],
        fresh_batches="%d" % sp["fresh_batches"],
        p50="%.1f" % sp["publish_to_queryable_p50_s"],
        p99="%.1f" % sp["publish_to_queryable_p99_s"],
        max="%.1f" % sp["publish_to_queryable_max_s"],
    )


def _spark_running(sp):
    """The long-running job's rows: rows/s in micro-batches, and query starts."""
    if "running_ratio_median" not in sp:
        return []
    return _t(
        "spark_running",
        run_rate=_mmm(sp["ingest_job_running_rows_per_s"]),
        run_ratio="%.2f" % sp["running_ratio_median"],
        json_run_rate=_mmm(sp["json_job_running_rows_per_s"]),
        start=_mmm(sp["ingest_job_start_s"]),
        json_start=_mmm(sp["json_job_start_s"]),
    )


def _spark_stages(st):
    """Where the jobs' time goes: the table of spark_bench's job_stages."""
    if not st:
        return []
    rows = []
    for name, what in (("ingest_job", "`edgebus ingest`"), ("json_job", "JSON-source job")):
        s = st[name]
        rows.append(
            "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %s |"
            % (
                what,
                s["read"]["add_batch_s"],
                s["dedup"]["add_batch_s"],
                s["full"]["add_batch_s"],
                s["full"]["wall_s"],
                s["full"]["outside_batches_s"],
                "%.2f" % s["full"]["start_s"] if "start_s" in s["full"] else "",
            )
        )
    js = st["json_job"]
    write = js["full"]["add_batch_s"] - js["dedup"]["add_batch_s"]
    bound = (
        _t(
            "spark_write_bound",
            write="%.2f" % write,
            wall="%.2f" % js["full"]["wall_s"],
            bound="%.2f" % (js["full"]["wall_s"] / write),
        )
        if write > 0
        else []
    )
    return _t("spark_stages", rows="\n".join(rows), write_bound=_block(bound))


def _log_section(res):
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
                _mmm(r["records_per_s"]),
                r["records_per_s"]["median"] / base,
                _mmm(r["latency_p50_ms"]),
                _mmm(r["latency_p99_ms"]),
                r["syncs_per_s_paced"],
            )
        )
    return _t(
        "log",
        records_tp=_n(lg["records_tp"]),
        records_latency=_n(lg["records_latency"]),
        rate="%d" % lg["rate_paced"],
        fsync_p50="%.2f" % f["p50"],
        fsync_p99="%.2f" % f["p99"],
        no_sync=_mmm(lg["no_sync_records_per_s"]),
        rows="\n".join(rows),
        syncs_0="%.0f" % lg["by_commit_ms"][0]["syncs_per_s_paced"],
    )


def _ms_pair(a, b):
    return "%s / %s" % ("–" if a is None else _f(a), "–" if b is None else _f(b))


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


def _swarm_section(sw):
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

    def row(what, fn):
        L.append("| %s | %s |" % (what, " | ".join(fn(f) for _, _, f in cols)))

    row(
        "outage / steady readings before it and after its drain, s",
        lambda f: "%s / %s" % (_f(f["outage_s"]), _f(f["steady_s"])),
    )
    row("devices with a session / all", lambda f: "%s / %s" % (_f(f["ever_up"]), _f(f["devices"])))
    row(
        "all sessions up, s from the first start",
        lambda f: "–" if f["sessions_up_s"] is None else _f(f["sessions_up_s"]),
    )
    row(
        "sessions the devices counted / the bridge's (above the devices: churn)",
        lambda f: (
            "%s / %s"
            % (
                _f(f["sessions"]),
                _f(f.get("bridge_links", {}).get("sessions")) if "bridge_links" in f else "–",
            )
        ),
    )
    row("readings sent / acknowledged", lambda f: "%s / %s" % (_f(f["sent"]), _f(f["acked"])))
    row(
        "**acknowledged readings missing from the log**",
        lambda f: "**%s**" % _f(f["check"]["acked_missing"]),
    )
    row(
        "readings missing, not acknowledged (still spooled + evicted)",
        lambda f: (
            "%s + %s" % (_f(f["check"]["spooled_missing"]), _f(f["check"]["evicted_missing"]))
        ),
    )
    row("duplicates in the log", lambda f: _f(f["check"]["duplicates"]))
    row(
        "flush after the outage drained, s from the broker's restart",
        lambda f: (
            "–"
            if not f["outage_s"]
            else "not in time"
            if f["drain_s"] is None
            else _f(f["drain_s"])
        ),
    )
    row(
        "ACK p50 / p99, ms (readings published with a session up, acknowledged before the outage)",
        lambda f: _ms_pair(f["ack_p50_ms"], f["ack_p99_ms"]),
    )
    row(
        "ACK p50 / p99, ms (the same, acknowledged once it began)",
        lambda f: _ms_pair(f.get("ack_after_p50_ms"), f.get("ack_after_p99_ms")),
    )
    row(
        "ACK p50 / p99, ms (readings published with none: spooled)",
        lambda f: _ms_pair(f["ack_spooled_p50_ms"], f["ack_spooled_p99_ms"]),
    )
    row(
        "CPU, share of one core: the bridge (its workers together) / the devices' processes "
        "/ mosquitto",
        lambda f: " / ".join(
            "–" if f.get(k) is None else "%.0f%%" % (100 * f[k])
            for k in ("bridge_core_share", "devices_core_share", "broker_core_share")
        ),
    )
    row(
        "the machine's cores busy (all processes)",
        lambda f: "–" if f.get("machine_busy") is None else "%.0f%%" % (100 * f["machine_busy"]),
    )
    row("the limit", _limit)
    row(
        "bridge RSS per device: configured / with its session up",
        lambda f: (
            "–"
            if f.get("rss_per_device_kib") is None
            else "%s / %s KiB" % (_f(f["rss_per_configured_kib"]), _f(f["rss_per_device_kib"]))
        ),
    )
    row("bridge peak RSS", lambda f: _f(f["bridge_peak_rss_mib"], " MiB"))
    row("group commits/s (the log's sync points)", lambda f: _f(f["commits_per_s"]))
    row(
        "steady phase: records logged/s; CPU µs per record, the bridge / the devices",
        lambda f: (
            "–"
            if f.get("bridge_us_per_record") is None
            else "%s; %s / %s"
            % (
                _f(f["steady_records_per_s"]),
                _f(f["bridge_us_per_record"]),
                _f(f["devices_us_per_record"]),
            )
        ),
    )
    row(
        "messages mosquitto dropped (its queues past their limits)",
        lambda f: "–" if f.get("broker_dropped") is None else _f(f["broker_dropped"]),
    )
    row(
        "records the log's subscription dropped / gaps the links counted",
        lambda f: "%s / %s" % (_f(f["log_dropped"]), _f(f["gaps"])),
    )
    storm = _t("swarm_storm") if any(f.get("ramp_s") == 0 for _, _, f in cols) else []
    return _t(
        "swarm",
        workers="%d" % f0["workers"],
        spool=_n(sw.get("spool", 32768)),
        cpus=sw.get("cpus", "the"),
        table="\n".join(L),
        storm=_block(storm),
    )


def _ota_section(o):
    """Section 9: updates over the bus (dev/bench/ota_bench.py)."""
    if not o:
        return []
    one, fl, bd = o["mqtt_one"], o["mqtt_fleet"], o.get("board") or {}
    if "error" in bd or not bd:
        board = "not measured in this run (%s)" % bd.get("error", "no result")
    else:
        rows = []
        for r in bd.values():
            if "error" in r:  # that heap's run ended before its figures
                rows.append(
                    "| %s | not measured: %s | — | — | — | — | — |" % (_n(r["heap"]), r["error"])
                )
                continue
            rows.append(
                "| %s | %s | %s | %s | %s | %s | %s |"
                % (
                    _n(r["heap"]),
                    _f(r["transfer_s"]) + " s" if r.get("transfer_s") else "—",
                    _n(r["ready_alloc"]),
                    _n(r["transfer_alloc"]) if r.get("transfer_alloc") else "—",
                    _n(r["trial_alloc"]) if r.get("trial_alloc") else "—",
                    _f(r["seconds"]) + " s" if r.get("seconds") else "—",
                    r["outcome"].split(": ", 1)[-1],
                )
            )
        first = next((r for r in bd.values() if "error" not in r), None) or {
            "bundle_bytes": o["bundle_bytes"],
            "line_s": o["bundle_bytes"] * 10 / o["baud"],
        }
        board = _block(
            _t(
                "ota_board",
                bytes=_n(first["bundle_bytes"]),
                limit=_f(first["line_s"]),
                rows="\n".join(rows),
            )
        )
    se = o.get("serial")
    serial = _ota_serial(o, se) if se else ["The serial line is not measured in a smoke run."]
    return _t(
        "ota",
        bytes=_n(o["bundle_bytes"]),
        files=o["files"],
        one_sent=_f(one["sent_s"]),
        one_wall=_f(one["wall_s"]),
        n=o["fleet"],
        fleet_wall=_f(fl["wall_s"]),
        fleet_sent=_f(fl["sent_max_s"]),
        fleet_median=_f(fl["sent_median_s"]),
        serial=_block(serial),
        board=board,
    )


# The serial pushes' rows (dev/bench/ota_bench.SERIAL): what each sent.
OTA_PUSHES = {
    "plain": "the whole bundle as it is (`--full --no-compress`)",
    "full": "the whole bundle, compressed (`--full`)",
    "delta": "one service changed: a delta, compressed",
}


def _ota_serial(o, se):
    """Section 9's serial pushes: a row each, and the delta against the full
    push before it in the same run."""
    if "pushes" not in se:  # a result from before the pushes were several
        return ["The serial line's figures are from an older run: refresh the ota part."]
    ps = se["pushes"]
    rows = [
        "| %s | %s of %s | %s | %s s | %s s |"
        % (
            OTA_PUSHES[p["name"]],
            _n(p["sent"]),
            _n(p["total"]),
            _n(p["wire_bytes"]),
            _f(p["sent_s"]),
            _f(p["wall_s"]),
        )
        for p in ps
    ]
    pairs = [(a, b) for a, b in zip(ps, ps[1:]) if (a["name"], b["name"]) == ("full", "delta")]
    ratios = [b["sent_s"] / a["sent_s"] for a, b in pairs]
    plain = next(p for p in ps if p["name"] == "plain")
    full = pairs[0][0]
    return _t(
        "ota_serial",
        baud=_n(o["baud"]),
        rows="\n".join(rows),
        limit=_f(se["limit_s"]),
        ratio=_f(plain["sent_s"] / se["limit_s"]),
        full_pct="%.0f" % (100 * full["sent"] / full["total"]),
        changed=se["changed"],
        copied=o["files"] - 1,
        pairs=" and ".join("%.1f %%" % (100 * r) for r in ratios),
        delta_pct="%.1f" % (100 * sum(ratios) / len(ratios)),
    )


def _tls_section(t):
    """Section 10: the heap TLS costs a device (dev/bench/tls_bench.py)."""
    if not t:
        return []

    def kb(r):
        return "%d KB" % r["smallest_heap_kb"] if r.get("smallest_heap_kb") else "not bisected"

    p, s = t["plain"], t["tls"]
    rows = [
        "| %s | %s | %s | %s |" % (name, _n(r["ready_alloc"]), _n(r["session_alloc"]), kb(r))
        for name, r in (("MQTT", p), ("MQTT over TLS", s))
    ]
    if p.get("smallest_heap_kb") and s.get("smallest_heap_kb"):
        more = "+%d KB" % (s["smallest_heap_kb"] - p["smallest_heap_kb"])
    else:
        more = "—"
    rows.append(
        "| TLS costs | {:+,} | {:+,} | {} |".format(
            s["ready_alloc"] - p["ready_alloc"], s["session_alloc"] - p["session_alloc"], more
        )
    )
    return _t("tls", certs=t["certs"], readings=t["readings"], rows="\n".join(rows))


def markdown(res, out, md_dir=None):
    """BENCHMARKS.md for results res; plots go to out, linked relative to md_dir
    (the markdown's directory; default out). Section 7 is templates/board32.md as
    it is: `python -m dev.qemuheap` measures it (a firmware build per heap size,
    too slow for ./do bench)."""
    md_dir = md_dir or out
    blocks = [
        _header(res),
        _t("smoke") if res["meta"]["smoke"] else [],
        _core_cpython(res, out, md_dir),
        _core_mpy(res),
        _link(res.get("link")),
        _bridge_section(res, out, md_dir),
        _spark_section(res.get("spark")),
        _commands_section(res.get("commands")),
        _log_section(res),
        _t("board32"),
        _swarm_section(res.get("swarm")),
        _ota_section(res.get("ota")),
        _tls_section(res.get("tls")),
    ]
    text = "\n\n".join("\n".join(b) for b in blocks if b)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n") + "\n"
