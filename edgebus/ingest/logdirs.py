"""The log directories `edgebus ingest --log` names: globs expanded, each
checked to be a telemetry log before Spark starts, and the list a checkpoint
is bound to."""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Iterable

from edgebus.tlog.segments import is_log_dir


def log_dirs(specs: Iterable[str]) -> list[str]:
    """The log directories named by --log: each a directory or a glob
    (expanded, sorted), absolute, in order, each once.  ValueError when a
    name matches no directory."""
    out = []
    for spec in [specs] if isinstance(specs, str) else specs:
        found = sorted(glob.glob(spec)) if glob.has_magic(spec) else [spec]
        dirs = [os.path.abspath(d) for d in found if os.path.isdir(d)]
        if not dirs:
            raise ValueError("no log directory at %s" % spec)
        out += [d for d in dirs if d not in out]
    return out


def check_log_dirs(logs: list[str]) -> None:
    """ValueError (one line) unless each directory is a telemetry log: one
    with segments, or a bridge's fresh log (its lock, no segment yet).  An
    empty or wrong directory would otherwise read as a log with nothing in
    it, and bind the checkpoint to it; the message names the log directories
    found below it, if any (the bridge's state or working directory given for
    its log)."""
    for d in logs:
        if is_log_dir(d):
            continue
        shown = _shown(d)
        below = _logs_below(d)
        if below and all(re.fullmatch(r"w\d+", os.path.relpath(x, d)) for x in below):
            # a bridge of several workers logs in DIR/wI (bridge/split.py)
            hint = "its workers' logs are %s (quote it for the shell's sake)" % os.path.join(
                shown, "w*"
            )
        elif below:
            hint = "did you mean %s?" % " or ".join(_shown(x) for x in below[:3])
        else:
            hint = "give a bridge's [log] dir"
        raise ValueError(
            "%s holds no log segments and is no telemetry log directory; %s" % (shown, hint)
        )


def _shown(path: str) -> str:
    """A directory as the user would type it: relative below the working directory."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _logs_below(path: str, depth: int = 2) -> list[str]:
    """The telemetry log directories up to ``depth`` levels below ``path``, sorted."""
    found = []
    for root, dirs, _files in os.walk(path):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for x in dirs:
            if is_log_dir(os.path.join(root, x)):
                found.append(os.path.join(root, x))
        if root.count(os.sep) - path.rstrip(os.sep).count(os.sep) + 1 >= depth:
            dirs[:] = []
    return found


def check_logs(checkpoint: str, logs: list[str]) -> None:
    """Record the logs a checkpoint's query reads (CHECKPOINT/edgebus-logs.json)
    or, when it has a list already, refuse a different one (ValueError): the
    checkpoint keeps each source's offsets by its place in the list."""
    fname = os.path.join(checkpoint, "edgebus-logs.json")
    try:
        with open(fname) as f:
            had = json.load(f)["logs"]
    except FileNotFoundError:
        os.makedirs(checkpoint, exist_ok=True)
        with open(fname, "w") as f:
            json.dump({"logs": logs}, f, indent=1)
        return
    if had != logs:
        raise ValueError(
            "checkpoint %s reads the logs %s, not %s: a checkpoint keeps its "
            "list of logs (start a new table and checkpoint, or run a second "
            "job, for another gateway)" % (checkpoint, had, logs)
        )
