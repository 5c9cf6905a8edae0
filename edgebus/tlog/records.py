"""Record bodies: the thirteen members, their values (JSON with two tags), and
the record of an edgebus Message (docs/telemetry-log.md section 3)."""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any, Callable, Iterable

from edgebus.tlog.format import MAX_BODY_BYTES

if TYPE_CHECKING:
    from edgebus import Message

# The body's members, in the order the writer emits them.
FIELDS = (
    "ts_host",
    "topic",
    "payload",
    "ts_device",
    "seq",
    "origin_kind",
    "conn_id",
    "principal",
    "link_id",
    "peer_node",
    "peer_sid",
    "generation",
    "extra",
)
_FIELD_SET = frozenset(FIELDS)
_REQUIRED = ("ts_host", "topic", "payload")
_STR_FIELDS = ("origin_kind", "conn_id", "principal", "link_id", "peer_node", "peer_sid")
_INT_FIELDS = ("seq", "generation")
# The members between ts_device and extra, each with the one type it may have.
_TYPED = tuple((k, int if k in _INT_FIELDS else str) for k in FIELDS[4:-1])


# ---------------------------------------------------------------------------
# Values: JSON with two tags ($b64 for bytes, $lit to escape)


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_num(v: Any) -> bool:
    return (type(v) is int) or (type(v) is float and math.isfinite(v))


def encode_value(v: Any) -> Any:
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


def decode_value(v: Any) -> Any:
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


def _compact_encoder() -> Callable[[Any], str]:
    """The encoder of json.dumps(v, ensure_ascii=False, allow_nan=False,
    separators=(",", ":")) made once: dumps builds one per call, which costs
    more than encoding a small record.  No circular-reference check: logged
    values are validated trees (encode_value)."""
    try:
        from json.encoder import c_encode_basestring, c_make_encoder  # type: ignore[attr-defined]  # C parts, not in typeshed
    except ImportError:  # pragma: no cover - no _json
        c_make_encoder = None
    if c_make_encoder is None or c_encode_basestring is None:
        return json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode

    def default(o: Any) -> Any:
        raise TypeError("Object of type %s is not JSON serializable" % type(o).__name__)

    enc = c_make_encoder(None, default, c_encode_basestring, None, ":", ",", False, False, False)

    def encode(v: Any) -> str:
        return "".join(enc(v, 0))

    return encode


# The JSON text of a logged value: compact, raw UTF-8, as the body holds it.
json_text = _compact_encoder()


def topic_text(tokens: Iterable[Any]) -> str:
    """The 'a/b/c' form of a topic token sequence (ints as decimal text)."""
    return "/".join([str(t) for t in tokens])


# ---------------------------------------------------------------------------
# Bodies


def _check_record(record: dict[str, Any]) -> None:
    if not isinstance(record, dict):
        raise TypeError("record must be a dict, not %s" % type(record).__name__)
    unknown = [k for k in record if k not in _FIELD_SET]
    if unknown:
        raise ValueError("unknown record field(s): %s" % ", ".join(sorted(map(str, unknown))))
    for k in _REQUIRED:
        if k not in record:
            raise ValueError("record lacks required field %r" % k)


def _encode_nested(v: Any) -> Any:
    try:
        return encode_value(v)
    except RecursionError:  # a value nested deeper than Python can recurse
        raise ValueError("record nests too deeply") from None


def encode_body(record: dict[str, Any]) -> bytes:
    """Validated, compact UTF-8 JSON body bytes for a record dict."""
    return dump_body(normalize(record))


def normalize(record: dict[str, Any]) -> dict[str, Any]:
    """The body of a record dict as JSON-model values, validated: the thirteen
    members in order, topic a list, payload and extra encoded (tags).  Raises
    TypeError/ValueError for a record the log cannot hold."""
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
    body = {
        "ts_host": ts_host,
        "topic": list(topic),
        "payload": _encode_nested(record["payload"]),
        "ts_device": ts_device,
    }
    for k, kind in _TYPED:
        v = get(k)
        if v is not None and type(v) is not kind:
            raise TypeError(
                "%s must be %s or None, not %r" % (k, "an int" if kind is int else "a str", v)
            )
        body[k] = v
    extra = get("extra")
    if extra is not None:
        if not isinstance(extra, dict):
            raise TypeError("extra must be a dict or None, not %s" % type(extra).__name__)
        extra = _encode_nested(extra) if extra else None
    body["extra"] = extra
    return body


def dump_body(body: dict[str, Any]) -> bytes:
    """The compact UTF-8 JSON bytes of a body normalize() made."""
    return _dump(body, _value_text(body["payload"]), _value_text(body["extra"]))


# A body's text, its members in FIELDS order: the JSON json_text(body) gives,
# made by hand because the body's atoms are already checked (normalize) and
# its payload's and extra's text is made once for the body and the row.
_BODY = "{" + ",".join('"%s":%%s' % k for k in FIELDS) + "}"


def _value_text(v: Any) -> str:
    """json_text of a payload or extra normalize() encoded (null for None)."""
    if v is None:
        return "null"
    try:
        return json_text(v)
    except RecursionError:
        raise ValueError("record nests too deeply") from None


def _atom(v: Any) -> str:
    """The JSON text of a checked atom: a str, an int, a finite float or None
    (repr is what json writes for an int and a float)."""
    if v is None:
        return "null"
    return encode_basestring(v) if type(v) is str else repr(v)


def _dump(body: dict[str, Any], payload: str, extra: str) -> bytes:
    topic = ",".join([encode_basestring(t) if type(t) is str else repr(t) for t in body["topic"]])
    data = (
        _BODY
        % (
            repr(body["ts_host"]),
            "[" + topic + "]",
            payload,
            _atom(body["ts_device"]),
            _atom(body["seq"]),
            _atom(body["origin_kind"]),
            _atom(body["conn_id"]),
            _atom(body["principal"]),
            _atom(body["link_id"]),
            _atom(body["peer_node"]),
            _atom(body["peer_sid"]),
            _atom(body["generation"]),
            extra,
        )
    ).encode("utf-8")
    if len(data) > MAX_BODY_BYTES:
        raise ValueError(
            "record body of %d bytes exceeds MAX_BODY_BYTES (%d)" % (len(data), MAX_BODY_BYTES)
        )
    return data


def encode_record(record: dict[str, Any]) -> tuple[bytes, tuple[Any, ...]]:
    """(body bytes, row_of tuple) of a record dict, checked as normalize()
    checks it, its payload and extra encoded to JSON text once for both."""
    body = normalize(record)
    p, e = body["payload"], body["extra"]
    ptext, etext = _value_text(p), _value_text(e)
    data = _dump(body, ptext, etext)
    return data, _row(body, None if p is None else ptext, None if e is None else etext)


def is_late(extra: Any) -> bool:
    """Whether a record's extra (a dict, or None) says late: its member
    ``late`` is JSON true (a reading delivered out of a device's spool)."""
    return type(extra) is dict and extra.get("late") is True


def row_of(body: dict[str, Any]) -> tuple[Any, ...]:
    """A body (as normalize() or decode_body(..., False) give it) as the row a
    version-2 seal builds its columns from: the thirteen members in FIELDS
    order, topic a tuple, payload and extra as their JSON text (None for
    null), then whether extra's member late is true.  A tuple of atoms: the
    cyclic GC stops tracking it, so a writer holding a segment's rows costs
    collections nothing."""
    p, e = body["payload"], body["extra"]
    return _row(body, None if p is None else json_text(p), None if e is None else json_text(e))


def _row(body: dict[str, Any], payload: str | None, extra: str | None) -> tuple[Any, ...]:
    return (
        body["ts_host"],
        tuple(body["topic"]),
        payload,
        body["ts_device"],
        body["seq"],
        body["origin_kind"],
        body["conn_id"],
        body["principal"],
        body["link_id"],
        body["peer_node"],
        body["peer_sid"],
        body["generation"],
        extra,
        is_late(body["extra"]),
    )


def _no_constants(name: str) -> Any:
    raise ValueError("non-finite number %s" % name)


def decode_body(data: bytes, decode_payload: bool) -> dict[str, Any]:
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
    if (
        type(topic) is not list
        or not topic
        or not all(type(t) is str or type(t) is int for t in topic)
    ):
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
    rec = {k: obj[k] for k in FIELDS}  # known members only, schema order
    rec["topic"] = tuple(topic)
    if decode_payload:
        rec["payload"] = payload
        rec["extra"] = extra
    return rec


def record_from_message(msg: Message, ts_host: float | None = None) -> dict[str, Any]:
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
    return {
        "ts_host": time.time() if ts_host is None else ts_host,
        "topic": tuple(msg.topic),
        "payload": msg.payload,
        "ts_device": ts if _is_num(ts) else None,
        "seq": seq if type(seq) is int else None,
        "origin_kind": _text(getattr(o, "kind", None)),
        "conn_id": _text(getattr(o, "conn_id", None)),
        "principal": _text(getattr(o, "principal", None)),
        "link_id": _text(getattr(o, "link_id", None)),
        "peer_node": _text(getattr(o, "peer_node", None)),
        "peer_sid": _text(getattr(o, "peer_sid", None)),
        "generation": getattr(o, "generation", None),
        "extra": dict(extra) if extra else None,
    }


def _text(v: Any) -> str | None:
    """A provenance value as the log holds it: None, or a str (str(v))."""
    return v if v is None or type(v) is str else str(v)
