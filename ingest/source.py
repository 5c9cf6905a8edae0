"""The `edgebus` PySpark data source: the bridge's telemetry log as a table.

    from ingest.source import register
    register(spark)
    spark.read.format("edgebus").load("/var/lib/edgebus/tlog")          # batch
    spark.readStream.format("edgebus").load("/var/lib/edgebus/tlog")    # streaming

Offsets are log positions ``{"segment": id, "offset": byte}`` (JSON, replayable,
like Kafka's partition/offset), so Structured Streaming with a checkpoint and a
file sink is exactly once.  Only sealed segments are read (docs/telemetry-log.md
section 7); a range is decoded in bulk by ``ingest.fastread`` (msgspec, Arrow
batches), which hands anything irregular to ``tlog.read_segment``, the
reference reader (used alone without msgspec).  Columns and options are
documented in docs/spark.md.

A micro-batch (or a batch read) is cut into one partition per segment, and large
segments into byte ranges, so the work spreads over executors.  A range [a, b)
yields the records whose *start* offset is in [a, b).  Cuts need not fall on
record boundaries: reading from a cut resynchronises on the next valid record
(the record spanning the cut belongs to the range before it).

Corrupt or truncated bytes never fail a read and never produce a row: each bad
region is logged as a warning naming file and offset and, with the
``corruptDir`` option, written to a JSON file there (see :func:`corrupt_report`).
"""
import gc
import json
import logging
import operator
import os
import tempfile

import tlog
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    InputPartition)
from pyspark.sql.types import (ArrayType, DoubleType, LongType, StringType, StructField,
                               StructType, TimestampType)

try:                                     # pyspark >= 4.2: admission control, availableNow
    from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxBytes, ReadMaxRows,
                                                  SupportsTriggerAvailableNow)
except ImportError:                      # pragma: no cover - pyspark 4.0/4.1
    ReadAllAvailable = ReadMaxBytes = ReadMaxRows = None

    class SupportsTriggerAvailableNow:   # a plain base: the engine never calls it there
        pass

__all__ = ["SCHEMA", "EdgebusDataSource", "register", "corrupt_report", "BEGIN"]

log = logging.getLogger("edgebus.ingest")

SCHEMA = StructType([
    StructField("topic", StringType(), False),
    StructField("topic_tokens", ArrayType(StringType(), False), False),
    StructField("payload", StringType(), True),
    StructField("ts_device", DoubleType(), True),
    StructField("ts_host", DoubleType(), False),
    StructField("ts_host_time", TimestampType(), False),
    StructField("link_id", StringType(), True),
    StructField("peer_node", StringType(), True),
    StructField("peer_sid", StringType(), True),
    StructField("generation", LongType(), True),
    StructField("seq", LongType(), True),
    StructField("origin_kind", StringType(), True),
    StructField("conn_id", StringType(), True),
    StructField("principal", StringType(), True),
    StructField("extra", StringType(), True),
    StructField("segment", LongType(), False),
    StructField("offset", LongType(), False),
])

# The position before every record of the log (segment ids start at 0).
BEGIN = {"segment": -1, "offset": 0}

DEFAULT_SPLIT_BYTES = 128 * 1024 * 1024      # Spark's spark.sql.files.maxPartitionBytes
_MIN_SPLIT_BYTES = 1024
# What opening a range costs, in bytes of reading (Spark's openCostInBytes):
# it stops thousands of tiny segments from crowding into one partition.
_OPEN_COST = 8 * 1024
_ARROW_ROWS = 8192
_I64_MIN, _I64_MAX = -2 ** 63, 2 ** 63 - 1
# Spark timestamps cover years 0001..9999 (seconds since the epoch, UTC).
_TS_MIN, _TS_MAX = -62135596800.0, 253402300799.0
_HEADER = tlog.FILE_HEADER_SIZE

_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


try:
    from ingest import fastread as _fast
except ImportError:                      # no msgspec: every range is read by tlog
    _fast = None


def register(spark):
    """Make ``format("edgebus")`` available in this SparkSession.

    The registered class carries the session's default parallelism, which the
    readers use for ``minPartitions`` when it is not given (like Spark's file
    sources): the planning runs in a Python worker that has no session to ask."""
    try:
        n = spark.sparkContext.defaultParallelism
    except Exception:            # Spark Connect: no SparkContext here
        n = None
    spark.dataSource.register(with_parallelism(n) if n else EdgebusDataSource)
    return spark


def with_parallelism(n):
    """EdgebusDataSource whose readers default minPartitions to n. Being made
    here, not importable, the class is pickled by value (cloudpickle), so the
    hint travels to the planning worker."""
    return type("EdgebusDataSource", (EdgebusDataSource,), {"parallelism": int(n)})


# ---------------------------------------------------------------------------
# Options and offsets

def _pos(offset):
    return (int(offset["segment"]), int(offset["offset"]))


def _off(segment, offset):
    return {"segment": int(segment), "offset": int(offset)}


def _canon(path, pos):
    """pos with a segment's end written as the start of the next segment.

    An offset at a segment's end then names no byte of that segment, so a later
    range starting there does not expect it on disk (retention may have
    removed it, fully read) and a segment missing from a range is data loss."""
    s, o = pos
    if s >= 0 and o > 0:
        try:
            size = os.path.getsize(os.path.join(path, tlog.segment_name(s)))
        except OSError:
            return pos
        if o >= size:
            return (s + 1, 0)
    return pos


def _latest(path):
    lo = tlog.latest_offset(path)
    return None if lo is None else _canon(path, lo)


def _parse_offset(text, what, path):
    """An offset option: "earliest", "latest" or JSON {"segment": s, "offset": o}."""
    t = text.strip()
    if t == "earliest":
        return dict(BEGIN)
    if t == "latest":
        lo = _latest(path)
        return _off(*lo) if lo else dict(BEGIN)
    try:
        v = json.loads(t)
        return _off(*_canon(path, (int(v["segment"]), int(v["offset"]))))
    except (ValueError, KeyError, TypeError):
        raise ValueError('edgebus: option %s must be "earliest", "latest" or '
                         '{"segment": N, "offset": N}, not %r' % (what, text)) from None


def _int_opt(options, name, default=None, minimum=1):
    v = options.get(name)
    if v is None or str(v).strip() == "":
        return default
    try:
        n = int(v)
    except ValueError:
        raise ValueError("edgebus: option %s must be an integer, not %r" % (name, v)) from None
    if n < minimum:
        raise ValueError("edgebus: option %s must be >= %d" % (name, minimum))
    return n


class _Options:
    """The parsed options, picklable, shared by the readers."""

    def __init__(self, options, parallelism=None):
        path = options.get("path")
        if not path:
            raise ValueError("edgebus: the log directory is required: load(DIR) or "
                             'option("path", DIR)')
        self.path = os.path.abspath(path)
        # Each range costs a Spark task and reads on to a record boundary past
        # its end, so tiny ranges only add overhead.
        self.split_bytes = max(_int_opt(options, "splitBytes", DEFAULT_SPLIT_BYTES),
                               _MIN_SPLIT_BYTES)
        self.min_partitions = _int_opt(options, "minPartitions", parallelism)
        self.max_records = _int_opt(options, "maxRecordsPerTrigger")
        self.max_bytes = _int_opt(options, "maxBytesPerTrigger")
        cd = options.get("corruptDir")
        self.corrupt_dir = os.path.abspath(cd) if cd else None
        self.starting = options.get("startingOffset") or "earliest"
        self.ending = options.get("endingOffset") or "latest"


# ---------------------------------------------------------------------------
# Planning

class SegmentRange(InputPartition):
    """Records of one sealed segment whose start offset is in [start, end):
    the unit of reading and of corruption reports."""

    def __init__(self, segment, start, end):
        self.segment = segment
        self.start = start
        self.end = end


class RangeGroup(InputPartition):
    """One Spark partition: SegmentRanges read one after the other, in log order."""

    def __init__(self, ranges):
        self.ranges = ranges


def _read_group(opts, group):
    for r in group.ranges:
        yield from _read_range(opts, r)


def _spans(path, start, end):
    """[(segment, lo, hi)] for the sealed segments between positions start
    (inclusive) and end (exclusive), and the ids missing from that range."""
    s0, o0 = start
    s1, o1 = end
    spans, missing = [], []
    want = s0 if s0 >= 0 else None
    for sid in tlog.list_segments(path):
        if sid < s0 or sid > s1:
            continue
        if want is not None and sid > want:
            missing.append((want, sid - 1))
        want = sid + 1
        try:
            size = os.path.getsize(os.path.join(path, tlog.segment_name(sid)))
        except FileNotFoundError:        # removed by retention meanwhile
            missing.append((sid, sid))
            continue
        lo = o0 if sid == s0 else 0
        hi = min(o1, size) if sid == s1 else size
        if lo < hi:
            spans.append((sid, lo, hi))
    return spans, missing


def plan(path, start, end, split_bytes=DEFAULT_SPLIT_BYTES, min_partitions=None):
    """The SegmentRanges covering positions [start, end), of about the target
    size: split_bytes, or less when min_partitions asks for more (at least
    64 KiB). Larger segments are cut; pack() groups the small ones."""
    spans, missing = _spans(path, _pos(start), _pos(end))
    for first, last in missing:
        log.warning("edgebus: log %s: segments %d..%d are missing (removed by retention "
                    "before they were read, or quarantined); their records are lost",
                    path, first, last)
    target = _target(sum(hi - lo for _, lo, hi in spans), split_bytes, min_partitions)
    parts = []
    for sid, lo, hi in spans:
        n = max(1, -(-(hi - lo) // target))
        cuts = [lo]
        for k in range(1, n):
            c = max(lo + (hi - lo) * k // n, _HEADER + 1)   # a record never starts before 20
            if c > cuts[-1]:
                cuts.append(c)
        cuts.append(hi)
        parts.extend(SegmentRange(sid, a, b) for a, b in zip(cuts, cuts[1:]))
    return parts, missing


def pack(ranges, split_bytes=DEFAULT_SPLIT_BYTES, min_partitions=None):
    """The partitions for plan()'s ranges: consecutive ranges grouped up to the
    same target size, each range counted with _OPEN_COST (Spark's file
    sources pack small files so; a task per one-minute segment would cost more
    in Python worker round trips than reading it)."""
    total = sum(r.end - r.start for r in ranges)
    target = _target(total, split_bytes, min_partitions)
    groups, cur, size = [], [], 0
    for r in ranges:
        n = r.end - r.start + _OPEN_COST
        if cur and size + n > target:
            groups.append(RangeGroup(cur))
            cur, size = [], 0
        cur.append(r)
        size += n
    if cur:
        groups.append(RangeGroup(cur))
    return groups


def _target(total, split_bytes, min_partitions):
    if min_partitions and total:
        # Ranges made for parallelism stay >= 64 KiB; splitBytes is obeyed.
        return min(split_bytes, max(-(-total // min_partitions), 64 * _MIN_SPLIT_BYTES))
    return split_bytes


def _advance_bytes(path, start, end, max_bytes):
    """The position at most max_bytes of segment data after start (>= 1 record)."""
    spans, _ = _spans(path, start, end)
    budget, last = max_bytes, start
    for sid, lo, hi in spans:
        if budget <= 0:
            break
        if hi - lo <= budget:
            budget -= hi - lo
            last = (sid, hi)
            continue
        return _canon(path, (sid, min(max(lo + budget, _HEADER + 1), hi)))
    return _canon(path, last)


def _advance_rows(path, start, end, max_rows):
    """The position of the (max_rows + 1)-th record after start, or end."""
    spans, _ = _spans(path, start, end)
    n = 0
    for sid, lo, hi in spans:
        it = tlog.read_segment(path, sid, lo, None, decode_payload=False)
        try:
            for off, _rec in it:
                if off >= hi:
                    break
                if n == max_rows:
                    return (sid, off)
                n += 1
        finally:
            it.close()
    return end


# ---------------------------------------------------------------------------
# Reading

def _region_bytes(reason, offset, nxt, size):
    if offset == 0 and reason.endswith("segment skipped"):
        return size
    if offset == 0:
        return min(_HEADER, size)
    return max(0, (size if nxt is None else nxt) - offset)


def _owned(region, start):
    """Whether the range starting at start reports this bad region.

    A range reads on past its end to the first valid record at or after it, so
    it sees every bad region that begins before that record, including one that
    begins at or just after its end.  The range after the cut starts reading at
    the cut: its first region, at exactly the cut, is either the tail of a
    record that began before the cut or bytes the range before has reported,
    so it is dropped.  Position 0 (the file header) belongs to the range at 0."""
    _file, off, reason = region
    if reason.startswith(("cannot open", "read error")):
        return True
    if off == 0:
        return start == 0
    return off != start


def _unrepresentable(fname, sid, off, rec):
    return {"file": fname, "segment": sid, "offset": off, "bytes": None,
            "reason": "unrepresentable record: ts_host %r is outside Spark's timestamp "
                      "range" % (rec["ts_host"],)}


def _fits_ts(v):
    return _TS_MIN <= v <= _TS_MAX          # ints compare exactly, no overflow


def _i64(v):
    return v if v is None or _I64_MIN <= v <= _I64_MAX else None


def _f64(v):
    if type(v) is int:              # nearest double; null beyond a double's range
        return float(v) if -1e308 < v < 1e308 else None
    return v


_PROV = operator.itemgetter("link_id", "peer_node", "peer_sid", "generation", "seq",
                            "origin_kind", "conn_id", "principal")


def _batch(pa, pc, schema, sid, offs, recs):
    """One Arrow record batch of SCHEMA from records (dicts of read_segment)."""
    n = len(recs)
    tokens = [list(map(str, r["topic"])) for r in recs]
    ts = pa.array([r["ts_host"] for r in recs], pa.float64())
    micros = pc.cast(pc.round(pc.multiply(ts, 1e6)), pa.int64())
    prov = list(zip(*map(_PROV, recs)))
    try:
        ints = [pa.array(prov[3], pa.int64()), pa.array(prov[4], pa.int64())]
    except (OverflowError, pa.ArrowInvalid):    # beyond a long: null (the JSON keeps it)
        ints = [pa.array(list(map(_i64, prov[3])), pa.int64()),
                pa.array(list(map(_i64, prov[4])), pa.int64())]
    try:
        td = pa.array([r["ts_device"] for r in recs], pa.float64())
    except (OverflowError, pa.ArrowInvalid):    # an int a double holds only roughly
        td = pa.array([_f64(r["ts_device"]) for r in recs], pa.float64())
    st = pa.string()
    arrays = [
        pa.array(["/".join(t) for t in tokens], st),
        pa.array(tokens, schema.field(1).type),
        pa.array([None if p is None else _dumps(p) for p in map(operator.itemgetter("payload"),
                                                                 recs)], st),
        td, ts, micros.cast(schema.field(5).type),
        pa.array(prov[0], st), pa.array(prov[1], st), pa.array(prov[2], st),
        ints[0], ints[1],
        pa.array(prov[5], st), pa.array(prov[6], st), pa.array(prov[7], st),
        pa.array([None if x is None else _dumps(x) for x in map(operator.itemgetter("extra"),
                                                                 recs)], st),
        pa.array([sid] * n, pa.int64()), pa.array(offs, pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _read_range(opts, part):
    """Arrow record batches for one SegmentRange (see _owned for bad regions).

    The fast path: the range is mapped, frames are split and CRC-checked in a
    tight loop, each chunk of bodies is decoded by one msgspec call (payload and
    extra kept as their raw JSON text), and the columns are built in bulk.  Any
    frame or body it cannot take as is goes to tlog: a body that only
    msgspec refuses (e.g. an integer beyond 64 bits) is decoded there alone; bad
    bytes are reported and skipped by tlog's resynchronising reader, and the
    fast path resumes at the next valid record.  Without msgspec, or when the
    file header is not clean, the whole range is read by _read_range_slow."""
    if _fast is None or part.segment < 0:
        yield from _read_range_slow(opts, part)
        return
    import mmap

    path, sid = opts.path, part.segment
    fname = os.path.join(path, tlog.segment_name(sid))
    try:
        f = open(fname, "rb")
    except OSError:
        yield from _read_range_slow(opts, part)      # reports missing / cannot open
        return
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < _HEADER or tlog.check_file_header(f.read(_HEADER), sid) is not None:
            yield from _read_range_slow(opts, part)
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        yield from _fast.read(opts, part, fname, mm, size)
    finally:
        try:
            mm.close()
        except BufferError:     # a view of it is still alive: the GC closes it
            pass


def _read_range_slow(opts, part):
    """Arrow record batches for one SegmentRange, record by record through
    tlog (see _owned for bad regions): the fallback of _read_range."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(SCHEMA, timezone="UTC")
    path, sid, start, end = opts.path, part.segment, part.start, part.end
    fname = os.path.join(path, tlog.segment_name(sid))
    try:
        size = os.path.getsize(fname)
    except OSError:
        size = 0
    stats = tlog.ReadStats()
    corrupt = stats.corrupt
    it = tlog.read_segment(path, sid, start, None, stats, decode_payload=False)
    bad = []                        # reported regions as dicts
    seen = 0                        # entries of stats.corrupt already looked at
    offs, recs = [], []
    # The records are acyclic dicts freed by reference counting; with thousands of
    # them alive per batch the cyclic GC's scans cost a third of the read time.
    gc_was_on = gc.isenabled()
    gc.disable()

    def regions(nxt):
        nonlocal seen
        for region in corrupt[seen:]:
            if _owned(region, start):
                bad.append({"file": region[0], "segment": sid, "offset": region[1],
                            "reason": region[2],
                            "bytes": _region_bytes(region[2], region[1], nxt, size)})
        seen = len(corrupt)

    try:
        for off, rec in it:
            if len(corrupt) > seen:
                regions(off)
            if off >= end:
                break
            if not _fits_ts(rec["ts_host"]):
                bad.append(_unrepresentable(fname, sid, off, rec))
                continue
            offs.append(off)
            recs.append(rec)
            if len(offs) >= _ARROW_ROWS:
                yield _batch(pa, pc, schema, sid, offs, recs)
                offs, recs = [], []
        else:
            regions(None)
        if offs:
            yield _batch(pa, pc, schema, sid, offs, recs)
    finally:
        it.close()
        if gc_was_on:
            gc.enable()
    if bad or stats.missing:
        _report(opts, part, fname, bad, list(stats.missing))


def _report(opts, part, fname, bad, missing):
    for r in bad:
        log.warning("edgebus: skipped corrupt log data in %s at offset %d (%s bytes): %s",
                    r["file"], r["offset"], r["bytes"], r["reason"])
    for first, last in missing:
        log.warning("edgebus: segment %d of %s vanished before it was read", first, opts.path)
    if not opts.corrupt_dir:
        return
    # One file per range, named by the range: a replayed batch rewrites the same file.
    doc = {"log": opts.path, "segment": part.segment, "start": part.start, "end": part.end,
           "regions": bad, "missing": [list(m) for m in missing]}
    _write_json(opts.corrupt_dir, "seg%020d-%d-%d.json" % (part.segment, part.start, part.end),
                doc)


def _write_json(directory, name, doc):
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def corrupt_report(directory):
    """What readers skipped, from a corruptDir: {"regions": [...], "missing": [...]}.

    regions: dicts (file, segment, offset, reason, bytes), one per bad region,
    sorted by (segment, offset); missing: sorted [first, last] segment id ranges
    that were planned but not on disk."""
    regions, missing = {}, set()
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return {"regions": [], "missing": []}
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            with open(os.path.join(directory, name)) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        for r in doc.get("regions", []):
            regions[(r["segment"], r["offset"])] = r
        missing.update(tuple(m) for m in doc.get("missing", []))
    return {"regions": [regions[k] for k in sorted(regions)],
            "missing": [list(m) for m in sorted(missing)]}


# ---------------------------------------------------------------------------
# The data source

class EdgebusDataSource(DataSource):
    """``format("edgebus")``: the bridge's telemetry log (docs/spark.md)."""

    @classmethod
    def name(cls):
        return "edgebus"

    def schema(self):
        return SCHEMA

    def _opts(self, schema):
        if schema is not None and schema != SCHEMA:
            raise ValueError("edgebus: the schema is fixed (docs/spark.md); "
                             "do not pass one, select or cast columns instead")
        return _Options(self.options, getattr(self, "parallelism", None) or os.cpu_count())

    def reader(self, schema):
        return EdgebusBatchReader(self._opts(schema))

    def streamReader(self, schema):
        return EdgebusStreamReader(self._opts(schema))


class EdgebusBatchReader(DataSourceReader):
    """Every sealed segment at planning time, or [startingOffset, endingOffset)."""

    def __init__(self, opts):
        if not os.path.isdir(opts.path):
            raise FileNotFoundError("edgebus: no log directory at %s" % opts.path)
        self.opts = opts

    def partitions(self):
        o = self.opts
        start = _parse_offset(o.starting, "startingOffset", o.path)
        end = _parse_offset(o.ending, "endingOffset", o.path)
        # Spark wants at least one partition; an empty one reads nothing.
        return _partitions(o, start, end) or [RangeGroup([])]

    def read(self, partition):
        return _read_group(self.opts, partition)


def _partitions(o, start, end):
    ranges, missing = plan(o.path, start, end, o.split_bytes, o.min_partitions)
    if missing and o.corrupt_dir:
        _write_missing(o, missing)
    return pack(ranges, o.split_bytes, o.min_partitions)


def _write_missing(opts, missing):
    for first, last in missing:
        _write_json(opts.corrupt_dir, "missing-%020d-%020d.json" % (first, last),
                    {"log": opts.path, "regions": [], "missing": [[first, last]]})


class EdgebusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches [end of the last batch, newest sealed segment's end), bounded
    by maxRecordsPerTrigger / maxBytesPerTrigger."""

    def __init__(self, opts):
        self.opts = opts
        self._target = None           # availableNow: do not read past this position
        self._warned = False

    def initialOffset(self):
        o = self.opts
        if not os.path.isdir(o.path):
            log.warning("edgebus: no log directory at %s yet; waiting for it", o.path)
        return _parse_offset(o.starting, "startingOffset", o.path)

    def _latest(self):
        lo = _latest(self.opts.path)
        if lo is None:
            return None
        if self._target is not None and lo > self._target:
            lo = self._target
        return lo

    def latestOffset(self, start=None, limit=None):
        # Two signatures: latestOffset() before pyspark 4.2, (start, limit) after.
        lo = self._latest()
        if start is None:
            return _off(*lo) if lo else dict(BEGIN)
        s = _pos(start)
        if lo is None or lo <= s:
            if lo is not None and lo < s and not self._warned:
                self._warned = True
                log.warning("edgebus: log %s ends at %r, before the stream's position %r: "
                            "was the log directory replaced?", self.opts.path, lo, s)
            return start
        end = lo
        o = self.opts
        if limit is None:
            limit = self.getDefaultReadLimit()
        if ReadAllAvailable is None or not isinstance(limit, ReadAllAvailable):
            max_rows = getattr(limit, "max_rows", None) or o.max_records
            max_bytes = getattr(limit, "max_bytes", None) or o.max_bytes
            if max_bytes:
                end = min(end, _advance_bytes(o.path, s, end, max_bytes))
            if max_rows:
                end = min(end, _advance_rows(o.path, s, end, max_rows))
        return _off(*end)

    def getDefaultReadLimit(self):
        if ReadAllAvailable is None:
            return None
        if self.opts.max_records:
            return ReadMaxRows(self.opts.max_records)
        if self.opts.max_bytes:
            return ReadMaxBytes(self.opts.max_bytes)
        return ReadAllAvailable()

    def reportLatestOffset(self):
        lo = _latest(self.opts.path)
        return _off(*lo) if lo else None

    def prepareForTriggerAvailableNow(self):
        self._target = _latest(self.opts.path) or (-1, 0)

    def partitions(self, start, end):
        return _partitions(self.opts, start, end)

    def read(self, partition):
        return _read_group(self.opts, partition)

    def commit(self, end):
        pass        # the log is the bridge's; its retention decides what is kept
