"""`edgebus views infer` without Spark: the ingest table's rows of a topic
pattern read with pyarrow in this process (no JVM), their payloads' key types
counted as payloads.key_types counts them.

Only the table's committed files are read (edgebus.ingest.report.arrow
listed_files), and of them only ``topic_tokens`` and ``payload``, a batch at
a time.  A payload is parsed as payloads.payload_map parses it: text starting
with ``{`` as Spark's from_json reads a map (what follows the object is
ignored; NaN and Infinity are numbers), any other text as parse_json reads one
value (whitespace around it; after a number, true, false or null only
whitespace), ``{"value": v}``; a payload that fails, or is null, has no map.
Each value's type is json_types.schema_of's.  Not mirrored, as the bridge
logs a payload as the JSON text of a Python value (edgebus.tlog json_text),
which has none of them: from_json's lenient forms that Python's json cannot
read (single quotes, ``+INF``); and a payload nested near Python's recursion
limit (about 1,000 levels, Spark's limit too) has no map here.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING, Any

from edgebus.ingest.views.json_types import loads, schema_of

if TYPE_CHECKING:
    from collections.abc import Iterator

_SPACE = " \t\n\r"  # JSON's whitespace
_COLUMNS = ["topic_tokens", "payload"]


def key_types(table: str, tokens: tuple[str, ...]) -> dict[str, list[tuple[str, int]]]:
    """{payload key: [(schema_of_variant text, rows), ...]} over the table's
    rows whose topic matches the pattern's tokens (payloads.key_types' counts)."""
    counts: Counter[tuple[str, str]] = Counter()
    for payload in payloads(table, tokens):
        entries = payload_types(payload)
        if entries:
            counts.update(entries)
    out: dict[str, list[tuple[str, int]]] = {}
    for (key, t), n in counts.items():
        out.setdefault(key, []).append((t, n))
    return out


def payloads(table: str, tokens: tuple[str, ...]) -> Iterator[str | None]:
    """The payloads of the table's committed rows whose topic matches tokens.
    The topics are matched here, not with pyarrow.compute: a pattern's token
    made an Arrow scalar imports pandas (0.3-0.4 s) where it is installed."""
    import pyarrow.parquet as pq

    from edgebus.ingest.report.arrow import listed_files

    for f in listed_files(os.path.abspath(table)):
        for batch in pq.ParquetFile(f).iter_batches(columns=_COLUMNS):
            topics = batch.column("topic_tokens").to_pylist()
            rows = [i for i, t in enumerate(topics) if matches(t, tokens)]
            if rows:
                texts = batch.column("payload").to_pylist()
                yield from (texts[i] for i in rows)


def matches(topic: list[str], tokens: tuple[str, ...]) -> bool:
    """Whether a row's topic_tokens match a pattern's tokens (+ one token,
    # the rest, none included): payloads.topic_filter's rule."""
    if tokens[-1:] == ("#",):
        tokens = tokens[:-1]
        if len(topic) < len(tokens):
            return False
    elif len(topic) != len(tokens):
        return False
    return all(p == "+" or p == t for p, t in zip(tokens, topic))


def payload_types(payload: str | None) -> list[tuple[str, str]] | None:
    """The (key, schema_of_variant text) of each entry of payload_map's map of
    a payload: an object's members (a key twice, twice), else one ``value``;
    None when the map is null."""
    if payload is None:
        return None
    try:
        if payload.startswith("{"):
            members, _ = loads(payload, constants=True)
            return [(k, schema_of(v)) for k, v in members]
        v = _value(payload)
        return [("value", schema_of(v))]
    except (ValueError, RecursionError):
        return None


def _value(payload: str) -> Any:
    """The one value parse_json reads in payload (ValueError where it reads none)."""
    text = payload.strip(_SPACE)
    v, end = loads(text)
    if end < len(text) and type(v) not in (str, list, tuple) and text[end] not in _SPACE:
        raise ValueError("no whitespace after a number, true, false or null")
    return v
