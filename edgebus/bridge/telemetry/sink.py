"""The telemetry log's sink: the writer (tlog/) and the one worker thread
that is its only caller, appending, syncing and sealing (a version-2 seal
writes a whole segment as Parquet) so that neither a sync nor a seal stalls
the event loop. The loop hands the worker trips without waiting for each
(at most TRIPS in flight) and handles each result when it is back."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from edgebus import Message
    from edgebus.bridge.telemetry.records import Records
    from edgebus.link.link import Link
    from edgebus.tlog import LogWriter

log = logging.getLogger("edgebus.bridge")

# Trips to the worker in flight at once before the loop waits for one.
TRIPS = 3

# What a trip that appends returns: the count appended, (message, error) for
# each record refused, and the writer's position after it.
Written = tuple[int, list[tuple["Message", Exception]], tuple[int, int]]


class Sink:
    """The writer, its worker and what they did: ``appended`` records,
    ``errors`` (records refused: each refused to its link, Link.refuse, by
    ``links``, the bridge's dict link_id -> Link) and the writer's
    ``position``. A trip that raises goes to ``on_fail`` (health.fail)."""

    def __init__(
        self,
        writer: LogWriter,
        links: dict[str, Link],
        records: Records,
        on_fail: Callable[[BaseException], None],
    ) -> None:
        self.writer = writer
        self.links = links
        self.records = records
        self.on_fail = on_fail
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="edgebus-log")
        self.trips: list[asyncio.Future[Any]] = []  # the worker's trips not yet back, oldest first
        self.position = writer.position()
        self.appended = 0
        self.errors = 0

    def append(self, batch: list[Message], sync: bool) -> Written:
        """In the worker: append the batch, then sync if asked; returns the
        count appended and (message, error) for each record refused."""
        n = 0
        bad: list[tuple[Message, Exception]] = []
        append = self.writer.append
        record = self.records.record
        for m in batch:
            try:
                append(record(m))
                n += 1
            except (TypeError, ValueError) as e:  # a payload the log cannot hold
                bad.append((m, e))
        if sync:
            self.writer.flush()
        return n, bad, self.writer.position()

    def trip(self, fn: Callable[..., Any], *args: Any, then: Callable[[Any, float], None]) -> None:
        """fn(*args) in the worker thread, not awaited: the loop goes on taking
        and sending batches while the worker writes (on a loop that serves
        thousands of links, each await of a result costs a whole turn of it).
        The single worker keeps the trips in order; each result is handed to
        then(result, t0) on the loop (t0: when the trip left), a failure to
        on_fail."""
        fut = asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)
        t0 = time.monotonic()
        fut.add_done_callback(lambda f: self._back(f, then, t0))
        self.trips.append(fut)

    def _back(
        self, fut: asyncio.Future[Any], then: Callable[[Any, float], None], t0: float
    ) -> None:
        if fut.cancelled():
            return
        e = fut.exception()
        if e is not None:
            self.on_fail(e)
            return
        then(fut.result(), t0)

    def behind(self) -> asyncio.Future[Any] | None:
        """The oldest trip while TRIPS are in flight (the worker is behind), else None."""
        self.trips = [f for f in self.trips if not f.done()]
        return self.trips[0] if len(self.trips) >= TRIPS else None

    def written(self, r: Written) -> None:
        """An append's result, on the loop: counted, its refused records told."""
        n, bad, self.position = r
        self.refuse(bad)
        self.appended += n

    def refuse(self, bad: list[tuple[Message, Exception]]) -> None:
        """Each record refused: counted, said, and refused to its device."""
        for m, e in bad:
            self.errors += 1
            log.warning("telemetry: record for %s not written: %s", m.topic, e)
            o = m.origin
            link = self.links.get(o.link_id) if o.link_id else None
            seq = (o.extra or {}).get("seq")
            if link is not None and type(seq) is int:
                link.refuse(
                    seq, "not logged: %s" % e, o.peer_sid if o.peer_sid != link.peer_sid else None
                )
