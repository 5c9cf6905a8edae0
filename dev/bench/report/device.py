"""Section 4, a device's cost: a reading's CPU on a MicroPython device beside
umqtt, where it goes (the variants), and the uplink's heap and bytes until its
first reading."""

from .formats import figure, middle, num
from .templates import block, fill

# The devices compared: their key in the device part's results, and their row.
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


def device_cost(dc):
    """What a reading costs a MicroPython device beside umqtt (dev/bench/device_cost.py)."""
    q1 = dc["umqtt_qos1"]["cpu_us"]
    rows = []
    for key, name in DEVICES:
        r = dc[key]
        rows.append(
            "| %s | %s (%s) | %.2f× | %s |"
            % (
                name,
                figure(r["cpu_us"]),
                "–".join(figure(x) for x in sorted(r["cpu_us_all"])),
                r["cpu_us"] / q1,
                "%.3f" % r["frames_in"],
            )
        )
    return fill(
        "device_cost",
        readings=num(dc["readings"]),
        rate="%g" % (1000 / dc["pace_ms"]),
        runs="%d" % dc["runs"],
        rows="\n".join(rows),
        # results measured before the heap and the bytes were have no block
        setup=block(_setup(dc["edgebus"], dc)) if "heap" in dc["edgebus"] else "",
        # nor those measured before the variants
        split=block(_split(dc)) if "variants" in dc else "",
    )


def _runs(dc, key):
    r = dc[key] if key in dc else dc["variants"][key]
    return r["cpu_us"], r["cpu_us_all"]


def _split(dc):
    """The device_cost_split block: the variants' CPU and their differences."""
    rows = []
    d = {}
    span = {}  # key: the rounds' lowest and highest difference
    for key, ref, what, share in DEVICE_SPLIT:
        med, runs = _runs(dc, key)
        cell = "–"
        if ref is not None:
            off = ref.startswith("-")
            other = _runs(dc, ref.lstrip("-"))[1]
            # paired by round: the variants of a round ran one after the other
            diffs = sorted((b - a) if off else (a - b) for a, b in zip(runs, other))
            h = len(diffs) // 2  # the median
            d[key] = diffs[h] if len(diffs) % 2 else (diffs[h - 1] + diffs[h]) / 2
            span[key] = (diffs[0], diffs[-1])
            cell = "%+.0f (%+.0f to %+.0f)" % (d[key], diffs[0], diffs[-1])
            cell = cell.replace("-", "−")
        rows.append(
            "| %s | %s (%s) | %s | %s |"
            % (what, figure(med), "–".join(figure(x) for x in sorted(runs)), cell, share)
        )
    full = dc["edgebus"]["cpu_us"]
    goal = 1.5 * dc["umqtt_qos1"]["cpu_us"]

    def us(x):
        return "%.0f" % x

    def said(*keys):
        """The difference of ``keys`` summed, in µs; not resolved when the
        rounds' range holds 0 (the rounds disagree on its sign)."""
        lo = sum(span[k][0] for k in keys)
        hi = sum(span[k][1] for k in keys)
        if _spans_0((lo, hi)):
            return ("not resolved (%+.0f to %+.0f µs)" % (lo, hi)).replace("-", "−")
        return "%s µs" % us(sum(d[k] for k in keys))

    return fill(
        "device_cost_split",
        rows="\n".join(rows),
        full=us(full),
        goal=us(goal),
        over=us(full - goal),
        link=us(d["seal_off"]),
        share=us(100 * d["seal_off"] / full),
        crypto=said("seal_mac", "edgebus"),
        timers=said("link_idle"),
        status=said("status_off"),
        acks=said("acks_off"),
        # less the parts the rounds resolve (an unresolved one's median is noise)
        rest=us(
            d["seal_off"]
            - sum(d[k] for k in ("link_idle", "status_off", "acks_off") if not _spans_0(span[k]))
        ),
    )


def _spans_0(r):
    """Whether the rounds' range ``r`` (lowest, highest) holds 0."""
    return r[0] <= 0 <= r[1]


def _setup(eb, dc):
    """The device_cost_setup block: the uplink's heap step by step and the
    bytes before the first reading, message by message."""
    st = eb["heap_steps"]
    status = st["items"]["Link.publish_status"]
    return fill(
        "device_cost_setup",
        ring=num(st["spool"]),
        setup_rows="\n".join(_setup_rows(dc)),
        heap_rows="\n".join(_heap_rows(st)),
        status=num(status),
        without_status="%.1f KB" % ((eb["heap"] - status) / 1024),
        messages="\n".join(_message_rows(eb["messages"])),
        hello=_fields(eb["messages"], "out", "HELLO"),
        hello_ack=_fields(eb["messages"], "in", "HELLO_ACK"),
    )


def _setup_rows(dc):
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
    m = num(middle(xs))
    return m if min(xs) == max(xs) else "%s (%s–%s)" % (m, num(min(xs)), num(max(xs)))


def _heap_rows(st):
    """edgebus's heap step by step, with the parts measured within each."""
    items = dict(st["items"], spool=st["items"]["spool"] - st["spool"])
    rows = []
    for step, before, name in DEVICE_STEPS:
        kept = st[step] - (st[before] if before else st["spool"])
        parts = [(items[k], what) for s, k, what in DEVICE_PARTS if s == step]
        rest = kept - sum(b for b, _ in parts)
        text = "; ".join("%s %s" % (what, num(b)) for b, what in sorted(parts, reverse=True))
        if parts:
            text += "; the rest %s" % num(rest)
        rows.append("| %s | %s | %s |" % (name, num(kept), text))
    rows.append("| **all** | **%s** | |" % num(st["acked"] - st["spool"]))
    return rows


def _message_rows(messages):
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
        rows.append("| %s | %s | %s | %s |" % (m["dir"], what, num(m["bytes"]), link))
    for d in ("out", "in"):
        ms = [m for m in messages if m["dir"] == d]
        link = sum(m["bytes"] for m in ms if "frame" in m)
        rows.append(
            "| %s | **all**: MQTT's own / the link's | **%s** | %s / %s |"
            % (
                d,
                num(sum(m["bytes"] for m in ms)),
                num(sum(m["bytes"] for m in ms) - link),
                num(link),
            )
        )
    return rows


def _fields(messages, d, frame):
    """A handshake frame's JSON, field by field: `name` bytes, ..."""
    for m in messages:
        if m["dir"] == d and m.get("frame") == frame:
            return ", ".join("`%s` %d" % kv for kv in m["fields"].items())
    return "–"
