"""The figures' formats the sections share: numbers, a run's median with its
range, and the middle of a list of runs."""


def num(x):
    """An integer with thousands separators."""
    return "{:,}".format(x)


def figure(x, unit=""):
    """A figure: three significant digits below 100, a whole number above."""
    if isinstance(x, float):
        x = ("%.3g" % x) if abs(x) < 100 else "{:,.0f}".format(x)
    else:
        x = "{:,}".format(x)
    return x + unit


def mmm(s, unit=""):
    """A summary ({median, min, max}) as median (min–max)."""
    return "%s (%s–%s)" % (figure(s["median"], unit), figure(s["min"]), figure(s["max"]))


def middle(xs):
    """The middle of xs in order (the upper one of two)."""
    return sorted(xs)[len(xs) // 2]


def p50_p99(lat, fmt):
    """A latency's p50 and p99 (ms) through fmt, e.g. "%.2f / %.2f"."""
    return fmt % (lat["p50_ms"], lat["p99_ms"])
