"""The telemetry log's health (docs/telemetry-log.md section 4): the free
space on its disk watched, with a warning below ``[log] min_free_bytes``; a
log that failed (a full disk, an I/O error) said at once (status, metrics, a
line), acknowledging nothing while the devices keep their readings spooled,
reopened with the bridge's retry backoff until the disk takes writes again,
and resumed without a restart, nothing acknowledged lost and nothing logged
twice; and a restarted bridge's links resumed from what the log holds.

Functions over the appender (bridge/telemetry/appender.py, seen as ``Log``), whose
``health`` holds this part's state: the appender calls fail() when a trip
to its worker raises, recover() from its run() while failed, space() with
the free bytes each housekeeping trip finds, and close_failed() at a stop."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import tempfile
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

from edgebus.bridge.links.relay import hop_seqs
from edgebus.bridge.links.ticker import retry_backoff
from edgebus.tlog import LogWriter, last_seqs

if TYPE_CHECKING:
    from edgebus import Message
    from edgebus.bridge.config import Config
    from edgebus.bridge.telemetry.acks import Acks
    from edgebus.bridge.telemetry.flow import Flow
    from edgebus.bridge.telemetry.intake import Intake
    from edgebus.bridge.telemetry.sink import Sink
    from edgebus.bridge.telemetry.watch import LogWatch
    from edgebus.link.link import Link

log = logging.getLogger("edgebus.bridge")

# A failed log is tried again after the bridge's retry backoff, up to this
# (s), and at once when its disk gained PROBE_BYTES free since the last try:
# a disk freed waits a second at most, one that heals otherwise RETRY_CAP.
RETRY_CAP = 5.0
# Before a failed log is reopened (its recovery reads and seals the active
# segment: costly), the disk must take this much, written and synced: one
# write buffer of the writer's.
PROBE_BYTES = 64 * 1024
# While the log stays failed, or its disk low, it is said again this often (s).
REMIND_EVERY = 60.0


class Health:
    """A log's failure (why, since when, its retries), what waits for its
    resume, and its disk's free space against ``[log] min_free_bytes``
    (default: four segments, room to seal one and start the next)."""

    def __init__(self, cfg: Config) -> None:
        self.failure: str | None = None  # why the log failed; None while it works
        self.failures = 0  # times it failed
        self.retries = 0  # reopenings the disk refused since it failed
        self.resumed = 0  # times it resumed
        self.t_failed = (0.0, 0.0)  # (wall, monotonic) when it failed
        self.retry_at = 0.0  # monotonic: the next reopening
        self.free_tried = float("inf")  # free bytes at the last reopening refused
        self.backoff = retry_backoff(RETRY_CAP)  # reset by each commit made durable
        self.carry: list[Message] = []  # other traffic taken at the failure, for the resume
        self.reopened: LogWriter | None = None  # opened by the worker, not yet taken over
        self.t_reminded = float("-inf")
        self.min_free = 4 * cfg.segment_bytes if cfg.min_free_bytes is None else cfg.min_free_bytes
        self.free: int | None = None  # bytes free on the log's disk when last looked at
        self.t_low = float("-inf")  # when the low-space warning was last said

    def low(self) -> bool:
        """Whether the log's disk had less than min_free bytes free when last looked at."""
        return self.free is not None and self.free < self.min_free

    def stats(self) -> dict[str, Any]:
        f = self.failure
        return {
            "failed": f,
            "failed_since": round(self.t_failed[0], 3) if f else None,
            "retry_in": round(max(0.0, self.retry_at - time.monotonic()), 1) if f else None,
            "failures": self.failures,
            "retries": self.retries,
            "resumed": self.resumed,
            "free_bytes": self.free,
            "min_free_bytes": self.min_free,
        }


class Log(Protocol):
    """The appender (telemetry.Appender) as these functions use it: its
    parts (bridge/log*.py), its config, the bridge's links."""

    @property
    def cfg(self) -> Config: ...
    @property
    def health(self) -> Health: ...
    @property
    def links(self) -> dict[str, Link]: ...
    @property
    def intake(self) -> Intake: ...
    @property
    def sink(self) -> Sink: ...
    @property
    def acks(self) -> Acks: ...
    @property
    def flow(self) -> Flow: ...
    @property
    def watch(self) -> LogWatch: ...

    unsynced: int  # records appended since the last sync point

    def write(self, batch: list[Message]) -> None: ...


def open_log(cfg: Config) -> LogWriter:
    """A writer on the configured log, recovering what is on disk."""
    assert cfg.log_dir is not None  # for mypy: the bridge makes one only with a log
    return LogWriter(
        cfg.log_dir,
        segment_bytes=cfg.segment_bytes,
        segment_seconds=cfg.segment_seconds,
        retention_bytes=cfg.retention_bytes,
        retention_seconds=cfg.retention_seconds,
        gateway=cfg.node,
    )


def disk_free(path: str) -> int:
    """Bytes an unprivileged writer may still take on path's filesystem."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def why(e: BaseException) -> str:
    """A failure in the operator's words: "No space left on device (ENOSPC)"."""
    if isinstance(e, OSError) and e.errno is not None:
        return "%s (%s)" % (
            e.strerror or os.strerror(e.errno),
            errno.errorcode.get(e.errno, e.errno),
        )
    return str(e) or type(e).__name__


def housekeeping(sink: Sink) -> int:
    """In the worker: the writer's housekeeping (age rolls, retention),
    then the bytes free on the log's disk (for space())."""
    sink.writer.tick()
    return disk_free(sink.writer.path)


def remedy(a: Log) -> str:
    """What the operator can do about a full disk, in their words."""
    c = a.cfg
    return (
        "Free space on %s, or bound the log with [log] retention_bytes (now %s) or "
        "retention_seconds (now %s)" % (a.sink.writer.path, c.retention_bytes, c.retention_seconds)
    )


def space(a: Log, free: int) -> None:
    """The disk's free bytes: a warning below min_free (again every
    REMIND_EVERY s while it stays low), a line when it is back above."""
    h = a.health
    h.free = free
    now = time.monotonic()
    if h.low():
        if now - h.t_low >= REMIND_EVERY:
            h.t_low = now
            log.warning(
                "telemetry: the log's disk has %d bytes free, below [log] min_free_bytes "
                "(%d): when it is full the log fails and nothing is acknowledged until "
                "space is freed. %s",
                free,
                h.min_free,
                remedy(a),
            )
    elif h.t_low != float("-inf"):
        h.t_low = float("-inf")
        log.info("telemetry: the log's disk has %d bytes free again", free)


# -- a failed log ---------------------------------------------------------------


def _expect(link: Link, first: Callable[[Any, int], int | None]) -> bool:
    """Set the number a link expects next of each peer boot it takes
    numbers from (the current one, and earlier ones: HIST) to first(sid,
    what it expects now); returns whether one became None (not known)."""
    st = link.state
    boots: list[Any] = [[st.get("peer_sid"), st.get("rx_next")]]
    boots += st.get("old") or []  # [sid, next expected, generation] each (hist.py)
    unknown = False
    for i, b in enumerate(boots):
        if b[0] is None or b[1] is None:
            continue  # nothing taken from that boot yet
        n = first(b[0], b[1])
        unknown = unknown or n is None
        if i == 0:
            st["rx_next"] = n
        else:
            b[1] = n
    return unknown


def rewind(link: Link, mark: Any) -> bool:
    """When the log fails: a durable link expects again, of each peer boot,
    the number after what it last acknowledged (``mark``, rx_mark's): what
    it took past that may not be logged, and its device keeps all of it
    spooled. It holds back what comes while the log is failed, and asks for
    it again (RESEND) once it takes writes. A boot none of which was
    acknowledged yet expects whatever its device sends next: its session
    starts again, and a new session sends from the oldest reading not
    acknowledged. Returns whether the session ended."""
    acked: dict[Any, Any] = {}
    if mark is not None:
        acked[mark[0]] = mark[1]
        for sid, n in mark[2] if len(mark) > 2 else ():
            acked[sid] = n
    if _expect(link, lambda sid, cur: acked.get(sid)) and link.status == "up":
        link.end_session("the log failed: a new session sends again what it lacks")
        return True
    return False


def skip_logged(link: Link, logged: Mapping[tuple[Any, Any], int]) -> None:
    """When the log resumes: a rewound link expects, of each peer boot, no
    number the reopened log holds (``logged``, logged_seqs: what the failed
    writer had written before it failed, sealed by the recovery), so that
    its device's copies are not logged twice."""

    def first(sid: Any, cur: int) -> int:
        n = logged.get((link.link_id, sid))
        return cur if n is None else max(cur, n + 1)

    _expect(link, first)


def _unlogged(a: Log, batch: list[Message]) -> list[Message]:
    """What of ``batch`` (taken, not written, when the log failed) is still
    to be written: not a durable link's numbered frame, which its device
    sends again (rewind)."""
    out = []
    links = a.links
    for m in batch:
        o = m.origin
        link = links.get(o.link_id) if o.link_id else None
        if link is None or not link.opts.durable or type((o.extra or {}).get("seq")) is not int:
            out.append(m)
    return out


def fail(a: Log, e: BaseException) -> None:
    """The log failed (what a trip raised, or the close): nothing more is
    acknowledged; the durable links are held back (Appender.hold) and
    rewound, their devices keeping it all spooled; other traffic taken from
    the queues waits for the resume. The appender's run() recovers."""
    h = a.health
    if h.failure is not None:
        return
    now = time.monotonic()
    h.failure = why(e)
    h.failures += 1
    h.retries = 0
    h.free_tried = float("inf")
    h.t_failed = (time.time(), now)
    h.retry_at = now + h.backoff.next()
    a.flow.shut()  # every device's window: 0
    h.carry += _unlogged(a, a.intake.take(a.acks.moved))
    ended = 0
    for k, link in list(a.links.items()):
        if link.opts.durable:
            m = a.acks.acked.get(k)
            ended += rewind(link, m[0] if m else None)
    log.error(
        "telemetry: the log failed: %s: nothing more is acknowledged until it takes writes "
        "again (tried again with backoff, every %g s at most); the devices keep their "
        "readings spooled and send them again, %d link(s) start a new session for it. %s",
        h.failure,
        RETRY_CAP,
        ended,
        remedy(a),
    )
    a.intake.wake.set()


def _reopen(a: Log, link_ids: list[str]) -> tuple[LogWriter, dict[tuple[Any, Any], int]]:
    """In the worker: once the disk takes PROBE_BYTES (written, synced),
    the failed writer closed (no seal) and a new one opened, whose recovery
    seals what is valid on disk; and what the log holds of each link
    (logged_seqs). Raises while the disk refuses."""
    path = a.sink.writer.path
    with tempfile.TemporaryFile(dir=path) as f:  # no name: nothing left if we die
        f.write(bytes(PROBE_BYTES))
        f.flush()
        os.fsync(f.fileno())
    a.sink.writer.close()  # idempotent
    w = a.health.reopened = open_log(a.cfg)
    try:
        return w, logged_seqs(path, link_ids)
    except BaseException:
        a.health.reopened = None
        w.close()
        raise


async def recover(a: Log) -> None:
    """One turn of the appender's run() while the log is failed (a second at
    most, so the reminders come on time): the trips still out fail too; the
    disk's free space is looked at; at the retry's time, or at once when
    space was freed since the last retry, the log is reopened in the worker
    (refused: the next retry later, with backoff); reopened, it resumes."""
    h = a.health
    loop = asyncio.get_running_loop()
    sink = a.sink
    if sink.trips:
        await asyncio.wait(sink.trips)
        sink.trips = []
    now = time.monotonic()
    _remind(a, now)
    free = None
    try:
        free = await loop.run_in_executor(sink.pool, disk_free, sink.writer.path)
        space(a, free)
        if h.retry_at > now and free < h.free_tried + PROBE_BYTES:
            await asyncio.sleep(min(h.retry_at - now, 1.0))
            return
        w, logged = await loop.run_in_executor(sink.pool, _reopen, a, list(a.links))
    except Exception as e:
        h.retries += 1
        h.failure = why(e)
        h.free_tried = float("inf") if free is None else free
        h.retry_at = time.monotonic() + h.backoff.next()
        return
    _resume(a, w, logged)


def _resume(a: Log, w: LogWriter, logged: Mapping[tuple[Any, Any], int]) -> None:
    """The log reopened: the durable links skip what it holds (asking their
    devices for the rest as they send on, or as their holds end), the other
    traffic taken at the failure is written first, the windows open."""
    h = a.health
    a.sink.writer, h.reopened = w, None
    a.sink.position = w.position()
    for link in list(a.links.values()):
        if link.opts.durable:
            skip_logged(link, logged)
    now = time.monotonic()
    h.failure = None
    h.resumed += 1
    a.unsynced = 0
    a.watch.said(now)  # the failure's holds: said already
    carry, h.carry = h.carry, []
    if carry:
        a.write(carry)
    a.flow.pace(sweep=True)
    log.warning(
        "telemetry: the log resumed after %.1f s failed (%d retries): the devices send "
        "again what it lacks",
        now - h.t_failed[1],
        h.retries,
    )


def _remind(a: Log, now: float) -> None:
    """While the log stays failed: said again every REMIND_EVERY s."""
    h = a.health
    if now - max(h.t_failed[1], h.t_reminded) < REMIND_EVERY:
        return
    h.t_reminded = now
    log.error(
        "telemetry: the log is still failed after %.0f s (%d retries, the next in %.1f s): "
        "%s; %d data frame(s) held back so far. %s",
        now - h.t_failed[1],
        h.retries,
        max(0.0, h.retry_at - now),
        h.failure,
        a.flow.held(),
        remedy(a),
    )


def close_failed(a: Log) -> None:
    """A stop while the log is failed: the writers closed unsealed (the next
    start's recovery seals what is valid), and said. The links expect what
    they last acknowledged (rewind), so the state saved next promises the
    devices nothing the log lacks."""
    h = a.health
    if h.reopened is not None:  # reopened while the stop cancelled the wait
        h.reopened.close()
        h.reopened = None
    a.sink.writer.close()
    log.error(
        "telemetry: the log is failed (%s): closed without a seal; the next start recovers "
        "what is on disk and the devices send again what it lacks; %d message(s) of other "
        "traffic not written",
        h.failure,
        len(h.carry) + a.intake.waiting(),
    )


# -- resuming from the log ------------------------------------------------------


def logged_seqs(log_dir: str, link_ids: Iterable[str]) -> dict[tuple[Any, Any], int]:
    """{(link_id, peer boot): the highest number logged} in the newest part
    of the log (last_seqs); for the [[peer]] links among ``link_ids``, their
    own numbers, from the relayed records logged under their devices
    (hop_seqs)."""
    last: dict[tuple[Any, Any], int] = last_seqs(log_dir)
    peers = {k for k in link_ids if k.startswith("peer:")}
    if peers:
        for k, n in hop_seqs(log_dir, peers).items():
            if n > last.get(k, -1):
                last[k] = n
    return last


def resume_links(states: Mapping[str, dict[str, Any]], log_dir: str) -> int:
    """After a restart, before the links run: each link's peer state (link_id
    -> state dict) whose peer boot has records in the log expects the next
    sequence number after the last one logged, so that frames the device
    retransmits (logged, but not acknowledged before the bridge died) are
    dropped as duplicates instead of logged twice. Returns how many links.

    The log decides, also when the state file says more: the file is saved
    while frames flow, so its rx_next can be past what was made durable, and
    keeping it would drop the retransmitted frames that were never logged.
    Nothing past the log's last seq was acknowledged (an acknowledgement
    follows the sync point), so the device still holds it."""
    last = logged_seqs(log_dir, states)
    n = 0
    for link_id, st in sorted(states.items()):
        seq = last.get((link_id, st.get("peer_sid")))
        if seq is None:
            continue
        was, st["rx_next"] = st.get("rx_next"), seq + 1
        log.info(
            "log: %s resumes peer boot %s after seq %d in the log (rx_next %d, the state "
            "file had %s)",
            link_id,
            st["peer_sid"],
            seq,
            st["rx_next"],
            was,
        )
        n += 1
    return n
