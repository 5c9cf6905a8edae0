"""The edgebus data source's fast reader: a segment range to Arrow batches in bulk.

Used by ingest.source._read_range when msgspec is installed.  It reads the same
records as tlog.read_segment, with the same rules (docs/telemetry-log.md
sections 2, 3 and 7), but not one Python dict per record:

- frames are split and CRC-checked in one tight loop over the mapped file;
- the bodies of a chunk are checked as UTF-8 and decoded by a single msgspec
  call into typed structs (types enforced there: numbers, integers, strings,
  nulls, the topic's tokens), with ``payload`` and ``extra`` kept as their raw
  JSON text, which is what the columns hold (the writer logs compact JSON);
- tags (``"$..."`` one-member objects) are checked only in the rare values that
  contain ``"$``;
- columns are built with pyarrow from the raw text and a few lists.

Whatever the fast path does not take as is goes to tlog: a body msgspec
refuses is decoded alone by tlog (valid there, e.g. an integer beyond 64 bits:
a row; invalid: corrupt), and bad bytes are skipped by tlog's resynchronising
reader, which reports them; reading then resumes here at the next valid record.
"""
import gc
import operator
import struct
import zlib
from itertools import accumulate, chain

import msgspec

import tlog

_REC = struct.Struct(">4sHII")
_HDR = tlog.RECORD_HEADER_SIZE
_MAGIC = tlog.RECORD_MAGIC
_VERSION = tlog.FORMAT_VERSION
_MAX = tlog.MAX_BODY_BYTES
_CHUNK_ROWS = 16384
_NULL = b"null"


class Rec(msgspec.Struct):
    """A record body (docs/telemetry-log.md section 3); unknown members ignored."""
    ts_host: float
    topic: list[str | int]
    payload: msgspec.Raw
    ts_device: float | None
    seq: int | None
    origin_kind: str | None
    conn_id: str | None
    principal: str | None
    link_id: str | None
    peer_node: str | None
    peer_sid: str | None
    generation: int | None
    extra: msgspec.Raw


_chunk_decoder = msgspec.json.Decoder(list[Rec])
_one_decoder = msgspec.json.Decoder(Rec)
_G = {k: operator.attrgetter(k) for k in Rec.__struct_fields__}


def _from_dict(r, dumps):
    """A Rec from a record dict of tlog (decode_payload=False)."""
    def raw(v):
        return msgspec.Raw(_NULL if v is None else dumps(v).encode("utf-8"))
    return Rec(r["ts_host"], list(r["topic"]), raw(r["payload"]), r["ts_device"], r["seq"],
               r["origin_kind"], r["conn_id"], r["principal"], r["link_id"], r["peer_node"],
               r["peer_sid"], r["generation"], raw(r["extra"]))


def _tags_ok(rec):
    """The $-tags in payload/extra are well formed (checked only when present)."""
    for raw in (rec.payload, rec.extra):
        if b'"$' in bytes(raw):
            try:
                tlog.decode_value(msgspec.json.decode(raw))
            except Exception:
                return False
    return True


def _decode_one(body, dumps):
    """(Rec, None) for one body, or (None, reason) if it breaks the rules."""
    try:
        bytes(body).decode("utf-8")
        rec = _one_decoder.decode(body)
    except (UnicodeDecodeError, msgspec.DecodeError):
        rec = None
    if rec is not None and rec.topic and _extra_ok(rec.extra) and _tags_ok(rec):
        return rec, None
    try:            # the reference decoder: its verdict, and the values it accepts
        return _from_dict(tlog.decode_body(bytes(body), False), dumps), None
    except Exception as e:
        return None, "invalid body: %s" % e


def _extra_ok(raw):
    b = bytes(raw)
    return b[:1] == b"{" or b == _NULL


def _chunk_ok(recs, tags):
    """Every record keeps the rules msgspec cannot express: a non-empty topic,
    extra an object or null, well-formed tags (looked at only when the chunk
    has a '"$'). Checked in C-speed passes: compact JSON has no raw newline, so
    in the extras joined by newlines each starts right after one."""
    if not all(map(_G["topic"], recs)):
        return False
    extras = b"\n" + b"\n".join(map(_G["extra"], recs))
    if extras.count(b"\n{") + extras.count(b"\nnull") != len(recs):
        return False
    return not tags or all(map(_tags_ok, recs))


def _decode_chunk(bodies, dumps):
    """[Rec] for the bodies, and (index, reason) of the first invalid one or None;
    the list holds the records before it."""
    joined = b",".join(bodies)
    try:
        joined.decode("utf-8")
        recs = _chunk_decoder.decode(b"[" + joined + b"]")
    except (UnicodeDecodeError, msgspec.DecodeError):
        recs = None
    if recs is not None and _chunk_ok(recs, b'"$' in joined):
        return recs, None
    out = []
    for i, b in enumerate(bodies):
        r, why = _decode_one(b, dumps)
        if r is None:
            return out, (i, why)
        out.append(r)
    return out, None


def _raw_column(pa, raws, n):
    """A string column of raw JSON texts, null where the text is null."""
    lens = list(map(len, raws))
    offsets = pa.array(list(accumulate(lens, initial=0)), pa.int32())
    arr = pa.StringArray.from_buffers(n, offsets.buffers()[1], pa.py_buffer(b"".join(raws)))
    nulls = [x == _NULL for x in map(bytes, raws)] if _NULL_LEN in lens else None
    if nulls is not None and any(nulls):
        import pyarrow.compute as pc
        arr = pc.if_else(pa.array(nulls, pa.bool_()), pa.scalar(None, pa.string()), arr)
    return arr


_NULL_LEN = len(_NULL)


def _i64s(pa, vals):
    try:
        return pa.array(vals, pa.int64())
    except (OverflowError, pa.ArrowInvalid):      # beyond a long: null (the JSON keeps it)
        from ingest.source import _i64
        return pa.array(list(map(_i64, vals)), pa.int64())


def _batch(pa, pc, schema, sid, offs, recs):
    """One Arrow record batch of SCHEMA from Recs."""
    n = len(recs)
    st = pa.string()
    topics = list(map(_G["topic"], recs))
    flat = list(chain.from_iterable(topics))
    try:
        values = pa.array(flat, st)
    except (pa.ArrowTypeError, pa.ArrowInvalid, TypeError):     # integer tokens
        values = pa.array([t if type(t) is str else str(t) for t in flat], st)
    toffs = pa.array(list(accumulate(map(len, topics), initial=0)), pa.int32())
    tokens = pa.ListArray.from_arrays(toffs, values)
    topic = pc.binary_join(tokens, "/")
    tokens = tokens.cast(schema.field(1).type)
    ts = pa.array(list(map(_G["ts_host"], recs)), pa.float64())
    micros = pc.cast(pc.round(pc.multiply(ts, 1e6)), pa.int64())
    tdev = list(map(_G["ts_device"], recs))
    try:
        td = pa.array(tdev, pa.float64())
    except (OverflowError, pa.ArrowInvalid, TypeError):
        from ingest.source import _f64
        td = pa.array(list(map(_f64, tdev)), pa.float64())

    def strs(k):
        return pa.array(list(map(_G[k], recs)), st)
    arrays = [
        topic, tokens,
        _raw_column(pa, list(map(_G["payload"], recs)), n),
        td, ts, micros.cast(schema.field(5).type),
        strs("link_id"), strs("peer_node"), strs("peer_sid"),
        _i64s(pa, list(map(_G["generation"], recs))), _i64s(pa, list(map(_G["seq"], recs))),
        strs("origin_kind"), strs("conn_id"), strs("principal"),
        _raw_column(pa, list(map(_G["extra"], recs)), n),
        pa.array([sid] * n, pa.int64()), pa.array(offs, pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _frames(mm, size, pos, stop, limit):
    """Walk whole, CRC-valid frames from pos: (offsets, bodies, next_pos, ok).
    Stops before a record starting at or after stop, after limit frames, or at
    the first frame that is not valid (ok False: next_pos is its offset)."""
    offs, bodies = [], []
    unpack = _REC.unpack_from
    crc32 = zlib.crc32
    mv = memoryview(mm)
    while pos < stop and len(offs) < limit:
        if pos + _HDR > size:
            return offs, bodies, pos, False
        magic, version, length, crc = unpack(mm, pos)
        b0 = pos + _HDR
        b1 = b0 + length
        if magic != _MAGIC or version != _VERSION or not 0 < length <= _MAX or b1 > size:
            return offs, bodies, pos, False
        body = mv[b0:b1]
        if crc32(body, crc32(mv[pos:pos + 10])) != crc:
            return offs, bodies, pos, False
        offs.append(pos)
        bodies.append(body)
        pos = b1
    return offs, bodies, pos, True


def read(opts, part, fname, mm, size):
    """Arrow record batches for one SegmentRange of a mapped segment whose file
    header is valid (ingest.source._read_range)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql.pandas.types import to_arrow_schema

    from ingest import source as S

    schema = to_arrow_schema(S.SCHEMA, timezone="UTC")
    path, sid, start, end = opts.path, part.segment, part.start, part.end
    stats = tlog.ReadStats()
    bad = []
    seen = 0

    def regions(nxt):
        nonlocal seen
        for region in stats.corrupt[seen:]:
            if S._owned(region, start):
                bad.append({"file": region[0], "segment": sid, "offset": region[1],
                            "reason": region[2],
                            "bytes": S._region_bytes(region[2], region[1], nxt, size)})
        seen = len(stats.corrupt)

    def emit(offs, recs):
        ts = pa.array([r.ts_host for r in recs], pa.float64())
        fits = pc.all(pc.and_(pc.greater_equal(ts, S._TS_MIN),
                              pc.less_equal(ts, S._TS_MAX))).as_py()
        if not fits:
            keep = []
            for off, r in zip(offs, recs):
                if S._fits_ts(r.ts_host):
                    keep.append((off, r))
                else:
                    bad.append(S._unrepresentable(fname, sid, off, {"ts_host": r.ts_host}))
            offs, recs = [x[0] for x in keep], [x[1] for x in keep]
        if recs:
            return _batch(pa, pc, schema, sid, offs, recs)
        return None

    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        pos = max(start, tlog.FILE_HEADER_SIZE)
        while pos < size:
            if pos >= end:
                # Past the range: only a bad region starting here is still ours
                # (the range before a cut reports it; see source._owned).
                offs, bodies, _nxt, ok = _frames(mm, size, pos, pos + 1, 1)
                if ok and _decode_chunk(bodies, S._dumps)[1] is None:
                    break
            else:
                offs, bodies, nxt, ok = _frames(mm, size, pos, end, _CHUNK_ROWS)
                recs, invalid = _decode_chunk(bodies, S._dumps) if bodies else ([], None)
                if invalid is not None:
                    i, _why = invalid
                    offs, nxt, ok = offs[:i], offs[i], False
                del bodies
                if recs:
                    b = emit(offs[:len(recs)], recs)
                    if b is not None:
                        yield b
                pos = nxt
                if ok:
                    continue
            # Bad bytes at pos: tlog reports them and finds the next valid record.
            it = tlog.read_segment(path, sid, pos, None, stats, decode_payload=False)
            try:
                q = next(it, None)
            finally:
                it.close()
            if q is None:
                regions(None)
                break
            regions(q[0])
            pos = q[0]
    finally:
        if gc_was_on:
            gc.enable()
    if bad or stats.missing:
        S._report(opts, part, fname, bad, list(stats.missing))
