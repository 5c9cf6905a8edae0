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
checks what needs no Spark (names, patterns, keys, duplicates); the schema's
DDL is checked by Spark when the job refreshes the views.
"""

from __future__ import annotations

import os
import re
import tomllib
from typing import Any, NamedTuple

from edgebus import topic as topics

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
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_VIEW_KEYS = {"name", "topic", "schema", "path", "max_columns"}
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
    return parse(doc, fname)


def parse(doc: dict[str, Any], fname: str) -> Config:
    """A parsed TOML document as a Config (fname names it in errors and is
    where relative paths start)."""
    base = os.path.dirname(os.path.abspath(fname))
    unknown = set(doc) - {"view", "rejects"}
    if unknown:
        raise ValueError(
            "%s: unknown key(s) %s (expected [[view]] tables and rejects)"
            % (fname, ", ".join(sorted(unknown)))
        )
    rejects = doc.get("rejects")
    if rejects is not None and not (isinstance(rejects, str) and rejects):
        raise ValueError("%s: rejects must be a path" % fname)
    items = doc.get("view", [])
    if not isinstance(items, list) or not items:
        raise ValueError("%s: no [[view]] table" % fname)
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


def _view(item: Any, where: str, base: str) -> View:
    if not isinstance(item, dict):
        raise ValueError("%s: not a table" % where)
    unknown = set(item) - _VIEW_KEYS
    if unknown:
        raise ValueError(
            "%s: unknown key(s) %s (expected %s)"
            % (where, ", ".join(sorted(unknown)), ", ".join(sorted(_VIEW_KEYS)))
        )
    name = item.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            "%s: name must be a word (a letter, then letters, digits, _), not %r" % (where, name)
        )
    where = "%s (%s)" % (where, name)
    pattern = item.get("topic")
    if not isinstance(pattern, str) or not pattern:
        raise ValueError('%s: topic must be a pattern such as "dev/+/temp"' % where)
    try:
        topics.pattern(pattern, "+", "#")
    except ValueError as e:
        raise ValueError("%s: bad topic pattern %r: %s" % (where, pattern, e)) from None
    schema = item.get("schema", "")
    if not isinstance(schema, str):
        raise ValueError('%s: schema must be Spark DDL text, e.g. "temp DOUBLE"' % where)
    for col in declared_names(schema):
        if col.lower() in PROVENANCE:
            raise ValueError(
                "%s: column %r is a provenance column's name (%s)"
                % (where, col, ", ".join(PROVENANCE))
            )
    path = item.get("path")
    if path is not None and not (isinstance(path, str) and path):
        raise ValueError("%s: path must be a directory" % where)
    most = item.get("max_columns", DEFAULT_MAX_COLUMNS)
    if type(most) is not int or not 1 <= most <= 1000:
        raise ValueError("%s: max_columns must be a whole number from 1 to 1000" % where)
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
