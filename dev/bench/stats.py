"""Repeat-and-summarise helpers shared by the benchmarks."""

import statistics
import time


def repeat(fn, times):
    """Run fn() `times` times; each returns a figure. Returns summary dict."""
    vals = [fn() for _ in range(times)]
    return summary(vals)


def summary(vals):
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def rate(count, seconds):
    return count / seconds if seconds > 0 else float("inf")


clock = time.perf_counter
