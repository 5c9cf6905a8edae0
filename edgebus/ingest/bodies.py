"""Record bodies decoded in bulk with msgspec, by the rules of the log format
(docs/telemetry-log.md section 3), into typed structs.

The bodies of a chunk are checked as UTF-8 and decoded by a single msgspec call
(types enforced there: numbers, integers, strings, nulls, the topic's tokens),
with ``payload`` and ``extra`` kept as their raw JSON text, which is what the
columns hold (the writer logs compact JSON); tags (``"$..."`` one-member
objects) are checked only in the rare values that contain ``"$``.  A body
msgspec refuses is decoded alone by tlog, the reference: valid there (e.g. an
integer beyond 64 bits) it is a record, else it is corrupt.

Needs msgspec (the ``spark`` extra); without it edgebus.ingest.reading reads every
range through tlog.
"""

import operator
from typing import Any

import msgspec

from edgebus import tlog
from edgebus.tlog import json_text

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
_topic = operator.attrgetter("topic")
_extra = operator.attrgetter("extra")


def _from_dict(r: dict[str, Any]) -> Rec:
    """A Rec from a record dict of tlog (decode_payload=False)."""

    def raw(v: Any) -> msgspec.Raw:
        return msgspec.Raw(_NULL if v is None else json_text(v).encode("utf-8"))

    return Rec(
        r["ts_host"],
        list(r["topic"]),
        raw(r["payload"]),
        r["ts_device"],
        r["seq"],
        r["origin_kind"],
        r["conn_id"],
        r["principal"],
        r["link_id"],
        r["peer_node"],
        r["peer_sid"],
        r["generation"],
        raw(r["extra"]),
    )


def _tags_ok(rec: Rec) -> bool:
    """The $-tags in payload/extra are well formed (checked only when present)."""
    for raw in (rec.payload, rec.extra):
        if b'"$' in bytes(raw):
            try:
                tlog.decode_value(msgspec.json.decode(raw))
            except Exception:
                return False
    return True


def _decode_one(body: bytes | memoryview) -> tuple[Rec, None] | tuple[None, str]:
    """(Rec, None) for one body, or (None, reason) if it breaks the rules."""
    try:
        bytes(body).decode("utf-8")
        rec = _one_decoder.decode(body)
    except (UnicodeDecodeError, msgspec.DecodeError):
        rec = None
    if rec is not None and rec.topic and _extra_ok(rec.extra) and _tags_ok(rec):
        return rec, None
    try:  # the reference decoder: its verdict, and the values it accepts
        return _from_dict(tlog.decode_body(bytes(body), False)), None
    except Exception as e:
        return None, "invalid body: %s" % e


def _extra_ok(raw: msgspec.Raw) -> bool:
    b = bytes(raw)
    return b[:1] == b"{" or b == _NULL


def _chunk_ok(recs: list[Rec], tags: bool) -> bool:
    """Every record keeps the rules msgspec cannot express: a non-empty topic,
    extra an object or null, well-formed tags (looked at only when the chunk
    has a '"$'). Checked in C-speed passes: compact JSON has no raw newline, so
    in the extras joined by newlines each starts right after one."""
    if not all(map(_topic, recs)):
        return False
    extras = b"\n" + b"\n".join(map(_extra, recs))
    if extras.count(b"\n{") + extras.count(b"\nnull") != len(recs):
        return False
    return not tags or all(map(_tags_ok, recs))


def decode_chunk(bodies: list[Any]) -> tuple[list[Rec], tuple[int, str | None] | None]:
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
    out: list[Rec] = []
    for i, b in enumerate(bodies):
        r, why = _decode_one(b)
        if r is None:
            return out, (i, why)
        out.append(r)
    return out, None
