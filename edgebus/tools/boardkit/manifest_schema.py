"""A board manifest against its JSON Schema (manifest.schema.json beside this
module, the one source of the fields' shapes: `edgebus schema boards`
exports it for editors, docs/schemas.md). The first problem is one BoardError
line naming the field, what was expected and what was got; what JSON Schema
cannot say across fields is boards.validate's."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from edgebus.tlog.configschema import Validator, shipped

# What a type alone says is expected (a node's description says more where it has one).
_WORDS = {
    "string": "a string",
    "boolean": "true or false",
    "integer": "an integer",
    "array": "a list",
    "object": "an object",
}
HEX = "edgebus-hex"  # the format of an offset: an int, or "0x..." turned into one


class ManifestError(ValueError):
    """A manifest that does not fit the schema; the message names the field."""


def schema() -> dict[str, Any]:
    """The manifests' JSON Schema (draft 2020-12), as shipped."""
    return shipped(__package__, "manifest.schema.json")


@cache
def _validator() -> Any:
    return Validator(schema(), format_checker=Validator.FORMAT_CHECKER)


def _where(path: Any) -> str:
    out = ""
    for p in path:
        out += "[%d]" % p if isinstance(p, int) else ("." if out else "") + p
    return out


def _expected(e: Any) -> str:
    node = e.schema
    if e.validator in ("minimum", "maximum"):
        lo, hi = node.get("minimum"), node.get("maximum")
        return "an integer " + (">= %s" % lo if hi is None else "%s..%s" % (lo, hi))
    if e.validator in ("enum", "const"):
        choices = node["enum"] if e.validator == "enum" else [node["const"]]
        return "one of " + ", ".join(json.dumps(c) for c in choices)
    if "pattern" in node or "anyOf" in node:  # its description says the shape
        return str(node["description"])
    types = node["type"]
    return _WORDS[[t for t in ([types] if isinstance(types, str) else types) if t != "null"][0]]


def say(e: Any) -> str:
    """A jsonschema error in the manifest's words: "field: expected X, got Y"."""
    deeper = [c for c in e.context or () if c.path]  # context paths are relative
    if e.validator == "anyOf" and deeper:  # a list's entry: name the entry
        return say(deeper[0])
    where, value = _where(e.absolute_path), e.instance
    if e.validator == "required":
        missing = next(k for k in e.validator_value if k not in value)
        return "%s: missing key %s" % (where or "manifest", json.dumps(missing))
    if e.validator == "additionalProperties":
        unknown = sorted(set(value) - set(e.schema["properties"]))
        return "%s: unknown key %s (allowed: %s)" % (
            where,
            ", ".join(json.dumps(k) for k in unknown),
            ", ".join(e.schema["properties"]),
        )
    if e.validator == "format" and e.validator_value == "regex":
        why = e.cause or re.error("unknown")
        return "%s: not a valid regular expression (%s): %s" % (where, why, json.dumps(value))
    return "%s: expected %s, got %s" % (where, _expected(e), json.dumps(value))


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    return {**schema()["$defs"][ref.rsplit("/", 1)[1]], **node} if ref else node


def _branches(node: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """The properties node gives value, its if/then/else branches that apply included."""
    props = dict(node.get("properties", {}))
    for sub in [node, *node.get("allOf", [])]:
        if "if" in sub:
            branch = sub.get("then" if Validator(sub["if"]).is_valid(value) else "else", {})
            props.update(branch.get("properties", {}))
    return props


def normalise(node: dict[str, Any], value: Any) -> Any:
    """A valid value as the tools read it: absent keys at their defaults (null
    where none is given), hex strings as ints."""
    node = _resolve(node)
    if isinstance(value, dict):
        props = _branches(node, value)
        return {
            k: normalise(p, value[k]) if k in value else _resolve(p).get("default")
            for k, p in props.items()
        }
    if isinstance(value, list) and "items" in node:
        return [normalise(node["items"], v) for v in value]
    if node.get("format") == HEX and isinstance(value, str):
        return int(value, 16)
    return value


def check(data: Any) -> dict[str, Any]:
    """The manifest normalised; ManifestError with the first problem in the
    schema's order (a table's unknown and missing keys, then its fields)."""
    for e in _validator().iter_errors(data):
        raise ManifestError(say(e))
    out: dict[str, Any] = normalise(schema(), data)
    return out
