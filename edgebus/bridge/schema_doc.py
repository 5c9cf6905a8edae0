"""The bridge configuration's JSON Schema, made from SCHEMA (schema.py): one
source for what parse checks (schema_check) and what an editor is told
(docs/bridge.md, "Editor support"). JSON Schema cannot say what needs the file
system or the topic grammar (a directory that can be made, a topic pattern):
those kinds carry a ``format`` an editor ignores and schema_check still checks."""

from __future__ import annotations

import json
import sys
from typing import Any

from edgebus.bridge.schema import (
    ADDRESS,
    CHOICE,
    DIR,
    FILE,
    NODE,
    PATTERNS,
    RANGE,
    RULES,
    SCHEMA,
    SOCKET,
    TABLES,
    TEXT,
    TOP,
    URL,
    Key,
)

DIALECT = "https://json-schema.org/draft/2020-12/schema"
# What each kind means, for an editor's hover text.
_WORDS = {
    TEXT: "a non-empty string",
    NODE: "a node id: one topic level, without '/', '+', '#' or NUL",
    DIR: "a directory (relative: from the configuration's directory)",
    SOCKET: "a unix socket's path (relative: from the configuration's directory)",
    FILE: "a file the bridge reads",
    ADDRESS: "host:port",
    URL: "mqtt://host[:port] or mqtts://host[:port]",
    PATTERNS: "topic patterns (+ one level, # the rest)",
    RULES: "topic patterns, or [pattern, prefix] pairs",
}
_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array"}
_NOT_EMPTY = (TEXT, NODE, DIR, SOCKET, FILE, URL, ADDRESS)


def _pattern_list(pairs: bool) -> dict[str, Any]:
    one: dict[str, Any] = {"type": "string", "minLength": 1, "format": "edgebus-topic-pattern"}
    if pairs:
        pair = {"type": "array", "prefixItems": [one, {"type": "string"}], "minItems": 2}
        one = {"anyOf": [one, {**pair, "maxItems": 2}]}
    return {"type": "array", "items": one}


def _key(spec: Key, nested: bool) -> dict[str, Any]:
    """The JSON Schema of one key."""
    # (int, float) is JSON Schema's "number", which takes integers
    whole = {"integer"} if float in spec.types else set()
    types = sorted({_TYPES[t] for t in spec.types} - whole)
    out: dict[str, Any] = {"type": types[0] if len(types) == 1 else types}
    k = spec.kind
    if k in _NOT_EMPTY:
        out["minLength"] = 1
    if k == RANGE:
        out.update(minimum=spec.lo, maximum=spec.hi)
        words = "from %r to %r%s%s" % (spec.lo, spec.hi, spec.unit, spec.note)
        out["description"] = words
    elif k == CHOICE:
        out["enum"] = list(spec.choices)
    elif k == NODE:
        out["pattern"] = "^[^/+#\\u0000]*$"
    elif k in (PATTERNS, RULES):
        out.update(_pattern_list(k == RULES))
    elif k == TABLES:
        out["items"] = table("mqtt.devices") if nested else {"type": "object"}
    if k in _WORDS:
        out["description"] = _WORDS[k]
    return out


def table(name: str, nested: bool = True) -> dict[str, Any]:
    """The JSON Schema of table ``name`` of SCHEMA; not nested, an array of
    tables in it takes any tables (schema_check checks each as its own)."""
    label, keys = SCHEMA[name]
    return {
        "type": "object",
        "title": label,
        "properties": {k: _key(s, nested) for k, s in keys.items()},
        "additionalProperties": False,
    }


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a bridge configuration file."""
    props: dict[str, Any] = {}
    for name, kind in sorted(TOP.items()):
        t = table(name)
        props[name] = {"type": "array", "items": t, "title": t["title"]} if kind is list else t
    return {
        "$schema": DIALECT,
        "title": "edgebus-bridge configuration",
        "description": "The bridge's TOML configuration (docs/bridge.md).",
        "type": "object",
        "properties": props,
        "additionalProperties": False,
    }


def text() -> str:
    """The JSON Schema as the shipped bridge.schema.json holds it."""
    return json.dumps(json_schema(), indent=2) + "\n"


if __name__ == "__main__":  # remakes bridge.schema.json (docs/schemas.md)
    sys.stdout.write(text())
