"""The log's one writer: appends records, rolls and seals segments, syncs,
and applies retention (docs/telemetry-log.md section 4).  The active segment
is always in the row format; sealing writes it as Parquet (version 2, through
edgebus.tlog.columnar and pyarrow) or keeps the row file (version 1)."""

from __future__ import annotations

import fcntl
import os
import time
from typing import Any, Callable, Literal

from edgebus.tlog.durable import fsync_dir
from edgebus.tlog.errors import LogError, LogLocked
from edgebus.tlog.format import FILE_HEADER_SIZE, RECORD_HEADER_SIZE, file_header, frame
from edgebus.tlog.records import encode_record
from edgebus.tlog.recovery import recover
from edgebus.tlog.retention import retain
from edgebus.tlog.segments import (
    LOCK_NAME,
    MAX_SEGMENT_ID,
    next_segment_id,
    segment_name,
    start_offset,
)

_WRITE_BUFFER = 64 * 1024
_FSYNC_MODES = ("segment", "always", "interval")


def _check_options(
    version: int,
    gateway: str | None,
    fsync: str,
    segment_bytes: int,
    segment_seconds: float,
    retention_bytes: int | None,
    retention_seconds: float | None,
) -> None:
    """ValueError (TypeError for the gateway's type) naming a bad LogWriter option."""
    if version not in (1, 2):
        raise ValueError("version must be 1 or 2")
    if gateway is not None and type(gateway) is not str:
        raise TypeError("gateway must be a str or None")
    if fsync not in _FSYNC_MODES:
        raise ValueError("fsync must be one of %s" % (_FSYNC_MODES,))
    if segment_bytes < FILE_HEADER_SIZE + RECORD_HEADER_SIZE + 2:
        raise ValueError("segment_bytes too small")
    for name, v in (
        ("segment_seconds", segment_seconds),
        ("retention_bytes", retention_bytes),
        ("retention_seconds", retention_seconds),
    ):
        if v is not None and v < 0:
            raise ValueError("%s must be >= 0 or None" % name)


class LogWriter:
    """Appends records to the log in directory ``path`` (created if needed).

    One writer per directory (an exclusive ``flock`` on ``path/LOCK``).
    Opening recovers what a crashed writer left: its ``.open`` segment is cut
    back to the last whole valid record and sealed, or removed when it holds
    none.  ``self.recovered`` lists what was done as (file, action, detail).

    fsync: "segment" (only when sealing and on flush()), "always" (every
    append is durable when it returns), "interval" (at most fsync_interval
    seconds of appends at risk, checked on append and tick()).
    clock: wall-clock seconds (default time.time), for segment age, seal
    times (file mtime) and retention.
    version: the format of sealed segments: 2 (Parquet; positions are row
    numbers; needs pyarrow) or 1 (the row file itself; positions are byte
    offsets).  gateway: the node id written into version-2 segments.
    Not thread-safe: one caller at a time.
    """

    def __init__(
        self,
        path: str,
        segment_bytes: int = 64 * 1024 * 1024,
        segment_seconds: float = 60,
        retention_bytes: int | None = None,
        retention_seconds: float | None = None,
        fsync: str = "segment",
        fsync_interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        version: int = 2,
        gateway: str | None = None,
    ) -> None:
        _check_options(
            version,
            gateway,
            fsync,
            segment_bytes,
            segment_seconds,
            retention_bytes,
            retention_seconds,
        )
        self.path = os.path.abspath(path)
        self.segment_bytes = segment_bytes
        self.segment_seconds = segment_seconds
        self.retention_bytes = retention_bytes
        self.retention_seconds = retention_seconds
        self.fsync = fsync
        self.fsync_interval = fsync_interval
        self._clock = clock
        self.version = version
        self.gateway = gateway
        # version 2: the active segment's rows (row_of), for the seal
        self._rows: list[tuple[Any, ...]] = []
        self._fd: int | None = None  # active segment's fd
        self._active: int | None = None  # active segment id
        self._size = 0  # logical size of the active segment
        self._buf = bytearray()  # appended bytes not yet written
        self._opened_at = 0.0
        self._last_sync = 0.0
        self._unsynced = False
        self._failed: BaseException | None = None
        self._closed = False
        # (file, action, detail) of the recovery on opening
        self.recovered: list[tuple[str, str, str]] = []
        self._open()

    def _open(self) -> None:
        """Take the directory (created if needed) and its lock, recover what a
        crashed writer left, and apply retention."""
        if not os.path.isdir(self.path):
            os.makedirs(self.path, exist_ok=True)
            fsync_dir(os.path.dirname(self.path))  # make the new directory durable
        self._lock_fd = os.open(os.path.join(self.path, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LogLocked("another writer holds %s" % self.path) from None
            self.recovered = recover(self.path, self._clock, self.version, self.gateway)
            self._next_id = next_segment_id(self.path)
            if self._next_id > MAX_SEGMENT_ID:
                raise LogError("segment ids exhausted")
            self._retain()
        except BaseException:
            os.close(self._lock_fd)
            raise

    # -- state ------------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise LogError("writer is closed")
        if self._failed is not None:
            raise LogError("writer failed earlier (%r); reopen the log" % (self._failed,))

    @property
    def active_segment(self) -> int | None:
        """Id of the segment being written (its file ends in .open), or None."""
        return self._active

    def position(self) -> tuple[int, int]:
        """(segment id, offset) the next append will get if no roll happens
        first; (next segment id, FILE_HEADER_SIZE) when no segment is active."""
        if self._active is None:
            return self._next_id, start_offset(self.version)
        return self._active, self._size if self.version == 1 else len(self._rows)

    def _io(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except BaseException as e:
            self._failed = e
            raise

    # -- writing ----------------------------------------------------------

    def append(self, record: dict[str, Any]) -> tuple[int, int]:
        """Append one record (a dict with the FIELDS keys; ts_host, topic and
        payload required) and return its position (segment_id, offset).

        Validation errors raise TypeError/ValueError before anything is
        written.  The record is durable once a sync point covering it has
        completed: flush(), a seal (roll(), close(), size/time roll), or per
        the fsync mode."""
        self._check()
        body, row = encode_record(record)
        return self._io(self._append, frame(body), row)

    def _too_old(self, now: float) -> bool:
        return self.segment_seconds is not None and now - self._opened_at >= self.segment_seconds

    def _append(self, data: bytes, row: tuple[Any, ...]) -> tuple[int, int]:
        now = self._clock()
        if self._active is not None:
            if self._too_old(now) or self._size + len(data) > self.segment_bytes:
                self._seal()
        if self._active is None:
            self._create(now)
        assert self._active is not None  # for mypy: _create set it
        if self.version == 1:
            pos = (self._active, self._size)
        else:
            pos = (self._active, len(self._rows))
            self._rows.append(row)
        self._buf += data
        self._size += len(data)
        self._unsynced = True
        if self.fsync == "always":
            self._sync(now)
        elif self.fsync == "interval" and now - self._last_sync >= self.fsync_interval:
            self._sync(now)
        elif len(self._buf) >= _WRITE_BUFFER:
            self._write_out()
        return pos

    def _create(self, now: float) -> None:
        sid = self._next_id
        if sid > MAX_SEGMENT_ID:
            raise LogError("segment ids exhausted")
        fname = os.path.join(self.path, segment_name(sid, sealed=False))
        fd = os.open(fname, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            head = file_header(sid)
            os.write(fd, head)
            os.fsync(fd)
            fsync_dir(self.path)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._active, self._size = fd, sid, len(head)
        self._opened_at = self._last_sync = now

    def _write_out(self) -> None:
        assert self._fd is not None  # for mypy: called only while a segment is active
        view = memoryview(self._buf)
        done = 0
        try:
            while done < len(view):
                done += os.write(self._fd, view[done:])
        finally:
            view.release()
            del self._buf[:done]

    def _sync(self, now: float | None = None) -> None:
        self._write_out()
        assert self._fd is not None  # for mypy: called only while a segment is active
        os.fsync(self._fd)
        self._unsynced = False
        self._last_sync = self._clock() if now is None else now

    def _seal(self) -> int | None:
        sid, fd = self._active, self._fd
        assert sid is not None and fd is not None  # for mypy: a segment is active
        open_name = os.path.join(self.path, segment_name(sid, sealed=False))
        t = self._clock()
        if self.version == 2:
            # The Parquet file is complete and durable before the row file goes;
            # recovery removes a row file whose sealed segment exists already.
            from edgebus.tlog.columnar import write_segment

            write_segment(self.path, sid, self._rows, self.gateway, mtime=t)
            os.close(fd)
            os.unlink(open_name)
        else:
            self._write_out()
            os.utime(fd, (t, t))
            os.fsync(fd)
            os.close(fd)
            os.rename(open_name, os.path.join(self.path, segment_name(sid)))
        self._unsynced = False
        self._fd = self._active = None
        self._size = 0
        self._buf.clear()
        self._rows = []
        fsync_dir(self.path)
        self._next_id = sid + 1
        self._retain()
        return sid

    def flush(self) -> tuple[int, int]:
        """Sync point: write and fsync the active segment.  When it returns,
        every record appended before survives a crash (recovery seals it).
        Returns position()."""
        self._check()
        if self._active is not None:
            self._io(self._sync)
        return self.position()

    def roll(self) -> int | None:
        """Seal the active segment now (if any); returns its id or None."""
        self._check()
        if self._active is None:
            return None
        return self._io(self._seal)

    def tick(self) -> None:
        """Housekeeping for a periodic timer: seal an active segment older
        than segment_seconds, sync under fsync="interval", apply age
        retention.  Cheap when there is nothing to do."""
        self._check()

        def run() -> None:
            now = self._clock()
            if self._active is not None:
                if self._too_old(now):
                    self._seal()
                    return
                if (
                    self.fsync == "interval"
                    and self._unsynced
                    and now - self._last_sync >= self.fsync_interval
                ):
                    self._sync(now)
            if self.retention_seconds is not None:
                self._retain()

        self._io(run)

    def close(self) -> None:
        """Seal the active segment and release the lock.  Idempotent.  After a
        failure nothing more is written: the next writer's recovery seals what
        is valid on disk."""
        if self._closed:
            return
        try:
            if self._failed is None and self._active is not None:
                self._io(self._seal)
        finally:
            self._closed = True
            if self._fd is not None:
                try:
                    os.close(self._fd)
                except OSError:
                    pass
                self._fd = None
            os.close(self._lock_fd)

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    def _retain(self) -> list[int]:
        return retain(self.path, self.retention_bytes, self.retention_seconds, self._clock)
