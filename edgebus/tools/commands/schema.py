"""`edgebus schema NAME`: the JSON Schema of a host configuration file, for an
editor or a CI check (docs/schemas.md): ``bridge`` (the bridge's TOML),
``boards`` (a board manifest), ``views`` (the typed views' TOML). The same
documents the tools check those files against, so both say the same."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from edgebus.tlog.configschema import shipped
from edgebus.tlog.durable import write_atomically

if TYPE_CHECKING:
    import argparse

# name -> (package, file) of the shipped documents; the bridge's is made from
# its SCHEMA table and shipped made (bridge.schema.json, kept equal by a test).
FILES = {
    "bridge": ("edgebus.bridge", "bridge.schema.json"),
    "boards": ("edgebus.tools.boardkit", "manifest.schema.json"),
    "views": ("edgebus.ingest.views", "views.schema.json"),
}


def document(name: str) -> dict[str, Any]:
    """The JSON Schema named ``name`` (a key of FILES), as shipped."""
    return shipped(*FILES[name])


def text(doc: dict[str, Any]) -> str:
    """A schema as the shipped files write it."""
    return json.dumps(doc, indent=2) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", choices=sorted(FILES), help="which file's schema")
    p.add_argument("-o", "--output", help="write it to this file (default: standard output)")


def run(args: argparse.Namespace) -> int:
    out = text(document(args.name))
    if args.output:
        data = out.encode()
        write_atomically(args.output, args.output + ".tmp", lambda f: f.write(data))
    else:
        sys.stdout.write(out)
    return 0
