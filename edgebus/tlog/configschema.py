"""The host's configuration files against their shipped JSON Schemas (the
bridge's TOML, board manifests, the views file; docs/schemas.md): the one
validator class they are checked with and the one way a shipped schema is
read. Here, beside `durable`, because bridge, ingest and tools all use it and
tlog is the host layer below all three; nothing in the log format imports it,
so jsonschema is loaded only by the tools that check a file."""

from __future__ import annotations

import importlib.resources
import json
from functools import cache
from typing import Any

import jsonschema

# JSON Schema's "integer" takes 5.0, and TOML and JSON can both write it; a
# count, a port, a size or a pin written 5.0 is a typo, and true is no 1.
_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _, v: isinstance(v, int) and not isinstance(v, bool)
)
Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_TYPES)


@cache
def shipped(package: str, file: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) shipped as ``file`` in ``package``."""
    doc: dict[str, Any] = json.loads(importlib.resources.files(package).joinpath(file).read_text())
    return doc
