"""The type text Spark's ``schema_of_variant`` gives a JSON value, in Python.

`edgebus views infer` without Spark (edgebus.ingest.views.arrow) counts, per
payload key, the type Spark would print for the key's value, so that
types.infer drafts the same block either way.  Written by hand because
pyarrow has no such function: it mirrors Spark 4's rules (SchemaOfVariant,
JsonInferSchema.compatibleType for an array's elements, VariantBuilder's
numbers), checked value by value against pyspark 4.3
(tests/host/spark/test_spark_views.py, test_json_types_are_sparks):

- an integer is ``BIGINT`` in 64 bits (every integer width prints BIGINT), else
  ``DECIMAL(digits,0)`` up to 38 digits, else ``DOUBLE``; one of more than
  1,000 digits is not JSON to Spark's parser;
- a number with a fraction is ``DECIMAL(p,s)`` of its digits as written when
  it has at most 38 digits, 38 of them after the point, less the fraction's
  trailing zeros (``21.50`` DECIMAL(3,1), ``1.0`` DECIMAL(1,0), ``0.001``
  DECIMAL(3,3)); else ``DOUBLE``; a number with an exponent is ``DOUBLE``;
- a string ``STRING``, a boolean ``BOOLEAN``, null ``VOID``;
- an object ``OBJECT<k: type, ...>``, keys in Java's string order (UTF-16
  code units), backquoted unless a plain ASCII word; a key twice fails;
- an array ``ARRAY<type>`` of its elements' types merged: numbers to the
  DECIMAL holding both (BIGINT is DECIMAL(20,0); over 38 digits DOUBLE), to
  DOUBLE with a DOUBLE; objects field by field; arrays element by element;
  null to the other; anything else ``VARIANT``; ``ARRAY<VOID>`` when empty.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

VType = tuple[Any, ...]  # ("BIGINT",), ("DECIMAL", p, s), ("ARRAY", t), ("OBJECT", ((k, t), ...))

MAX_DIGITS = 38  # a Spark decimal's
MAX_INT_DIGITS = 1000  # Jackson's longest number (StreamReadConstraints)
_BIGINT = ("BIGINT",)
_DOUBLE = ("DOUBLE",)
_VOID = ("VOID",)
# The types of the values that have one whatever their value.
_SCALARS = {str: ("STRING",), bool: ("BOOLEAN",), float: _DOUBLE, type(None): _VOID}
_WORD = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


class Number(str):
    """A JSON number with a fraction or an exponent, as written (its type
    depends on the text: ``1e5`` is a DOUBLE, ``1.0`` a DECIMAL)."""

    __slots__ = ()


def _no_constant(name: str) -> Any:
    raise ValueError("%s is not JSON" % name)


# Objects as tuples of (key, value): a key twice is seen, and fails.
_STRICT = json.JSONDecoder(parse_float=Number, parse_constant=_no_constant, object_pairs_hook=tuple)
_LENIENT = json.JSONDecoder(parse_float=Number, object_pairs_hook=tuple)


def loads(text: str, start: int = 0, constants: bool = False) -> tuple[Any, int]:
    """The JSON value at text[start] and the index after it (what follows is
    the caller's): numbers with a fraction or exponent as Number, objects as
    tuples of (key, value) pairs.  ``constants``: NaN and Infinity are
    numbers (Spark's from_json takes them; parse_json does not).
    ValueError (RecursionError nested too deep) where Spark's parser fails:
    bad JSON, a string with half a surrogate pair."""
    v, end = (_LENIENT if constants else _STRICT).raw_decode(text, start)
    if "\\u" in text and _SURROGATE.search(text):
        try:
            json.dumps(v, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("half a surrogate pair") from None
    return v, end


def schema_of(v: Any) -> str:
    """schema_of_variant's text for a value loads() gave (ValueError where
    Spark has no variant for it: a key twice, too many digits)."""
    t = type(v)
    if t is int and -(2**63) <= v < 2**63:
        return "BIGINT"
    scalar = _SCALARS.get(t)
    return _text(scalar if scalar is not None else type_of(v))


def type_of(v: Any) -> VType:
    """The type tree of a value loads() gave."""
    t = type(v)
    if t is int:
        return _BIGINT if -(2**63) <= v < 2**63 else _integer(v)
    if t is Number:
        return _number(v)
    if t is list:
        e: VType = _VOID
        for x in v:
            xt = _SCALARS.get(type(x)) or type_of(x)
            if xt != e:
                e = merge(e, xt)
        return ("ARRAY", e)
    if t is tuple:
        keys = [k for k, _ in v]
        if len(set(keys)) != len(keys):
            raise ValueError("a key twice in one object")
        return ("OBJECT", tuple((k, type_of(x)) for k, x in sorted(v, key=_pair_order(keys))))
    scalar = _SCALARS.get(t)
    if scalar is None:
        raise TypeError("not a loads() value: %r" % (v,))
    return scalar


def _integer(v: int) -> VType:
    """An integer's type past 64 bits."""
    digits = len(str(abs(v)))
    if digits > MAX_INT_DIGITS:
        raise ValueError("a number of %d digits" % digits)
    return ("DECIMAL", digits, 0) if digits <= MAX_DIGITS else _DOUBLE


@functools.lru_cache(maxsize=4096)
def _number(text: str) -> VType:
    """The type of a number with a fraction or an exponent, from its text."""
    if "e" in text or "E" in text:
        return _DOUBLE
    whole, _, frac = text.lstrip("-").partition(".")
    if len(frac) > MAX_DIGITS or len((whole + frac).lstrip("0")) > MAX_DIGITS:
        return _DOUBLE
    frac = frac.rstrip("0")  # Spark keeps the value, not its trailing zeros
    digits = len((whole + frac).lstrip("0")) or 1
    return ("DECIMAL", max(digits, len(frac)), len(frac))


def _java_key(k: str) -> bytes:
    return k.encode("utf-16-be", "surrogatepass")


def _pair_order(keys: list[str]) -> Any:
    """The sort key of an object's (key, value) pairs: Java's string order,
    which is Python's unless a key is beyond ASCII."""
    if all(k.isascii() for k in keys):
        return lambda p: p[0]
    return lambda p: _java_key(p[0])


_NUMBERS = ("BIGINT", "DECIMAL", "DOUBLE")


@functools.lru_cache(maxsize=4096)
def merge(a: VType, b: VType) -> VType:
    """The type of an array holding values of types a and b, as Spark merges them."""
    if a == b or b == _VOID:
        return a
    if a == _VOID:
        return b
    if a[0] in _NUMBERS and b[0] in _NUMBERS:
        if _DOUBLE in (a, b):
            return _DOUBLE
        (p1, s1), (p2, s2) = (t[1:] if t[0] == "DECIMAL" else (20, 0) for t in (a, b))
        scale, whole = max(s1, s2), max(p1 - s1, p2 - s2)
        return _DOUBLE if whole + scale > MAX_DIGITS else ("DECIMAL", whole + scale, scale)
    if a[0] == b[0] == "ARRAY":
        return ("ARRAY", merge(a[1], b[1]))
    if a[0] == b[0] == "OBJECT":
        fields = dict(a[1])
        for k, t in b[1]:
            fields[k] = merge(fields[k], t) if k in fields else t
        return ("OBJECT", tuple(sorted(fields.items(), key=_pair_order(list(fields)))))
    return ("VARIANT",)


@functools.lru_cache(maxsize=4096)
def _text(t: VType) -> str:
    return text(t)


def text(t: VType) -> str:
    """A type tree as schema_of_variant prints it."""
    k = t[0]
    if k == "DECIMAL":
        return "DECIMAL(%d,%d)" % t[1:]
    if k == "ARRAY":
        return "ARRAY<%s>" % text(t[1])
    if k == "OBJECT":
        return "OBJECT<%s>" % ", ".join("%s: %s" % (quote(f), text(ft)) for f, ft in t[1])
    return str(k)


def quote(name: str) -> str:
    """A field name as Spark prints it (QuotingUtils.quoteIfNeeded)."""
    return name if _WORD.fullmatch(name) else "`%s`" % name.replace("`", "``")
