"""The broker's own count of the messages it dropped, as the bridge reports
it: since the bridge connected, with a warning at most every WARN_EVERY s.

Mosquitto counts, in $SYS, the messages it dropped for queues past their
limits (max_queued_messages: QoS 0 messages to a client that reads too
slowly, such as a bridge behind on a fleet's frames). Frames lost there are
lost to the links too (retransmissions, a handshake retried), so the bridge
says so. A broker without it (or refusing $SYS) leaves the figure out."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("edgebus.bridge")

TOPIC = "$SYS/broker/publish/messages/dropped"
WARN_EVERY = 10.0


class BrokerDrops:
    """What the broker dropped since the bridge connected (``count``; None:
    the broker has not said)."""

    def __init__(self) -> None:
        self.count: int | None = None
        self._base: int | None = None  # the broker's count when we connected (from its start)
        self._warned = (float("-inf"), 0)  # (when, count) at the last warning

    def connected(self) -> None:
        """A new connection: the broker's next figure sets the base again."""
        self._base = None

    def heard(self, payload: bytes | bytearray) -> None:
        """A message on TOPIC."""
        try:
            n = int(payload)
        except ValueError:
            return
        if self._base is None or n < self._base:  # new connection or broker
            self._base = n - (self.count or 0)
        self.count = n - self._base
        now = time.monotonic()
        t, seen = self._warned
        if self.count > seen and now - t >= WARN_EVERY:
            log.warning(
                "mqtt: the broker dropped %d message(s) since the last warning (%d in "
                "all): its queue for a slow client was full. Device frames lost there "
                "come again (retransmissions, handshakes retried) at a cost; for a "
                "fleet give the broker room (mosquitto: max_queued_messages, docs/bridge.md "
                '"Running 10,000 devices")',
                self.count - seen,
                self.count,
            )
            self._warned = (now, self.count)
