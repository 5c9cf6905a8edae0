"""The types of payload values, for typed views (edgebus.ingest.views).

A payload value's type is what Spark's ``schema_of_variant`` says of it
(``BIGINT``, ``DECIMAL(3,1)``, ``STRING``, ``OBJECT<x: BIGINT>``, ``ARRAY<...>``,
``VOID`` for null), parsed here into a small tree: ``(name,)``,
``("DECIMAL", p, s)``, ``("OBJECT", ((field, type), ...))``, ``("ARRAY", type)``.
A variant keeps a JSON string apart from a number (``"21.5"`` is a STRING,
``21.5`` a DECIMAL), which the text-based ``get_json_object``/``from_json``
cannot; that is what lets a view reject a string in a DOUBLE column.

``fits(declared, observed)`` is the view's policy for one value; ``infer``
chooses a new column's type from the types a batch's values had.
"""

from __future__ import annotations

from typing import Any

VType = tuple[Any, ...]

_INTEGRAL = ("ByteType", "ShortType", "IntegerType", "LongType")
_FRACTIONAL = ("FloatType", "DoubleType", "DecimalType")
_NUMBERS = ("BIGINT", "DECIMAL", "DOUBLE", "FLOAT", "INT", "SMALLINT", "TINYINT")


def parse(text: str) -> VType:
    """schema_of_variant's text as a type tree (ValueError when it is not one)."""
    t, i = _parse(text, 0)
    if i != len(text):
        raise ValueError("unexpected %r in variant type %r" % (text[i:], text))
    return t


def _name(text: str, i: int) -> tuple[str, int]:
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] == "`":
        out = []
        i += 1
        while i < len(text):
            if text[i] == "`":
                if text[i + 1 : i + 2] == "`":
                    out.append("`")
                    i += 2
                    continue
                return "".join(out), i + 1
            out.append(text[i])
            i += 1
        raise ValueError("unterminated name in %r" % text)
    j = i
    while j < len(text) and text[j] not in "<>(),: ":
        j += 1
    if j == i:
        raise ValueError("a name expected at %d in %r" % (i, text))
    return text[i:j], j


def _expect(text: str, i: int, ch: str) -> int:
    while i < len(text) and text[i] == " ":
        i += 1
    if text[i : i + 1] != ch:
        raise ValueError("%r expected at %d in %r" % (ch, i, text))
    return i + 1


def _parse(text: str, i: int) -> tuple[VType, int]:
    name, i = _name(text, i)
    name = name.upper()
    if name == "DECIMAL" and text[i : i + 1] == "(":
        j = text.index(")", i)
        p, s = text[i + 1 : j].split(",")
        return ("DECIMAL", int(p), int(s)), j + 1
    if name == "ARRAY":
        elem, i = _parse(text, _expect(text, i, "<"))
        return ("ARRAY", elem), _expect(text, i, ">")
    if name == "OBJECT":
        i = _expect(text, i, "<")
        fields: list[tuple[str, VType]] = []
        while text[i : i + 1] != ">":
            if fields:
                i = _expect(text, i, ",")
            field, i = _name(text, i)
            t, i = _parse(text, _expect(text, i, ":"))
            fields.append((field, t))
        return ("OBJECT", tuple(fields)), i + 1
    return (name,), i


def fits(dt: Any, ot: VType) -> bool:
    """May a value of observed type ot go in a column of Spark type dt?
    Numbers fit any number column (an integral one only without a fraction:
    ``3`` or ``3.0``, not ``3.5``); a string fits STRING, DATE and TIMESTAMP
    (the cast then decides); an object fits a STRUCT holding each of its
    fields, or a MAP; anything fits VARIANT; null fits all.  Range and format
    are checked by the cast itself (try_variant_get), not here."""
    kind, o = type(dt).__name__, ot[0]
    if o == "VOID" or kind == "VariantType":
        return True
    if kind in _INTEGRAL:
        return o in ("BIGINT", "INT", "SMALLINT", "TINYINT") or (o == "DECIMAL" and ot[2] == 0)
    if kind in _FRACTIONAL:
        return o in _NUMBERS
    if kind == "StringType":
        return o == "STRING"
    if kind == "BooleanType":
        return o == "BOOLEAN"
    if kind in ("DateType", "TimestampType", "TimestampNTZType"):
        return o == "STRING"
    if kind == "ArrayType":
        return o == "ARRAY" and fits(dt.elementType, ot[1])
    if kind == "MapType":
        return o == "OBJECT" and all(fits(dt.valueType, t) for _, t in ot[1])
    if kind == "StructType":
        names = {f.name: f.dataType for f in dt.fields}
        return o == "OBJECT" and all(f in names and fits(names[f], t) for f, t in ot[1])
    return False


def merge(a: VType, b: VType) -> VType | None:
    """The type holding values of types a and b, or None when none does
    (numbers widen to DOUBLE; objects take the union of their fields)."""
    if a[0] == "VOID":
        return b
    if b[0] == "VOID" or a == b:
        return a
    if a[0] in _NUMBERS and b[0] in _NUMBERS:
        return ("DOUBLE",)
    if a[0] == b[0] == "ARRAY":
        e = merge(a[1], b[1])
        return None if e is None else ("ARRAY", e)
    if a[0] == b[0] == "OBJECT":
        fields = dict(a[1])
        for f, t in b[1]:
            m = merge(fields[f], t) if f in fields else t
            if m is None:
                return None
            fields[f] = m
        return ("OBJECT", tuple(sorted(fields.items())))
    return None


def infer(counts: list[tuple[str, int]]) -> str | None:
    """A new column's DDL type from its values' (schema_of_variant text, count)
    pairs: the types merged, most frequent first (a type that does not merge
    is left out: its values go to rejects); None when every value was null."""
    t: VType = ("VOID",)
    for text, _ in sorted(counts, key=lambda c: (-c[1], c[0])):
        m = merge(t, parse(text))
        if m is not None:
            t = m
    return None if t[0] == "VOID" else ddl(t)


def ddl(t: VType) -> str:
    """A type tree as the Spark DDL of the column that holds it: integers
    BIGINT, other numbers DOUBLE (JSON has no decimals: ``21.5`` is a float's
    text), objects STRUCT, mixed arrays and empty objects VARIANT."""
    k = t[0]
    if k in ("DECIMAL", "DOUBLE", "FLOAT"):
        return "DOUBLE"
    if k in ("INT", "SMALLINT", "TINYINT"):
        return "BIGINT"
    if k == "VOID":
        return "STRING"
    if k == "ARRAY":
        return "ARRAY<%s>" % ddl(t[1])
    if k == "OBJECT":
        if not t[1]:
            return "VARIANT"
        return "STRUCT<%s>" % ", ".join("%s: %s" % (quote(f), ddl(ft)) for f, ft in t[1])
    return str(k)


def quote(name: str) -> str:
    """name as a DDL identifier (backticks unless a plain word)."""
    if name.replace("_", "a").isalnum() and name.isascii() and not name[0].isdigit():
        return name
    return "`%s`" % name.replace("`", "``")


def type_ddl(dt: Any) -> str:
    """A Spark DataType as DDL text that parses back to it (simpleString
    leaves struct field names unquoted)."""
    kind = type(dt).__name__
    if kind == "StructType":
        return "struct<%s>" % ",".join(
            "%s:%s" % (quote(f.name), type_ddl(f.dataType)) for f in dt.fields
        )
    if kind == "ArrayType":
        return "array<%s>" % type_ddl(dt.elementType)
    if kind == "MapType":
        return "map<%s,%s>" % (type_ddl(dt.keyType), type_ddl(dt.valueType))
    return str(dt.simpleString())


def from_ddl(ddl: str) -> Any:
    """DDL text as a Spark DataType (type_ddl's inverse)."""
    from pyspark.sql.types import DataType

    return DataType.fromDDL(ddl)  # public since Spark 4.0 (the spark extra's floor)
