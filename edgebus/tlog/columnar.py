"""Version-2 sealed segments: a segment's records as one Parquet file
(docs/telemetry-log.md section 2.3).

The writer holds the active segment's bodies (edgebus.tlog.records.normalize) and, on
sealing, turns them into columns (``table``), writes them to a hidden
temporary file, fsyncs it and renames it into place (``write_segment``).
Readers take row ranges back as Arrow tables (``read_rows``) or record dicts
(``read_records``); a position's offset is the row number.  This is the one
module of tlog that needs pyarrow: the row format of the active segment and
version-1 segments are read and written without it.
"""

from __future__ import annotations

import json
import os
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from edgebus.tlog.durable import fsync_dir, write_atomically
from edgebus.tlog.names import parquet_name
from edgebus.tlog.records import FIELDS, decode_value, json_text

if TYPE_CHECKING:
    from edgebus.tlog.stats import ReadStats

FORMAT_VERSION = 2
META_VERSION = b"edgebus.format_version"
META_SEGMENT = b"edgebus.segment"
META_GATEWAY = b"edgebus.gateway"
ROW_GROUP_ROWS = 65536
TMP_PREFIX = ".tmp-"  # hidden: Spark's and every file lister's convention

# Spark timestamps cover years 0001..9999 (seconds since the epoch, UTC).
TS_MIN, TS_MAX = -62135596800.0, 253402300799.0
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1

_STR = pa.string()
# The columns of a version-2 segment, in order (docs/telemetry-log.md 2.3).
SCHEMA = pa.schema(
    [
        pa.field("topic", _STR, False),
        pa.field("topic_tokens", pa.list_(pa.field("element", _STR, False)), False),
        pa.field("payload", _STR),
        pa.field("ts_device", pa.float64()),
        pa.field("ts_host", pa.float64(), False),
        pa.field("ts_host_time", pa.timestamp("us", tz="UTC")),
        pa.field("link_id", _STR),
        pa.field("peer_node", _STR),
        pa.field("peer_sid", _STR),
        pa.field("generation", pa.int64()),
        pa.field("seq", pa.int64()),
        pa.field("origin_kind", _STR),
        pa.field("conn_id", _STR),
        pa.field("principal", _STR),
        pa.field("extra", _STR),
        pa.field("late", pa.bool_(), False),
        pa.field("gateway", _STR),
        pa.field("segment", pa.int64(), False),
        pa.field("offset", pa.int64(), False),
        pa.field("topic_json", _STR),
    ]
)
_PROV = ("link_id", "peer_node", "peer_sid", "origin_kind", "conn_id", "principal")


def fits_timestamp(ts: float) -> bool:
    """Whether ts (seconds) is within Spark's timestamp range."""
    return TS_MIN <= ts <= TS_MAX  # ints compare exactly, no overflow


def to_long(v: Any) -> Any:
    """v for a long column: null beyond a long's range (the JSON keeps it)."""
    return v if v is None or _I64_MIN <= v <= _I64_MAX else None


def to_double(v: Any) -> Any:
    """v for a double column: an int as the nearest double, null beyond a
    double's range."""
    if type(v) is int:
        return float(v) if -1e308 < v < 1e308 else None
    return v


def _column(values: list[Any], typ: Any, fix: Callable[[Any], Any]) -> Any:
    try:
        return pa.array(values, typ)
    except (OverflowError, pa.ArrowInvalid, TypeError):  # beyond the type: see fix
        return pa.array(list(map(fix, values)), typ)


def _topics(topics: list[tuple[Any, ...]]) -> tuple[list[Any], list[Any], list[Any]]:
    """The topic, topic_tokens and topic_json columns' values; a gateway sees
    few distinct topics, so each is worked out once."""
    seen: dict[tuple[Any, ...], Any] = {}
    text, tokens, tj = [], [], []
    for tp in topics:
        key = tuple(tp)
        got = seen.get(key)
        if got is None:
            toks = [t if type(t) is str else str(t) for t in key]
            got = seen[key] = (
                "/".join(toks),
                toks,
                None if all(type(t) is str for t in key) else json_text(list(key)),
            )
        text.append(got[0])
        tokens.append(got[1])
        tj.append(got[2])
    return text, tokens, tj


_AT = {k: i for i, k in enumerate(FIELDS + ("late",))}  # a row_of() tuple's members


def table(
    rows: list[tuple[Any, ...]],
    segment_id: int,
    gateway: str | None = None,
    offsets: list[int] | None = None,
) -> Any:
    """The Arrow table of SCHEMA for rows (edgebus.tlog.records.row_of tuples) of
    segment_id, at rows 0.. or at the given offsets: column by column."""
    n = len(rows)

    def col(k: str) -> list[Any]:
        return list(map(itemgetter(_AT[k]), rows))

    topic, tokens, topic_json = _topics(col("topic"))
    ts = _column(col("ts_host"), pa.float64(), to_double)
    fits = pc.and_(pc.greater_equal(ts, TS_MIN), pc.less_equal(ts, TS_MAX))
    micros = pc.cast(pc.round(pc.multiply(pc.if_else(fits, ts, 0.0), 1e6)), pa.int64())
    # A time Spark cannot hold stays null: readers skip and report the row.
    ts_time = pc.if_else(fits, micros, None).cast(pa.timestamp("us", tz="UTC"))
    cols = {
        "topic": pa.array(topic, _STR),
        "topic_tokens": pa.array(tokens, SCHEMA.field("topic_tokens").type),
        "payload": pa.array(col("payload"), _STR),
        "ts_device": _column(col("ts_device"), pa.float64(), to_double),
        "ts_host": ts,
        "ts_host_time": ts_time,
        "generation": _column(col("generation"), pa.int64(), to_long),
        "seq": _column(col("seq"), pa.int64(), to_long),
        "extra": pa.array(col("extra"), _STR),
        "late": pa.array(col("late"), pa.bool_()),
        "gateway": pa.array([gateway] * n, _STR),
        "segment": pa.array([segment_id] * n, pa.int64()),
        "offset": pa.array(range(n) if offsets is None else offsets, pa.int64()),
        # Integer tokens are exact only here ("3" and 3 are different topics).
        "topic_json": pa.array(topic_json, _STR),
    }
    for k in _PROV:
        cols[k] = pa.array(col(k), _STR)
    return pa.Table.from_arrays([cols[f.name] for f in SCHEMA], schema=SCHEMA)


def write_segment(
    path: str,
    segment_id: int,
    rows: list[tuple[Any, ...]],
    gateway: str | None = None,
    mtime: float | None = None,
) -> str:
    """Write rows (edgebus.tlog.records.row_of tuples) as the sealed segment
    ``segment_id`` of the log at path,
    atomically: a hidden temporary file, fsynced (mtime set: the seal time),
    renamed into place, directory fsynced.  Returns its file name."""
    t = table(rows, segment_id, gateway)
    meta = {META_VERSION: str(FORMAT_VERSION).encode(), META_SEGMENT: str(segment_id).encode()}
    if gateway is not None:
        meta[META_GATEWAY] = gateway.encode("utf-8")
    t = t.replace_schema_metadata(meta)
    final = os.path.join(path, parquet_name(segment_id))
    write_atomically(
        final,
        os.path.join(path, TMP_PREFIX + parquet_name(segment_id)),
        lambda f: pq.write_table(
            t, f, row_group_size=ROW_GROUP_ROWS, compression="zstd", write_page_checksum=True
        ),
        mtime=mtime,
    )
    return final


def remove_temporaries(path: str) -> list[str]:
    """Delete what a crash left of unfinished seals (hidden temporary files)."""
    gone = []
    for name in os.listdir(path):
        if name.startswith(TMP_PREFIX) and name.endswith(".parquet"):
            os.unlink(os.path.join(path, name))
            gone.append(name)
    if gone:
        fsync_dir(path)
    return gone


def open_segment(fname: str, segment_id: int) -> tuple[Any, str | None]:
    """(ParquetFile, gateway) of a version-2 segment; raises ValueError (with the
    reason) when the file is not one, or OSError."""
    try:
        pf = pq.ParquetFile(fname, page_checksum_verification=True)
    except (pa.ArrowException, ValueError) as e:
        raise ValueError("not a readable Parquet file (%s)" % e) from None
    meta = pf.schema_arrow.metadata or {}
    version = meta.get(META_VERSION)
    if version != str(FORMAT_VERSION).encode():
        raise ValueError("unsupported format version %r" % (version,))
    if meta.get(META_SEGMENT) != str(segment_id).encode():
        raise ValueError(
            "file metadata names segment %r, not %d" % (meta.get(META_SEGMENT), segment_id)
        )
    gw = meta.get(META_GATEWAY)
    return pf, None if gw is None else gw.decode("utf-8")


def row_count(fname: str) -> int:
    """Rows in a version-2 segment file (its footer); raises if unreadable."""
    return pq.read_metadata(fname).num_rows


def read_rows(
    fname: str,
    segment_id: int,
    start: int,
    end: int | None,
    stats: ReadStats,
    columns: list[str] | None = None,
) -> Iterator[tuple[int, Any]]:
    """Iterate (first row, Arrow table) over rows [start, end) (end None: all)
    of a version-2 segment, a row group at a time.  A file that cannot be
    opened or names another segment or version is skipped; a row group that
    does not read (page checksum, decoding) is skipped; both are reported in
    stats (a tlog.ReadStats) at their first row, never raised."""
    try:
        pf, _gw = open_segment(fname, segment_id)
    except (OSError, ValueError) as e:
        stats._bad(fname, 0, "%s; segment skipped" % e, _size(fname))
        return
    md = pf.metadata
    lo = 0
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        hi = lo + rg.num_rows
        a, b = max(start, lo), hi if end is None else min(end, hi)
        if a < b:
            try:
                t = pf.read_row_group(i, columns=columns)
            except (OSError, pa.ArrowException, ValueError) as e:
                stats._bad(
                    fname,
                    a,
                    "row group %d (rows %d..%d) unreadable: %s" % (i, a, b - 1, e),
                    rg.total_byte_size,
                )
            else:
                yield a, t.slice(a - lo, b - a)
        lo = hi
        if end is not None and lo >= end:
            break


def _size(fname: str) -> int:
    try:
        return os.path.getsize(fname)
    except OSError:
        return 0


def _value(text: str | None, decode: bool) -> Any:
    if text is None:
        return None
    v = json.loads(text)
    return decode_value(v) if decode else v


def read_records(
    fname: str, segment_id: int, start: int, end: int | None, stats: ReadStats, decode_payload: bool
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Iterate (row, record dict) like tlog.read_segment, for a version-2
    segment: the thirteen members, topic a tuple (integer tokens restored)."""
    for first, t in read_rows(fname, segment_id, start, end, stats):
        cols = {k: t.column(k).to_pylist() for k in t.column_names}
        for i in range(t.num_rows):
            tj = cols["topic_json"][i]
            rec = {k: cols[k][i] for k in FIELDS if k in cols}
            rec["topic"] = tuple(json.loads(tj) if tj is not None else cols["topic_tokens"][i])
            rec["payload"] = _value(cols["payload"][i], decode_payload)
            rec["extra"] = _value(cols["extra"][i], decode_payload)
            stats.records += 1
            yield first + i, {k: rec[k] for k in FIELDS}


def max_seqs(
    fname: str, segment_id: int, out: dict[tuple[str, str], int], stats: ReadStats
) -> dict[tuple[str, str], int]:
    """Fold a version-2 segment's highest seq per (link_id, peer_sid) into out;
    what does not read is skipped into stats."""
    for _first, t in read_rows(
        fname, segment_id, 0, None, stats, columns=["link_id", "peer_sid", "seq"]
    ):
        keyed = t.filter(
            pc.and_(
                pc.and_(pc.is_valid(t["link_id"]), pc.is_valid(t["peer_sid"])),
                pc.is_valid(t["seq"]),
            )
        )
        for r in keyed.group_by(["link_id", "peer_sid"]).aggregate([("seq", "max")]).to_pylist():
            key = (r["link_id"], r["peer_sid"])
            if r["seq_max"] > out.get(key, -1):
                out[key] = r["seq_max"]
    return out
