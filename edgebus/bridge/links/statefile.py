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
    ``generations`` counts generations set since the start."""

    def __init__(self, state_dir: str) -> None:
        os.makedirs(state_dir, exist_ok=True)
        self.path = os.path.join(state_dir, "links.json")
        self.generations = 0
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

    def save(self) -> None:
        data = json.dumps(self.data).encode()
        tlog.write_atomically(self.path, self.path + ".tmp", lambda f: f.write(data))
