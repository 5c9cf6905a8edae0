"""The views file against its JSON Schema (views.schema.json beside this
module: `edgebus schema views` exports it for editors, docs/spark.md). The
first problem in the words config.py has always used, naming the file, the
view and the key; what JSON Schema cannot say (a topic pattern's grammar,
provenance names, names used twice) is config.py's."""

from __future__ import annotations

from functools import cache
from typing import Any

from edgebus.tlog.configschema import Validator, shipped


def schema() -> dict[str, Any]:
    """The views file's JSON Schema (draft 2020-12), as shipped."""
    return shipped(__package__, "views.schema.json")


@cache
def _validator() -> Any:
    return Validator(schema())


def _view_key(e: Any, view: dict[str, Any]) -> str:
    """The key of a view an error is about (a missing key's name too)."""
    if e.validator == "required":
        return str(next(k for k in e.validator_value if k not in view))
    return str(e.path[2])


def _in_view(e: Any, doc: dict[str, Any], fname: str) -> str:
    i = e.path[1]
    view = doc["view"][i]
    where = "%s: view %d" % (fname, i + 1)
    if len(e.path) == 2 and e.validator == "type":
        return "%s: not a table" % where
    if len(e.path) == 2 and e.validator == "additionalProperties":
        known = schema()["properties"]["view"]["items"]["properties"]
        return "%s: unknown key(s) %s (expected %s)" % (
            where,
            ", ".join(sorted(set(view) - set(known))),
            ", ".join(sorted(known)),
        )
    key = _view_key(e, view)
    name = view.get("name")
    node = schema()["properties"]["view"]["items"]["properties"][key]
    if key == "name":
        return "%s: name must be %s, not %r" % (where, node["description"], name)
    got = ", got %r" % (view[key],) if key in view else ""
    return "%s (%s): %s must be %s%s" % (where, name, key, node["description"], got)


def problem(doc: Any, fname: str) -> str | None:
    """The first thing wrong with a parsed views file, as one line naming
    fname (and the view and key), or None."""
    for e in _validator().iter_errors(doc):
        if len(e.path) >= 2:
            return _in_view(e, doc, fname)
        if not e.path and e.validator == "additionalProperties":
            return "%s: unknown key(s) %s (expected [[view]] tables and rejects)" % (
                fname,
                ", ".join(sorted(set(doc) - {"view", "rejects"})),
            )
        if e.path and e.path[0] == "rejects":
            return "%s: rejects must be %s" % (fname, e.schema["description"])
        return "%s: no [[view]] table" % fname
    return None
