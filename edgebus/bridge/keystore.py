"""The bridge's keystore: one JSON file per node in a directory ([bridge]
keys), mode 0600, written whole or not at all, holding the node's current
key, keys sent to it whose outcome is unknown (``pending``), and previous
keys, each accepted until its expiry (``until``, Unix time). A node's file
overrides the configuration's key or key_file for that node.

    {"node": "kitchen-1", "key": "<64 hex digits>", "since": 1767225600,
     "pending": [{"key": "...", "since": ...}],
     "previous": [{"key": "...", "until": 1767312000}]}
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from typing import IO, Any, Callable

from edgebus import tlog

log = logging.getLogger("edgebus.bridge")


def new_key() -> str:
    """A fresh device key: 32 random bytes as 64 hex digits."""
    return secrets.token_hex(32)


class KeyStoreError(ValueError):
    """A key file that cannot be used, or a node id that cannot name one."""


class KeyStore:
    """The key files under ``path``; reads are cached until a file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        # node -> ((mtime_ns, size, inode), record)
        self._cache: dict[str, tuple[Any, dict[str, Any]]] = {}

    def file(self, node: str) -> str:
        if not node or "/" in node or "\0" in node or node.startswith("."):
            raise KeyStoreError("node id %r cannot name a key file" % (node,))
        return os.path.join(self.path, node + ".json")

    def nodes(self) -> list[str]:
        """The nodes with a key file, sorted (none when the directory is missing)."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return []
        return sorted(f[:-5] for f in names if f.endswith(".json") and not f.startswith("."))

    def read(self, node: str) -> dict[str, Any] | None:
        """node's record, or None when it has no file; KeyStoreError for a
        file that is not a valid record."""
        p = self.file(node)
        try:
            st = os.stat(p)
        except FileNotFoundError:
            return None
        sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        c = self._cache.get(node)
        if c is not None and c[0] == sig:
            return c[1]
        try:
            with open(p) as f:
                rec = json.load(f)
        except (OSError, ValueError) as e:
            raise KeyStoreError("%s: %s" % (p, e)) from None
        if (
            not isinstance(rec, dict)
            or not isinstance(rec.get("key"), str)
            or not rec["key"]
            or not all(
                isinstance(e, dict) and isinstance(e.get("key"), str)
                for e in rec.get("pending", []) + rec.get("previous", [])
            )
        ):
            raise KeyStoreError("%s: not a key record (key, pending, previous)" % p)
        self._cache[node] = (sig, rec)
        return rec

    def accepted(self, node: str, now: float | None = None) -> list[str] | None:
        """The keys (str) accepted from node now, newest first: the current
        one, pending ones, then previous ones not expired; None without a file."""
        rec = self.read(node)
        if rec is None:
            return None
        now = time.time() if now is None else now
        return (
            [rec["key"]]
            + [e["key"] for e in rec.get("pending", [])]
            + [e["key"] for e in rec.get("previous", []) if e.get("until", 0) > now]
        )

    def issue(self, node: str, key: str) -> None:
        """node's key is key, from now (any other replaced)."""
        self.write(node, {"key": key, "since": int(time.time())})

    def write(self, node: str, rec: dict[str, Any]) -> dict[str, Any]:
        """Store rec as node's record (expired previous keys dropped)."""
        p = self.file(node)
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        now = time.time()
        rec = dict(
            rec,
            node=node,
            pending=rec.get("pending", []),
            previous=[e for e in rec.get("previous", []) if e.get("until", 0) > now],
        )
        data = (json.dumps(rec, indent=1) + "\n").encode()

        def fill(f: IO[bytes]) -> None:
            os.fchmod(f.fileno(), 0o600)  # before the key is in it
            f.write(data)

        tlog.write_atomically(p, "%s.%d.tmp" % (p, os.getpid()), fill)
        self._cache.pop(node, None)
        return rec

    def _existing(self, node: str) -> dict[str, Any]:
        rec = self.read(node)
        if rec is None:  # its file went while a rotation ran
            raise KeyStoreError("%s: no key file" % self.file(node))
        return rec

    def pend(self, node: str, key: str) -> None:
        """Add key as sent to node, outcome unknown: accepted until settled."""
        rec = self._existing(node)
        self.write(
            node,
            dict(rec, pending=rec.get("pending", []) + [{"key": key, "since": int(time.time())}]),
        )

    def drop(self, node: str, key: str) -> None:
        """Forget a pending key that node refused or never received."""
        rec = self._existing(node)
        self.write(node, dict(rec, pending=[e for e in rec.get("pending", []) if e["key"] != key]))

    def commit(self, node: str, key: str, grace: float) -> dict[str, Any]:
        """node holds key: it is current; the keys it replaces (the current
        one and any other pending) stay accepted for ``grace`` seconds."""
        rec = self._existing(node)
        now = time.time()
        gone = [rec["key"]] + [e["key"] for e in rec.get("pending", [])]
        prev = [e for e in rec.get("previous", []) if e["key"] != key] + [
            {"key": k, "until": now + grace} for k in gone if k != key
        ]
        return self.write(node, {"key": key, "since": int(now), "pending": [], "previous": prev})

    def source(
        self, node: str, fallback: bytes | str | None
    ) -> Callable[[Any], bytes | str | list[str]]:
        """A Link's key= for node: its accepted keys, else ``fallback`` (the
        configuration's key). A key file that cannot be read refuses every
        peer, logged, rather than let one in without a key."""

        def keys(_peer: Any) -> bytes | str | list[str]:
            try:
                k = self.accepted(node)
            except KeyStoreError as e:
                log.error("keys for %s: %s; refusing its sessions until it is fixed", node, e)
                return new_key()
            if k is None:
                return fallback if fallback is not None else new_key()
            return k

        return keys
