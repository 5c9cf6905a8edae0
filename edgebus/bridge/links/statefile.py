"""The bridge's peer state file: per link, the peer boot's generation and
the next sequence number expected, in one JSON file written atomically, so
generations keep increasing across bridge restarts."""

from __future__ import annotations

import json
import os
from typing import Any

from edgebus import tlog


class _LinkState(dict):
    """One link's state: a dict (the Link's ``state``) that tells its file
    when a new peer boot's generation is set, the change that must reach
    the disk soon (Bridge._persist_state), so nothing scans every link."""

    __slots__ = ("file",)
    file: StateFile

    def __setitem__(self, k: str, v: Any) -> None:
        dict.__setitem__(self, k, v)
        if k == "generation":
            self.file.generations += 1


class StateFile:
    """Peer state (generation, next sequence number) per link, in one JSON file
    written atomically, so generations keep increasing across bridge restarts.
    ``generations`` counts generations set since the start. With a log, a
    snapshot goes with each group commit that follows a new generation
    (telemetry/appender.py): no acknowledgement leaves before the file names
    the peer boot it acknowledges, which a restart resumes from the log by."""

    def __init__(self, state_dir: str) -> None:
        os.makedirs(state_dir, exist_ok=True)
        self.path = os.path.join(state_dir, "links.json")
        self.generations = 0
        self.saved = 0  # generations the file on disk holds
        try:
            with open(self.path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
        self.data: dict[str, _LinkState] = {}
        for k, v in data.items() if isinstance(data, dict) else ():
            if isinstance(v, dict):
                self.for_link(k).update(v)

    def for_link(self, link_id: str) -> _LinkState:
        st = self.data.get(link_id)
        if st is None:
            st = self.data[link_id] = _LinkState()
            st.file = self
        return st

    def unsaved(self) -> bool:
        """Was a generation set since the last snapshot?"""
        return self.generations != self.saved

    def snapshot(self) -> bytes:
        """The file's bytes now (on the event loop, where the state changes)."""
        self.saved = self.generations
        return json.dumps(self.data).encode()

    def write(self, data: bytes) -> None:
        """Write a snapshot durably (from any thread); one that fails leaves
        the state unsaved, so the next snapshot is written again."""
        try:
            tlog.write_atomically(self.path, self.path + ".tmp", lambda f: f.write(data))
        except BaseException:
            self.saved = -1
            raise

    def save(self) -> None:
        self.write(self.snapshot())
