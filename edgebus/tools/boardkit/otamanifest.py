"""A bundle's ota.jsonl, the manifest an update over the bus starts with
(docs/protocol.md section 18): `edgebus build` writes it, `edgebus ota` reads
it back and checks the bundle against it."""

from __future__ import annotations

import json
from typing import Any

MANIFEST = "ota.jsonl"


def encode_manifest(meta: dict[str, Any]) -> bytes:
    """The manifest's bytes (docs/protocol.md section 18): JSON lines, a
    header {"version", "board", "mpy", "files": the count}, then one
    [path, size, sha256] a file, so a device reads one line at a time."""
    head = {k: meta[k] for k in ("version", "board", "mpy")}
    head["files"] = len(meta["files"])
    lines = [head] + [list(f) for f in meta["files"]]
    return b"".join(json.dumps(x, separators=(",", ":")).encode() + b"\n" for x in lines)


def decode_manifest(raw: bytes) -> dict[str, Any]:
    """encode_manifest's meta back (``files`` the list); ValueError when the
    bytes are not that."""
    lines = raw.decode().splitlines()
    if not lines:
        raise ValueError("empty")
    meta = json.loads(lines[0])
    if not isinstance(meta, dict) or meta.get("files") != len(lines) - 1:
        raise ValueError("the header's files count is not the number of lines after it")
    return dict(meta, files=[json.loads(x) for x in lines[1:]])
