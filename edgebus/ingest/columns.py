"""Arrow record batches of SCHEMA, built column by column from the records
of one version-1 segment: record dicts of tlog, or the bulk decoder's Recs."""

from __future__ import annotations

import json
import operator
from itertools import accumulate, chain
from typing import TYPE_CHECKING, Any

from edgebus import tlog
from edgebus.ingest.schema import LATE_TEXT
from edgebus.tlog import columnar
from edgebus.tlog.columnar import to_double, to_long
from edgebus.tlog.records import is_late

if TYPE_CHECKING:
    from edgebus.ingest.bodies import Rec

_NULL = b"null"
_NULL_LEN = len(_NULL)
# A Rec's attributes are the body's members.
_G = {k: operator.attrgetter(k) for k in tlog.FIELDS}


def from_dicts(pa: Any, schema: Any, sid: int, offs: list[int], recs: list[dict[str, Any]]) -> Any:
    """One record batch from record dicts of tlog.read_segment (decode_payload
    False) at offsets offs of segment sid: the columns a version-2 seal makes."""
    t = columnar.table(list(map(tlog.row_of, recs)), sid, offsets=offs).select(schema.names)
    return pa.RecordBatch.from_arrays(t.combine_chunks().to_batches()[0].columns, schema=schema)


def _raw_column(pa: Any, raws: list[Any], n: int) -> Any:
    """A string column of raw JSON texts, null where the text is null."""
    lens = list(map(len, raws))
    offsets = pa.array(list(accumulate(lens, initial=0)), pa.int32())
    arr = pa.StringArray.from_buffers(n, offsets.buffers()[1], pa.py_buffer(b"".join(raws)))
    nulls = [x == _NULL for x in map(bytes, raws)] if _NULL_LEN in lens else None
    if nulls is not None and any(nulls):
        import pyarrow.compute as pc

        arr = pc.if_else(pa.array(nulls, pa.bool_()), pa.scalar(None, pa.string()), arr)
    return arr


def _late_column(pa: Any, raws: list[Any], n: int) -> Any:
    """The late column from the extras' raw JSON texts: only texts that hold
    '"late":true' somewhere are decoded, to see it is the top-level member."""
    if LATE_TEXT not in b"".join(raws):
        return pa.array([False] * n, pa.bool_())
    return pa.array(
        [LATE_TEXT in b and is_late(json.loads(b)) for b in map(bytes, raws)], pa.bool_()
    )


def _longs(pa: Any, vals: list[Any]) -> Any:
    try:
        return pa.array(vals, pa.int64())
    except (OverflowError, pa.ArrowInvalid):  # beyond a long: null (the JSON keeps it)
        return pa.array(list(map(to_long, vals)), pa.int64())


def from_recs(pa: Any, pc: Any, schema: Any, sid: int, offs: list[int], recs: list[Rec]) -> Any:
    """One record batch from Recs of edgebus.ingest.bodies (payload and extra as raw
    JSON text) at offsets offs of segment sid."""
    n = len(recs)
    st = pa.string()
    topics = list(map(_G["topic"], recs))
    flat = list(chain.from_iterable(topics))
    try:
        values = pa.array(flat, st)
    except (pa.ArrowTypeError, pa.ArrowInvalid, TypeError):  # integer tokens
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
        td = pa.array(list(map(to_double, tdev)), pa.float64())

    def strs(k: str) -> Any:
        return pa.array(list(map(_G[k], recs)), st)

    extras = list(map(_G["extra"], recs))
    arrays = [
        topic,
        tokens,
        _raw_column(pa, list(map(_G["payload"], recs)), n),
        td,
        ts,
        micros.cast(schema.field(5).type),
        strs("link_id"),
        strs("peer_node"),
        strs("peer_sid"),
        _longs(pa, list(map(_G["generation"], recs))),
        _longs(pa, list(map(_G["seq"], recs))),
        strs("origin_kind"),
        strs("conn_id"),
        strs("principal"),
        _raw_column(pa, extras, n),
        _late_column(pa, extras, n),
        pa.array([None] * n, st),  # gateway: a version-1 segment does not name it
        pa.array([sid] * n, pa.int64()),
        pa.array(offs, pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
