"""The plots BENCHMARKS.md links (when matplotlib is there): the publish cost
curve of section 1 and the bridge's latency distribution of section 4."""

import os


def _pyplot():
    """matplotlib.pyplot drawing to files, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(plt, fig, out, name):
    path = os.path.join(out, name)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def publish_curve(res, out):
    """The publish cost against stored patterns (CPython); its path, or None."""
    plt = _pyplot()
    if plt is None:
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
    return _save(plt, fig, out, "bench_publish_curve.png")


def bridge_latency(br, out):
    """The paced latency distribution (CDF) of the bridge path vs raw paho; its
    path, or None."""
    plt = _pyplot()
    if plt is None:
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
    return _save(plt, fig, out, "bench_bridge_latency.png")
