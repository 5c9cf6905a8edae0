"""Checks one table of the bridge configuration: jsonschema against the JSON
Schema made from SCHEMA (schema_doc), then each kind's check that JSON Schema
cannot express (schema.check: paths, addresses, topic patterns). A problem is
one ConfigError naming the table and the key in schema.py's words, as the
editor's schema and the bridge agree on what they refuse."""

from __future__ import annotations

from functools import cache
from typing import Any

from edgebus.bridge import schema_doc
from edgebus.bridge.schema import SCHEMA, ConfigError, check, label
from edgebus.tlog.configschema import Validator


@cache
def _validator(name: str) -> Any:
    return Validator(schema_doc.table(name, nested=False))


def _first(errors: list[Any], spec: dict[str, Any]) -> Any:
    """The error today's order meets first: the table's own (not a table, an
    unknown key), then its keys in SCHEMA's order, a key's type first."""
    order = list(spec)

    def rank(e: Any) -> tuple[int, int, int]:
        if not e.path:
            return (0, 0, 0)
        return (1, order.index(e.path[0]), 0 if len(e.path) == 1 and e.validator == "type" else 1)

    return min(errors, key=rank)


def take(d: Any, name: str, base_dir: str, i: int | None = None) -> dict[str, Any]:
    """The keys of table d (SCHEMA[name], entry i of an array), each checked
    by type and by kind; unknown keys refused."""
    where = label(name, i)
    spec = SCHEMA[name][1]
    errors = list(_validator(name).iter_errors(d))
    if errors:
        e = _first(errors, spec)
        if not e.path and e.validator == "type":
            raise ConfigError("%s: must be a table, got %r" % (where, d))
        if not e.path:
            k = next(k for k in d if k not in spec)
            raise ConfigError(
                "%s: unknown key %r (known: %s)" % (where, k, ", ".join(sorted(spec)))
            )
        k = e.path[0]
        if len(e.path) == 1 and e.validator == "type":
            raise ConfigError("%s: %s has the wrong type (%s)" % (where, k, type(d[k]).__name__))
        # The kind's check says it in the words of the other keys of its kind.
        check(where, k, spec[k], d[k], base_dir)
        raise ConfigError("%s: %s %s" % (where, k, e.message))
    return {k: check(where, k, s, d[k], base_dir) for k, s in spec.items() if k in d}
