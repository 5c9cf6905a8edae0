"""Section 2: the core on MicroPython: its heap, its speed beside a naive bus
(with the native emitter's runs), the device's heap, and the emulated 32-bit
board's runs."""

from .formats import figure, middle
from .templates import block, fill

# (subscribers, the goal for edgebus against the naive bus) of the speed rows
SPEED = ((1, "≥ 1.0×"), (10, "≥ 1.5×"))


def _med(runs, key):
    """The middle run's value of key."""
    return middle([r[key] for r in runs])


def core_mpy(res):
    if "core_mpy" not in res:
        return []
    mp = res["core_mpy"]
    runs = mp["runs"]
    dv = mp.get("device")
    device = (
        fill(
            "core_mpy_device",
            smallest="%s KB" % dv["smallest_heap_kb"]
            if dv["smallest_heap_kb"]
            else "(full run only)",
            code=figure(dv["code"]),
            data=figure(dv["data_at_ready"]),
        )
        if dv
        else []
    )
    speed = _speed_rows(runs, mp.get("native_runs") or [])
    return fill(
        "core_mpy",
        import_core=figure(_med(runs, "import_core")),
        import_asyncio=figure(_med(runs, "import_asyncio")),
        per_subscription=figure(_med(runs, "per_subscription_q8")),
        per_retained=figure(_med(runs, "per_retained_topic")),
        per_endpoint=figure(_med(runs, "per_endpoint_q1")),
        alloc_1=figure(_med(runs, "alloc_per_publish_1sub")),
        alloc_10=figure(_med(runs, "alloc_per_publish_10subs")),
        max_subs=figure(mp["max_subscriptions_q8_in_64K"])
        if mp.get("import_core_in_64K") is not None
        else "0: the core did not import in this run's 64 KB heap",
        device=block(device),
        speed="\n".join(speed),
        board=block(_core_board(mp.get("board"), _med(runs, "alloc_per_publish_1sub"))),
    )


def _speed_rows(runs, nat):
    """The unix port's speed rows: edgebus (bytecode, native when measured)
    beside the naive bus."""
    speed = []
    for n, goal in SPEED:
        k = "msgs_per_s_%dsub" % n
        e, b = _med(runs, k), _med(runs, "naive_" + k)
        if nat:
            x = middle([r[k] / r["naive_" + k] for r in nat])
            xe = _med(nat, k)
            speed.append(
                "| %d | %s | %s | %s | %.2f× | **%.2f×** | %s |"
                % (n, figure(e), figure(xe), figure(b), e / b, x, goal)
            )
        else:
            speed.append(
                "| %d | %s | – | %s | %.2f× | – | %s |" % (n, figure(e), figure(b), e / b, goal)
            )
    return speed


def _core_board(bd, unix_alloc_1):
    """The core_mpy_board block: the emulated board's speed runs (ratio per
    run, the median's msgs/s), or the line saying why there are none."""
    if not bd:
        return []
    if "error" in bd:
        return ["On the emulated 32-bit board: not measured in this run (%s)." % bd["error"]]
    runs = bd["runs"]
    speed = []
    for n, goal in SPEED:
        ratios = sorted(r["msgs_per_s_%dsub" % n] / r["naive_msgs_per_s_%dsub" % n] for r in runs)
        e, b = _med(runs, "msgs_per_s_%dsub" % n), _med(runs, "naive_msgs_per_s_%dsub" % n)
        spread = "" if len(runs) < 2 else " (runs %.3f–%.3f)" % (ratios[0], ratios[-1])
        speed.append(
            "| %d | %s | %s | %.2f×%s | %s |"
            % (n, figure(e), figure(b), middle(ratios), spread, goal)
        )
    return fill(
        "core_mpy_board",
        heap=bd["heap"] // 1024,
        nruns=len(runs),
        mips="%.0f" % (1000 / 2 ** bd["icount_shift"]),
        shift=bd["icount_shift"],
        speed="\n".join(speed),
        alloc_1=figure(_med(runs, "alloc_per_publish_1sub")),
        alloc_10=figure(_med(runs, "alloc_per_publish_10subs")),
        unix_alloc_1=figure(unix_alloc_1),
        seconds="%.0f" % bd["seconds"],
    )
