"""The bridge's durable telemetry log: segmented, append-only, checksummed.

The daemon appends chosen host-bus messages with :class:`LogWriter`; readers
(the PySpark data source, tools, tests) use :func:`list_segments`,
:func:`read_segment`, :func:`read_log` and :func:`latest_offset`.  The on-disk
format and every promise made to readers are specified in
``docs/telemetry-log.md``; this module is its reference implementation.

Host only (CPython >= 3.11, POSIX: ``fcntl``, ``fsync`` of directories).
Standard library only; nothing here ever unpickles or evaluates data.
"""
import base64
import binascii
import fcntl
import json
import math
import os
import re
import struct
import time
import zlib

__all__ = [
    "FORMAT_VERSION", "FILE_HEADER_SIZE", "RECORD_HEADER_SIZE", "MAX_BODY_BYTES",
    "FIELDS", "LogError", "LogLocked", "LogWriter", "ReadStats",
    "record_from_message", "encode_value", "decode_value", "topic_text",
    "segment_name", "list_segments", "read_segment", "read_log",
    "latest_offset", "earliest_offset",
]

FORMAT_VERSION = 1

# File header: magic, format version, flags (0), segment id, CRC-32 of bytes 0..15.
FILE_MAGIC = b"\xffEBL"
_FILE_HDR = struct.Struct(">4sHHQI")
FILE_HEADER_SIZE = _FILE_HDR.size          # 20

# Record header: magic, format version, body length, CRC-32 over header bytes
# 0..9 (magic, version, length) followed by the body.  0xFF never occurs in
# UTF-8, so a record magic can never appear inside a valid body.
RECORD_MAGIC = b"\xffEBR"
_REC_HDR = struct.Struct(">4sHII")
RECORD_HEADER_SIZE = _REC_HDR.size         # 14
MAX_BODY_BYTES = 16 * 1024 * 1024

# The body's members, in the order the writer emits them.
FIELDS = ("ts_host", "topic", "payload", "ts_device", "seq", "origin_kind", "conn_id",
          "principal", "link_id", "peer_node", "peer_sid", "generation", "extra")
_REQUIRED = ("ts_host", "topic", "payload")
_STR_FIELDS = ("origin_kind", "conn_id", "principal", "link_id", "peer_node", "peer_sid")
_INT_FIELDS = ("seq", "generation")

_SEG_RE = re.compile(r"^([0-9]{20})\.seg\Z")
_OPEN_RE = re.compile(r"^([0-9]{20})\.seg\.open\Z")
_ANY_ID_RE = re.compile(r"^([0-9]{20})\.seg")
LOCK_NAME = "LOCK"
_MAX_ID = 2 ** 64 - 1
_CHUNK = 1 << 20
_WRITE_BUFFER = 64 * 1024
_FSYNC_MODES = ("segment", "always", "interval")


class LogError(Exception):
    """The log directory is in a state the writer will not touch, or the
    writer failed an I/O operation earlier and must be reopened."""


class LogLocked(LogError):
    """Another writer holds the directory's lock."""


# ---------------------------------------------------------------------------
# Values: JSON with two tags ($b64 for bytes, $lit to escape)

def _is_int(v):
    return type(v) is int


def _is_num(v):
    return (type(v) is int) or (type(v) is float and math.isfinite(v))


def encode_value(v):
    """A payload/extra value as a JSON-model value (see the doc, "Values").

    bytes-like values become ``{"$b64": "..."}``; a one-member object whose
    key starts with ``$`` is escaped as ``{"$lit": {...}}``; tuples become
    arrays.  Anything else JSON cannot hold exactly raises TypeError or
    ValueError."""
    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return v
    if t is float:
        if not math.isfinite(v):
            raise ValueError("non-finite float %r cannot be logged" % (v,))
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$b64": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                raise TypeError("object keys must be str, not %s" % type(k).__name__)
            out[k] = encode_value(x)
        if len(out) == 1:
            (k,) = out
            if k.startswith("$"):
                return {"$lit": out}
        return out
    if isinstance(v, (list, tuple)):
        return [encode_value(x) for x in v]
    # Subclasses (IntEnum, str enums, ...) are logged as their base value.
    for base in (bool, int, float, str):
        if isinstance(v, base):
            return encode_value(base(v))
    raise TypeError("cannot log a value of type %s" % t.__name__)


def decode_value(v):
    """Inverse of :func:`encode_value` on a value parsed from JSON."""
    t = type(v)
    if t is list:
        return [decode_value(x) for x in v]
    if t is dict:
        if len(v) == 1:
            (k,) = v
            if k.startswith("$"):
                x = v[k]
                if k == "$b64":
                    if type(x) is not str:
                        raise ValueError("$b64 value must be a string")
                    return base64.b64decode(x.encode("ascii"), validate=True)
                if k == "$lit":
                    if type(x) is not dict:
                        raise ValueError("$lit value must be an object")
                    return {kk: decode_value(xx) for kk, xx in x.items()}
                raise ValueError("unknown tag %r" % k)
        return {k: decode_value(x) for k, x in v.items()}
    return v


def topic_text(tokens):
    """The 'a/b/c' form of a topic token sequence (ints as decimal text)."""
    return "/".join([str(t) for t in tokens])


# ---------------------------------------------------------------------------
# Record bodies

def _check_record(record):
    if not isinstance(record, dict):
        raise TypeError("record must be a dict, not %s" % type(record).__name__)
    unknown = [k for k in record if k not in FIELDS]
    if unknown:
        raise ValueError("unknown record field(s): %s" % ", ".join(sorted(map(str, unknown))))
    for k in _REQUIRED:
        if k not in record:
            raise ValueError("record lacks required field %r" % k)


def _encode_nested(v):
    try:
        return encode_value(v)
    except RecursionError:    # a value nested deeper than Python can recurse
        raise ValueError("record nests too deeply") from None


def _encode_body(record):
    """Validated, compact UTF-8 JSON body bytes for a record dict."""
    _check_record(record)
    get = record.get
    ts_host = record["ts_host"]
    if not _is_num(ts_host):
        raise TypeError("ts_host must be a finite int or float, not %r" % (ts_host,))
    topic = record["topic"]
    if type(topic) is str:
        topic = topic.split("/")
    if not isinstance(topic, (tuple, list)) or not topic:
        raise TypeError("topic must be a non-empty tuple/list of str/int tokens")
    for tok in topic:
        if type(tok) is not str and type(tok) is not int:
            raise TypeError("topic token must be str or int, not %s" % type(tok).__name__)
    ts_device = get("ts_device")
    if ts_device is not None and not _is_num(ts_device):
        raise TypeError("ts_device must be a finite number or None, not %r" % (ts_device,))
    body = {"ts_host": ts_host, "topic": list(topic),
            "payload": _encode_nested(record["payload"]), "ts_device": ts_device}
    for k in FIELDS[4:-1]:
        v = get(k)
        if v is not None:
            if k in _INT_FIELDS and not _is_int(v):
                raise TypeError("%s must be an int or None, not %r" % (k, v))
            if k in _STR_FIELDS and type(v) is not str:
                raise TypeError("%s must be a str or None, not %r" % (k, v))
        body[k] = v
    extra = get("extra")
    if extra is not None:
        if not isinstance(extra, dict):
            raise TypeError("extra must be a dict or None, not %s" % type(extra).__name__)
        extra = _encode_nested(extra) if extra else None
    body["extra"] = extra
    try:
        text = json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        data = text.encode("utf-8")
    except RecursionError:
        raise ValueError("record nests too deeply") from None
    if len(data) > MAX_BODY_BYTES:
        raise ValueError("record body of %d bytes exceeds MAX_BODY_BYTES (%d)"
                         % (len(data), MAX_BODY_BYTES))
    return data


def _no_constants(name):
    raise ValueError("non-finite number %s" % name)


def _decode_body(data, decode_payload):
    """The record dict of a body whose CRC matched; raises ValueError if the
    body does not follow the schema."""
    try:
        obj = json.loads(data.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError("body is not UTF-8 JSON (%s)" % e) from None
    if type(obj) is not dict:
        raise ValueError("body is not a JSON object")
    for k in FIELDS:
        if k not in obj:
            raise ValueError("body lacks %r" % k)
    if not _is_num(obj["ts_host"]):
        raise ValueError("bad ts_host")
    topic = obj["topic"]
    if type(topic) is not list or not topic or not all(
            type(t) is str or type(t) is int for t in topic):
        raise ValueError("bad topic")
    if obj["ts_device"] is not None and not _is_num(obj["ts_device"]):
        raise ValueError("bad ts_device")
    for k in _INT_FIELDS:
        if obj[k] is not None and not _is_int(obj[k]):
            raise ValueError("bad %s" % k)
    for k in _STR_FIELDS:
        if obj[k] is not None and type(obj[k]) is not str:
            raise ValueError("bad %s" % k)
    extra = obj["extra"]
    if extra is not None and type(extra) is not dict:
        raise ValueError("bad extra")
    try:
        payload = decode_value(obj["payload"])
        extra = decode_value(extra) if extra is not None else None
    except (ValueError, binascii.Error, UnicodeEncodeError, RecursionError) as e:
        raise ValueError("bad tagged value (%s)" % e) from None
    rec = {k: obj[k] for k in FIELDS}     # known members only, schema order
    rec["topic"] = tuple(topic)
    if decode_payload:
        rec["payload"] = payload
        rec["extra"] = extra
    return rec


def record_from_message(msg, ts_host=None):
    """The record dict for an edgebus Message received now (or at ts_host).

    The sender's sequence number and device timestamp are taken from
    ``origin.extra["seq"]`` (an int) and ``origin.extra["ts"]`` (a finite
    number) when present and well-typed, else null; ``extra`` itself is kept
    whole.  Non-str provenance strings (e.g. a principal object) are logged
    as ``str(value)``."""
    o = msg.origin
    extra = getattr(o, "extra", None) or None
    seq = extra.get("seq") if extra else None
    ts = extra.get("ts") if extra else None

    def s(name):
        v = getattr(o, name, None)
        return v if v is None or type(v) is str else str(v)

    return {
        "ts_host": time.time() if ts_host is None else ts_host,
        "topic": tuple(msg.topic),
        "payload": msg.payload,
        "ts_device": ts if _is_num(ts) else None,
        "seq": seq if _is_int(seq) else None,
        "origin_kind": s("kind"),
        "conn_id": s("conn_id"),
        "principal": s("principal"),
        "link_id": s("link_id"),
        "peer_node": s("peer_node"),
        "peer_sid": s("peer_sid"),
        "generation": getattr(o, "generation", None),
        "extra": dict(extra) if extra else None,
    }


# ---------------------------------------------------------------------------
# Framing

def segment_name(segment_id, sealed=True):
    return "%020d.seg%s" % (segment_id, "" if sealed else ".open")


def _file_header(segment_id):
    head = _FILE_HDR.pack(FILE_MAGIC, FORMAT_VERSION, 0, segment_id, 0)[:16]
    return head + struct.pack(">I", zlib.crc32(head))


def _frame(body):
    head = struct.pack(">4sHI", RECORD_MAGIC, FORMAT_VERSION, len(body))
    return head + struct.pack(">I", zlib.crc32(body, zlib.crc32(head))) + body


class _Source:
    """Chunked random-ish access to a file read forward."""

    def __init__(self, f, start):
        self.f = f
        self.base = start
        self.data = bytearray()
        self.eof = False
        f.seek(start)

    def _fill(self, upto):
        while self.base + len(self.data) < upto and not self.eof:
            chunk = self.f.read(max(_CHUNK, upto - self.base - len(self.data)))
            if not chunk:
                self.eof = True
            else:
                self.data += chunk

    def get(self, pos, n):
        self._fill(pos + n)
        i = pos - self.base
        return bytes(self.data[i:i + n])

    def find(self, pat, pos, limit):
        """Index >= pos of pat starting before limit, or -1."""
        while True:
            i = self.data.find(pat, pos - self.base)
            if i >= 0 and self.base + i < limit:
                return self.base + i
            if i >= 0 or self.eof or self.base + len(self.data) >= limit + len(pat):
                return -1
            pos = max(pos, self.base + len(self.data) - len(pat) + 1)
            self._fill(self.base + len(self.data) + _CHUNK)

    def release(self, pos):
        """Forget bytes before pos."""
        k = pos - self.base
        if k > _CHUNK:
            del self.data[:k]
            self.base = pos


def _parse_at(src, pos, decode_payload):
    """(record, next_pos) or (None, reason)."""
    hdr = src.get(pos, RECORD_HEADER_SIZE)
    if len(hdr) < RECORD_HEADER_SIZE:
        return None, "truncated record header (%d bytes before end of file)" % len(hdr)
    magic, version, length, crc = _REC_HDR.unpack(hdr)
    if magic != RECORD_MAGIC:
        return None, "bad record magic"
    if version != FORMAT_VERSION:
        return None, "unsupported record version %d" % version
    if length > MAX_BODY_BYTES:
        return None, "record length %d exceeds maximum" % length
    body = src.get(pos + RECORD_HEADER_SIZE, length)
    if len(body) < length:
        return None, "truncated record (body needs %d bytes, %d present)" % (length, len(body))
    if zlib.crc32(body, zlib.crc32(hdr[:10])) != crc:
        return None, "CRC mismatch"
    try:
        rec = _decode_body(body, decode_payload)
    except Exception as e:          # a reader never raises for bad data
        return None, "invalid body: %s" % e
    return rec, pos + RECORD_HEADER_SIZE + length


def _check_file_header(data, segment_id):
    """None if data is a valid header for segment_id, else (reason, fatal).
    fatal means the whole file must be skipped."""
    if len(data) < FILE_HEADER_SIZE:
        return "truncated file header", False
    magic, version, _flags, sid, crc = _FILE_HDR.unpack(data)
    if magic != FILE_MAGIC or zlib.crc32(data[:16]) != crc:
        return "bad file header", False
    if version != FORMAT_VERSION:
        return "unsupported format version %d" % version, True
    if sid != segment_id:
        return "file header names segment %d, not %d" % (sid, segment_id), True
    return None


# ---------------------------------------------------------------------------
# Reading

class ReadStats:
    """What a read saw besides good records.

    records: records yielded; corrupt: list of (file, offset, reason) naming
    the first byte of each skipped region; bytes_skipped: total bytes in those
    regions; missing: list of (first_id, last_id) inclusive ranges of
    segments asked for but not on disk (removed by retention or by hand)."""

    def __init__(self):
        self.records = 0
        self.corrupt = []
        self.bytes_skipped = 0
        self.missing = []

    @property
    def clean(self):
        return not self.corrupt and not self.missing

    def _bad(self, file, offset, reason, nbytes):
        self.corrupt.append((file, offset, reason))
        self.bytes_skipped += max(0, nbytes)

    def __repr__(self):
        return ("ReadStats(records=%d, corrupt=%d, bytes_skipped=%d, missing=%r)"
                % (self.records, len(self.corrupt), self.bytes_skipped, self.missing))


class _StatsIter:
    """An iterator that also carries the ReadStats it fills (``.stats``)."""

    def __init__(self, gen, stats):
        self._gen = gen
        self.stats = stats

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._gen)

    def close(self):
        self._gen.close()


def list_segments(path):
    """Sorted ids of the sealed segments in the log directory (never the
    active ``.open`` one).  A missing directory has no segments."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for m in map(_SEG_RE.match, names) if m)


def latest_offset(path):
    """(segment id, byte length) of the newest sealed segment: the position
    just past its last byte.  None when the log has no sealed segment."""
    for sid in reversed(list_segments(path)):
        try:
            return sid, os.path.getsize(os.path.join(path, segment_name(sid)))
        except FileNotFoundError:       # removed by retention meanwhile
            continue
    return None


def earliest_offset(path):
    """(segment id, FILE_HEADER_SIZE) of the oldest sealed segment, or None."""
    ids = list_segments(path)
    return (ids[0], FILE_HEADER_SIZE) if ids else None


def read_segment(path, segment_id, start_offset=0, end_offset=None, stats=None,
                 decode_payload=True):
    """Iterate ``(offset, record)`` for the records of one sealed segment
    whose offset is in [start_offset, end_offset) (end None: to the end).

    Never raises for bad data: corrupt or truncated bytes are skipped,
    resynchronising on the next record magic whose length and CRC check, and
    reported in the returned iterator's ``.stats`` (a ReadStats; pass one to
    share it across calls).  A missing segment is reported in stats.missing.
    With decode_payload False, payload and extra stay in their logged JSON
    form (``$b64``/``$lit`` tags kept), ready for ``json.dumps``."""
    stats = ReadStats() if stats is None else stats
    gen = _read_segment(path, segment_id, start_offset, end_offset, stats, decode_payload)
    return _StatsIter(gen, stats)


def _read_segment(path, segment_id, start, end, stats, decode_payload):
    fname = os.path.join(path, segment_name(segment_id))
    try:
        f = open(fname, "rb")
    except FileNotFoundError:
        stats.missing.append((segment_id, segment_id))
        return
    except OSError as e:
        stats._bad(fname, 0, "cannot open: %s" % e, 0)
        return
    with f:
        try:
            size = os.fstat(f.fileno()).st_size
            limit = size if end is None else min(end, size)
            start = max(0, start)
            head = f.read(FILE_HEADER_SIZE)
            bad = _check_file_header(head, segment_id)
            if bad is not None:
                reason, fatal = bad
                if fatal:
                    stats._bad(fname, 0, reason + "; segment skipped",
                               limit - min(start, limit))
                    return
                if start < FILE_HEADER_SIZE:
                    stats._bad(fname, 0, reason, min(FILE_HEADER_SIZE, size))
            pos = max(start, FILE_HEADER_SIZE)
            src = _Source(f, pos)
            while pos < limit:
                rec, nxt = _parse_at(src, pos, decode_payload)
                if rec is None:
                    region, reason = pos, nxt
                    q = pos + 1
                    while True:
                        q = src.find(RECORD_MAGIC, q, limit)
                        if q < 0:
                            stats._bad(fname, region, reason, limit - region)
                            return
                        rec, nxt = _parse_at(src, q, decode_payload)
                        if rec is not None:
                            stats._bad(fname, region, reason, q - region)
                            pos = q
                            break
                        q += 1
                stats.records += 1
                yield pos, rec
                pos = nxt
                src.release(pos)
        except OSError as e:
            stats._bad(fname, 0, "read error: %s" % e, 0)


def read_log(path, start=None, end=None, stats=None, decode_payload=True):
    """Iterate ``((segment_id, offset), record)`` over the sealed segments
    from position start (inclusive; None: the oldest segment) to position end
    (exclusive; None: the end of the newest sealed segment at call time).
    Positions are those :meth:`LogWriter.append` returned.  Segments in the
    range that retention (or anything else) removed are listed in
    ``.stats.missing``."""
    stats = ReadStats() if stats is None else stats
    return _StatsIter(_read_log(path, start, end, stats, decode_payload), stats)


def _read_log(path, start, end, stats, decode_payload):
    ids = list_segments(path)
    if end is None:
        if not ids:
            return
        end = (ids[-1], None)
    if start is None:
        if not ids:
            return
        start = (ids[0], 0)
    want = start[0]                      # the next id expected in the range
    for sid in ids:
        if sid < start[0]:
            continue
        if sid > end[0]:
            break
        if sid > want:                   # removed by retention (or by hand)
            stats.missing.append((want, sid - 1))
        lo = start[1] if sid == start[0] else 0
        hi = end[1] if sid == end[0] else None
        for off, rec in _read_segment(path, sid, lo, hi, stats, decode_payload):
            yield (sid, off), rec
        want = sid + 1
    if want <= end[0] and ids and want <= ids[-1]:
        stats.missing.append((want, min(end[0], ids[-1])))


# ---------------------------------------------------------------------------
# Writing

def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _valid_prefix(fname, segment_id):
    """(end, count, header_ok) for an .open file: the end offset of its last
    whole valid record when read strictly from the start, no resync."""
    with open(fname, "rb") as f:
        head = f.read(FILE_HEADER_SIZE)
        if _check_file_header(head, segment_id) is not None:
            return FILE_HEADER_SIZE, 0, False
        pos, n = FILE_HEADER_SIZE, 0
        src = _Source(f, pos)
        while True:
            rec, nxt = _parse_at(src, pos, False)
            if rec is None:
                return pos, n, True
            pos, n = nxt, n + 1
            src.release(pos)


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
    times (file mtime) and retention.  Not thread-safe: one caller at a time.
    """

    def __init__(self, path, segment_bytes=64 * 1024 * 1024, segment_seconds=60,
                 retention_bytes=None, retention_seconds=None, fsync="segment",
                 fsync_interval=1.0, clock=time.time):
        if fsync not in _FSYNC_MODES:
            raise ValueError("fsync must be one of %s" % (_FSYNC_MODES,))
        if segment_bytes < FILE_HEADER_SIZE + RECORD_HEADER_SIZE + 2:
            raise ValueError("segment_bytes too small")
        for name, v in (("segment_seconds", segment_seconds),
                        ("retention_bytes", retention_bytes),
                        ("retention_seconds", retention_seconds)):
            if v is not None and v < 0:
                raise ValueError("%s must be >= 0 or None" % name)
        self.path = os.path.abspath(path)
        self.segment_bytes = segment_bytes
        self.segment_seconds = segment_seconds
        self.retention_bytes = retention_bytes
        self.retention_seconds = retention_seconds
        self.fsync = fsync
        self.fsync_interval = fsync_interval
        self._clock = clock
        self._fd = None              # active segment's fd
        self._active = None          # active segment id
        self._size = 0               # logical size of the active segment
        self._buf = bytearray()      # appended bytes not yet written
        self._opened_at = 0.0
        self._last_sync = 0.0
        self._unsynced = False
        self._failed = None
        self._closed = False
        self.recovered = []
        if not os.path.isdir(self.path):
            os.makedirs(self.path, exist_ok=True)
            _fsync_dir(os.path.dirname(self.path))   # make the new directory durable
        self._lock_fd = os.open(os.path.join(self.path, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LogLocked("another writer holds %s" % self.path) from None
            self._recover()
            self._next_id = self._scan_next_id()
            self._retain()
        except BaseException:
            os.close(self._lock_fd)
            raise

    # -- recovery ---------------------------------------------------------

    def _scan_next_id(self):
        ids = [int(m.group(1)) for m in map(_ANY_ID_RE.match, os.listdir(self.path)) if m]
        nxt = max(ids) + 1 if ids else 0
        if nxt > _MAX_ID:
            raise LogError("segment ids exhausted")
        return nxt

    def _recover(self):
        changed = False
        for name in sorted(os.listdir(self.path)):
            m = _OPEN_RE.match(name)
            if not m:
                continue
            sid = int(m.group(1))
            fname = os.path.join(self.path, name)
            sealed = os.path.join(self.path, segment_name(sid))
            if os.path.exists(sealed):
                raise LogError("both %s and %s exist; resolve by hand" % (name, sealed))
            size = os.path.getsize(fname)
            end, count, header_ok = _valid_prefix(fname, sid)
            changed = True
            if count == 0:
                if header_ok or size <= FILE_HEADER_SIZE:
                    os.unlink(fname)
                    self.recovered.append((fname, "removed", "no whole record"))
                else:
                    os.rename(fname, fname + ".corrupt")
                    self.recovered.append((fname, "quarantined", "bad file header"))
                continue
            fd = os.open(fname, os.O_WRONLY)
            try:
                if end < size:
                    os.ftruncate(fd, end)
                t = self._clock()
                os.utime(fd, (t, t))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(fname, sealed)
            self.recovered.append((fname, "sealed", "%d records, %d bytes cut"
                                   % (count, size - end)))
        if changed:
            _fsync_dir(self.path)

    # -- state ------------------------------------------------------------

    def _check(self):
        if self._closed:
            raise LogError("writer is closed")
        if self._failed is not None:
            raise LogError("writer failed earlier (%r); reopen the log" % (self._failed,))

    @property
    def active_segment(self):
        """Id of the segment being written (its file ends in .open), or None."""
        return self._active

    def position(self):
        """(segment id, offset) the next append will get if no roll happens
        first; (next segment id, FILE_HEADER_SIZE) when no segment is active."""
        if self._active is None:
            return self._next_id, FILE_HEADER_SIZE
        return self._active, self._size

    def _io(self, fn, *args):
        try:
            return fn(*args)
        except BaseException as e:
            self._failed = e
            raise

    # -- writing ----------------------------------------------------------

    def append(self, record):
        """Append one record (a dict with the FIELDS keys; ts_host, topic and
        payload required) and return its position (segment_id, offset).

        Validation errors raise TypeError/ValueError before anything is
        written.  The record is durable once a sync point covering it has
        completed: flush(), a seal (roll(), close(), size/time roll), or per
        the fsync mode."""
        self._check()
        body = _encode_body(record)
        frame = _frame(body)
        return self._io(self._append, frame)

    def _too_old(self, now):
        return self.segment_seconds is not None and now - self._opened_at >= self.segment_seconds

    def _append(self, frame):
        now = self._clock()
        if self._active is not None:
            if self._too_old(now) or self._size + len(frame) > self.segment_bytes:
                self._seal()
        if self._active is None:
            self._create(now)
        pos = (self._active, self._size)
        self._buf += frame
        self._size += len(frame)
        self._unsynced = True
        if self.fsync == "always":
            self._sync(now)
        elif self.fsync == "interval" and now - self._last_sync >= self.fsync_interval:
            self._sync(now)
        elif len(self._buf) >= _WRITE_BUFFER:
            self._write_out()
        return pos

    def _create(self, now):
        sid = self._next_id
        if sid > _MAX_ID:
            raise LogError("segment ids exhausted")
        fname = os.path.join(self.path, segment_name(sid, sealed=False))
        fd = os.open(fname, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            head = _file_header(sid)
            os.write(fd, head)
            os.fsync(fd)
            _fsync_dir(self.path)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._active, self._size = fd, sid, len(head)
        self._opened_at = self._last_sync = now

    def _write_out(self):
        view = memoryview(self._buf)
        done = 0
        try:
            while done < len(view):
                done += os.write(self._fd, view[done:])
        finally:
            view.release()
            del self._buf[:done]

    def _sync(self, now=None):
        self._write_out()
        os.fsync(self._fd)
        self._unsynced = False
        self._last_sync = self._clock() if now is None else now

    def _seal(self):
        sid, fd = self._active, self._fd
        self._write_out()
        t = self._clock()
        os.utime(fd, (t, t))
        os.fsync(fd)
        os.close(fd)
        self._unsynced = False
        self._fd = self._active = None
        self._size = 0
        os.rename(os.path.join(self.path, segment_name(sid, sealed=False)),
                  os.path.join(self.path, segment_name(sid)))
        _fsync_dir(self.path)
        self._next_id = sid + 1
        self._retain()
        return sid

    def flush(self):
        """Sync point: write and fsync the active segment.  When it returns,
        every record appended before survives a crash (recovery seals it).
        Returns position()."""
        self._check()
        if self._active is not None:
            self._io(self._sync)
        return self.position()

    def roll(self):
        """Seal the active segment now (if any); returns its id or None."""
        self._check()
        if self._active is None:
            return None
        return self._io(self._seal)

    def tick(self):
        """Housekeeping for a periodic timer: seal an active segment older
        than segment_seconds, sync under fsync="interval", apply age
        retention.  Cheap when there is nothing to do."""
        self._check()

        def run():
            now = self._clock()
            if self._active is not None:
                if self._too_old(now):
                    self._seal()
                    return
                if (self.fsync == "interval" and self._unsynced
                        and now - self._last_sync >= self.fsync_interval):
                    self._sync(now)
            if self.retention_seconds is not None:
                self._retain()
        self._io(run)

    def close(self):
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- retention --------------------------------------------------------

    def _retain(self):
        """Delete the oldest sealed segments beyond retention_bytes (total of
        sealed segments) or older than retention_seconds (since sealing, by
        mtime).  Only a prefix is deleted, and the newest sealed segment is
        always kept so that segment ids are never reused."""
        if self.retention_bytes is None and self.retention_seconds is None:
            return []
        ids = list_segments(self.path)
        info = []
        for sid in ids:
            try:
                st = os.stat(os.path.join(self.path, segment_name(sid)))
            except FileNotFoundError:
                continue
            info.append((sid, st.st_size, st.st_mtime))
        total = sum(i[1] for i in info)
        cutoff = None if self.retention_seconds is None else self._clock() - self.retention_seconds
        deleted = []
        for sid, size, mtime in info[:-1]:
            over = self.retention_bytes is not None and total > self.retention_bytes
            old = cutoff is not None and mtime < cutoff
            if not (over or old):
                break
            try:
                os.unlink(os.path.join(self.path, segment_name(sid)))
            except FileNotFoundError:
                pass
            total -= size
            deleted.append(sid)
        if deleted:
            _fsync_dir(self.path)
        return deleted
