"""Exponential backoff with jitter, the one every retry uses: the link's
HELLOs and refusals, the device's uplink and WiFi, the bridge's ports,
broker and peers. Portable (CPython and MicroPython)."""

from os import urandom


def jitter(x, low=0.5):
    """x spread over low*x .. (low + 0.5)*x: a fleet's retries do not come in step."""
    return x * (low + urandom(1)[0] / 512)


def grow(x, least, cap):
    """The delay after x: doubled, at least ``least``, at most ``cap``."""
    return min(max(x * 2, least), cap)


class Backoff:
    """A retry loop's delays: from ``first``, doubling up to ``cap``, each
    jittered (``low`` as jitter's). ``next()`` is the wait before the next
    try (also kept as ``last``); ``reset()`` after a success."""

    def __init__(self, first, cap, low=0.5):
        self.first = self.cur = first
        self.cap = cap
        self.low = low
        self.last = 0

    def reset(self):
        self.cur = self.first

    def next(self):
        d = self.last = jitter(self.cur, self.low)
        self.cur = grow(self.cur, 0, self.cap)
        return d
