"""Arrow record batches of SCHEMA, built column by column from the records
of one segment: record dicts of tlog, or the bulk decoder's Recs."""
import json
import operator
from itertools import accumulate, chain

import tlog
from ingest.schema import LATE_TEXT, is_late, json_text, to_double, to_long

_NULL = b"null"
_NULL_LEN = len(_NULL)
_PROV = operator.itemgetter("link_id", "peer_node", "peer_sid", "generation", "seq",
                            "origin_kind", "conn_id", "principal")
# A Rec's attributes are the body's members.
_G = {k: operator.attrgetter(k) for k in tlog.FIELDS}


def from_dicts(pa, pc, schema, sid, offs, recs):
    """One record batch from record dicts of tlog.read_segment (decode_payload
    False) at offsets offs of segment sid."""
    n = len(recs)
    tokens = [list(map(str, r["topic"])) for r in recs]
    ts = pa.array([r["ts_host"] for r in recs], pa.float64())
    micros = pc.cast(pc.round(pc.multiply(ts, 1e6)), pa.int64())
    prov = list(zip(*map(_PROV, recs)))
    try:
        ints = [pa.array(prov[3], pa.int64()), pa.array(prov[4], pa.int64())]
    except (OverflowError, pa.ArrowInvalid):    # beyond a long: null (the JSON keeps it)
        ints = [pa.array(list(map(to_long, prov[3])), pa.int64()),
                pa.array(list(map(to_long, prov[4])), pa.int64())]
    try:
        td = pa.array([r["ts_device"] for r in recs], pa.float64())
    except (OverflowError, pa.ArrowInvalid):    # an int a double holds only roughly
        td = pa.array([to_double(r["ts_device"]) for r in recs], pa.float64())
    st = pa.string()
    arrays = [
        pa.array(["/".join(t) for t in tokens], st),
        pa.array(tokens, schema.field(1).type),
        pa.array([None if p is None else json_text(p)
                  for p in map(operator.itemgetter("payload"), recs)], st),
        td, ts, micros.cast(schema.field(5).type),
        pa.array(prov[0], st), pa.array(prov[1], st), pa.array(prov[2], st),
        ints[0], ints[1],
        pa.array(prov[5], st), pa.array(prov[6], st), pa.array(prov[7], st),
        pa.array([None if x is None else json_text(x)
                  for x in map(operator.itemgetter("extra"), recs)], st),
        pa.array([is_late(x) for x in map(operator.itemgetter("extra"), recs)], pa.bool_()),
        pa.array([sid] * n, pa.int64()), pa.array(offs, pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


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


def _late_column(pa, raws, n):
    """The late column from the extras' raw JSON texts: only texts that hold
    '"late":true' somewhere are decoded, to see it is the top-level member."""
    if LATE_TEXT not in b"".join(raws):
        return pa.array([False] * n, pa.bool_())
    return pa.array([LATE_TEXT in b and is_late(json.loads(b)) for b in map(bytes, raws)],
                    pa.bool_())


def _longs(pa, vals):
    try:
        return pa.array(vals, pa.int64())
    except (OverflowError, pa.ArrowInvalid):      # beyond a long: null (the JSON keeps it)
        return pa.array(list(map(to_long, vals)), pa.int64())


def from_recs(pa, pc, schema, sid, offs, recs):
    """One record batch from Recs of ingest.bodies (payload and extra as raw
    JSON text) at offsets offs of segment sid."""
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
        td = pa.array(list(map(to_double, tdev)), pa.float64())

    def strs(k):
        return pa.array(list(map(_G[k], recs)), st)
    extras = list(map(_G["extra"], recs))
    arrays = [
        topic, tokens,
        _raw_column(pa, list(map(_G["payload"], recs)), n),
        td, ts, micros.cast(schema.field(5).type),
        strs("link_id"), strs("peer_node"), strs("peer_sid"),
        _longs(pa, list(map(_G["generation"], recs))), _longs(pa, list(map(_G["seq"], recs))),
        strs("origin_kind"), strs("conn_id"), strs("principal"),
        _raw_column(pa, extras, n), _late_column(pa, extras, n),
        pa.array([sid] * n, pa.int64()), pa.array(offs, pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
