"""The bridge daemon's process, set up before it runs: its own log on
stderr (one JSON object a line for a collector, or text for a person; a
worker's lines, bridge/workers.py, say which worker wrote them), and the
import it refuses (pandas)."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any


class JsonFormatter(logging.Formatter):
    """One JSON object per line: structured logs a collector can parse
    (a worker's, bridge/workers.py, say which it is)."""

    def __init__(self, worker: int | None = None) -> None:
        super().__init__()
        self.worker = worker

    def format(self, r: logging.LogRecord) -> str:
        d: dict[str, Any] = {
            "ts": round(r.created, 3),
            "level": r.levelname.lower(),
            "msg": r.getMessage(),
        }
        if self.worker is not None:
            d["worker"] = self.worker
        if r.exc_info:
            d["exc"] = self.formatException(r.exc_info)
        return json.dumps(d)


def log_to_stderr(log_format: str, verbose: bool, worker: int | None = None) -> None:
    """The daemon's log: one JSON object a line, or text ("auto": text on a
    terminal, where a person reads it; JSON elsewhere, for a collector)."""
    h = logging.StreamHandler()
    if log_format == "auto":
        log_format = "text" if sys.stderr.isatty() else "json"
    w = "" if worker is None else "w%d " % worker
    h.setFormatter(
        JsonFormatter(worker)
        if log_format == "json"
        else logging.Formatter("%(asctime)s " + w + "%(levelname)s %(message)s")
    )
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[h])


class NoPandas:
    """Refuses to import pandas in the daemon. pyarrow imports pandas, where it is
    installed, at its first array to check for pandas types: ~45 MB of RSS and 0.4 s
    on the log's worker at the first seal, for a daemon that writes Parquet from lists.
    pyarrow goes on without it when the import fails."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("edgebus-bridge does not load pandas", name=name)
        return None
