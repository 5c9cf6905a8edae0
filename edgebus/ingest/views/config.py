"""The typed views' TOML file (``edgebus ingest --views FILE``; docs/spark.md,
"Typed views").

    rejects = "fleet-rejects"            # optional: the rejects table
    [[view]]
    name = "temps"                       # a word: letters, digits, _
    topic = "dev/+/temp"                 # + one token, # the rest
    schema = "temp DOUBLE, n BIGINT"     # Spark DDL; optional (inferred)
    path = "views/temps"                 # optional
    max_columns = 64                     # optional: payload columns at most

Relative paths are taken from the file's directory; by default a view is
``TABLE.views/NAME`` and the rejects ``TABLE.views/_rejects``.  This module
checks what needs no Spark: the keys and their values against the file's JSON
Schema (config_schema, views.schema.json), then the topic patterns, names used
twice and shared paths; the schema's DDL is checked by Spark when the job
refreshes the views.
"""

from __future__ import annotations

import os
import tomllib
from typing import Any, NamedTuple

from edgebus import topic as topics
from edgebus.ingest.views import config_schema

# The columns a view takes from the table row, beside the payload's.
PROVENANCE = (
    "peer_node",
    "peer_sid",
    "seq",
    "ts_device",
    "ts_host",
    "gateway",
    "topic",
    "late",
    "via",
    "segment",
    "offset",
    "date",
)
# A device may send any key: each would be a column for good. A view takes at
# most this many payload columns (declared and added) unless it says otherwise,
# and no key longer than MAX_KEY; the rest go to the rejects with the reason.
DEFAULT_MAX_COLUMNS = 64
MAX_KEY = 128


class View(NamedTuple):
    name: str
    topic: str
    tokens: tuple[str, ...]  # the pattern's tokens; "+" and "#" are the wildcards
    schema: str  # Spark DDL as written ("" to infer every column)
    path: str | None  # None: beside the table
    max_columns: int = DEFAULT_MAX_COLUMNS


class Config(NamedTuple):
    file: str
    views: tuple[View, ...]
    rejects: str | None

    def view_path(self, view: View, table: str) -> str:
        return view.path or os.path.abspath(table) + ".views/" + view.name

    def rejects_path(self, table: str) -> str:
        return self.rejects or os.path.abspath(table) + ".views/_rejects"


def load(fname: str) -> Config:
    """The views of a TOML file; ValueError saying what is wrong and where."""
    try:
        with open(fname, "rb") as f:
            doc = tomllib.load(f)
    except OSError as e:
        raise ValueError("cannot read %s: %s" % (fname, e.strerror)) from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError("%s: %s" % (fname, e)) from None
    except RecursionError:  # tomllib recurses per level of nesting
        raise ValueError("%s: not valid TOML: nested too deeply" % fname) from None
    return parse(doc, fname)


def parse(doc: dict[str, Any], fname: str) -> Config:
    """A parsed TOML document as a Config (fname names it in errors and is
    where relative paths start)."""
    base = os.path.dirname(os.path.abspath(fname))
    bad = config_schema.problem(doc, fname)
    if bad:
        raise ValueError(bad)
    rejects = doc.get("rejects")
    items = doc["view"]
    views: list[View] = []
    for i, item in enumerate(items):
        views.append(_view(item, "%s: view %d" % (fname, i + 1), base))
    names = [v.name.lower() for v in views]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError("%s: view name(s) used twice: %s" % (fname, ", ".join(dup)))
    paths = [os.path.abspath(p) for p in [v.path for v in views] + [rejects] if p]
    if len(set(paths)) != len(paths):
        raise ValueError("%s: two tables share a path" % fname)
    return Config(fname, tuple(views), rejects and os.path.join(base, rejects))


def _view(item: dict[str, Any], where: str, base: str) -> View:
    """A view the schema has passed, checked for what it cannot say."""
    name, pattern = item["name"], item["topic"]
    where = "%s (%s)" % (where, name)
    try:
        topics.pattern(pattern, "+", "#")
    except ValueError as e:
        raise ValueError("%s: bad topic pattern %r: %s" % (where, pattern, e)) from None
    schema = item.get("schema", "")
    for col in declared_names(schema):
        if col.lower() in PROVENANCE:
            raise ValueError(
                "%s: column %r is a provenance column's name (%s)"
                % (where, col, ", ".join(PROVENANCE))
            )
    path = item.get("path")
    most = item.get("max_columns", DEFAULT_MAX_COLUMNS)
    if len(declared_names(schema)) > most:
        raise ValueError("%s: the schema declares more than max_columns (%d)" % (where, most))
    return View(
        name, pattern, tuple(pattern.split("/")), schema, path and os.path.join(base, path), most
    )


def declared_names(schema: str) -> list[str]:
    """The top-level column names of a DDL text, without Spark (for the
    checks that need no JVM): the first word of each top-level field."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(schema + ","):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            field = schema[start:i].strip()
            start = i + 1
            if field.startswith("`"):
                out.append(field[1 : field.index("`", 1)])
            elif field:
                out.append(field.replace(":", " ").split()[0])
    return out
