"""Section 4: devices to the bridge through mosquitto beside raw paho: rates,
CPU and latency, then the fleet's figures and a device's cost."""

import os

from .bridge_acks import bridge_acks, bridge_seal
from .device import device_cost
from .formats import figure, mmm, num, p50_p99
from .plots import bridge_latency
from .templates import fill

# Section 4's goals against raw paho: device -> host bus, acks on, without
# and with the bridge's log.
GOAL_NO_LOG = 0.9
GOAL_LOG = 0.6


def bridge_section(res, out, md_dir):
    br = res.get("bridge")
    fl = res.get("fleet")
    dc = res.get("device")
    if not br and not fl and not dc:
        return []
    L = []
    if br:
        L += _bridge(res, br, out, md_dir)
    if fl:
        L += [""] + _fleet(res, fl)
    if dc:
        L += [""] + device_cost(dc)
    return L


def _bridge(res, br, out, md_dir):
    """The bridge part's blocks: its figures, the acks' and the seal's tables,
    the latency plot, and the notes its figures call for."""
    pl, bl, cpu = br["paced_latency"], br["burst_latency"], br["rx_cpu_us_per_msg"]
    lean = "mqtt_conn" in cpu
    L = fill(
        "bridge",
        reps="%d" % br["reps"],
        messages=num(br["messages"]),
        eb_rate=mmm(br["edgebus_msgs_per_s"]),
        paho_rate=mmm(br["paho_msgs_per_s"]),
        ratio="%.2f" % br["ratio"],
        eb_cpu=mmm(cpu["edgebus"]),
        paho_cpu=mmm(cpu["paho"]),
        lean_rate=mmm(br["mqtt_conn_msgs_per_s"]) if lean else "not run",
        lean_cpu=mmm(cpu["mqtt_conn"]) if lean else "not run",
        lean_ratio="%.2f" % (cpu["mqtt_conn"]["median"] / cpu["paho"]["median"]) if lean else "–",
        rate="%d" % pl["rate"],
        eb_paced=p50_p99(pl["edgebus"], "%.2f / %.2f"),
        paho_paced=p50_p99(pl["paho"], "%.2f / %.2f"),
        eb_burst=p50_p99(bl["edgebus"], "%.1f / %.1f"),
        paho_burst=p50_p99(bl["paho"], "%.1f / %.1f"),
        mpy_rate=mmm(br["micropython_msgs_per_s"]),
        mpy_messages=num(br["mpy_messages"]),
        mpy_paced=p50_p99(pl["micropython"], "%.2f / %.2f"),
        gaps="%d" % br["gaps"],
    )
    L += bridge_acks(res, br)
    L += bridge_seal(br)
    png = bridge_latency(br, out)
    if png:
        L += ["", "![bridge latency distribution](%s)" % os.path.relpath(png, md_dir)]
    L += [""] + fill("bridge_profile")
    return L + _behind(br)


def _behind(br):
    """The notes when edgebus is behind paho: its paced latency, or its rate
    below the goal without the log."""
    pl, cpu = br["paced_latency"], br["rx_cpu_us_per_msg"]
    L = []
    if pl["edgebus"]["p50_ms"] > pl["paho"]["p50_ms"]:
        L += [""] + fill(
            "bridge_behind_latency", times="%.1f" % (pl["edgebus"]["p50_ms"] / pl["paho"]["p50_ms"])
        )
    a = br.get("acks") or {}
    if br["ratio"] < GOAL_NO_LOG and "log_on" in a:
        L += [""] + fill(
            "bridge_behind_goal",
            ratio="%.2f" % br["ratio"],
            log_ratio="%.2f" % a["log_on"]["of_paho"],
            eb_cpu=figure(cpu["edgebus"]["median"]),
            log_cpu=figure(a["log_on"]["rx_cpu_us_per_msg"]["median"]),
            paho_cpu=figure(cpu["paho"]["median"]),
        )
    return L


def _fleet(res, fl):
    """The fleet part's block (dev/bench/fleet_bench.py)."""
    L = fill(
        "bridge_fleet",
        devices="%d" % fl["devices"],
        heap=fl["heap"],
        period="%g" % fl["period_s"],
        cpus=res["meta"]["cpus"],
        window="%g" % fl["window_s"],
        offered=figure(fl["offered_per_s"]),
        sent=mmm(fl["sent_per_s"]),
        arrived=mmm(fl["msgs_per_s"]),
        loss="%.2f" % (100 * fl["loss"]),
        gaps="%d" % fl["gaps"],
        bridge_core=mmm({k: 100 * v for k, v in fl["bridge_core_share"].items()}, "%"),
    )
    if fl["devices"] >= 50:
        L += [""] + fill("bridge_fleet_rate")
    return L
