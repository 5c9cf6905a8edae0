"""Table compaction (`edgebus ingest --compact`): the small Parquet files that
2 s micro-batches leave in each partition of the table, rewritten as one.

The file sink's metadata log (``TABLE/_spark_metadata``) says which files make
the table; readers (``spark.read.parquet(TABLE)``) read those and no others.
The job writes that log with a compaction file per batch (``N.compact``, the
whole listing), so one atomic rename of the newest one swaps a partition's
small files for their merged copy: a crash before it leaves the merged file
unlisted (never read), a crash after it leaves the small files unlisted, and
they are removed.  Only while no query writes the table: the caller holds
``table_lock``.  A table whose newest batch is not a compaction file (one made
with Spark's default interval of 10) is left as it is until it is.
docs/spark.md says the trade-off.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from typing import IO, Any, Callable, Iterator

from edgebus.tlog.durable import write_atomically

META = "_spark_metadata"
LOCK = "_edgebus.lock"
DEFAULT_TARGET_BYTES = 64 * 1024 * 1024
# The sink's log interval the job creates its tables with: each batch's log
# file is then the whole listing, the one file compaction rewrites.
LOG_INTERVAL_CONF = "spark.sql.streaming.fileSink.log.compactInterval"


class TableLocked(Exception):
    """Another `edgebus ingest` holds the table."""


def table_lock(table: str) -> IO[Any]:
    """Hold the table for this process (an open file; closing it releases
    the lock).  TableLocked when another process holds it."""
    os.makedirs(table, exist_ok=True)
    f = open(os.path.join(table, LOCK), "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise TableLocked("another edgebus ingest writes the table %s" % table) from None
    return f


def newest_log_file(table: str) -> tuple[int, str] | None:
    """(batch id, file name) of the newest file of the table's metadata log, or None."""
    meta = os.path.join(table, META)
    found = []
    for name in os.listdir(meta) if os.path.isdir(meta) else []:
        head = name[: -len(".compact")] if name.endswith(".compact") else name
        if head.isdigit():
            found.append((int(head), name))
    return max(found) if found else None


def read_log_file(fname: str) -> list[dict[str, Any]]:
    """The entries (dicts) of one metadata log file; ValueError when it is not one."""
    with open(fname, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if not lines or lines[0] != "v1":
        raise ValueError("%s is not a version-1 file sink log file" % fname)
    return [json.loads(x) for x in lines[1:] if x]


def local_path(path: str) -> str:
    """A metadata log entry's path (a file: URL) as a local path."""
    return path[len("file:") :].replace("///", "/", 1) if path.startswith("file:") else path


def write_hidden(final: str, write: Callable[[IO[Any]], Any]) -> None:
    """write_atomically, through a temporary that Spark neither lists nor reads."""
    # Hidden while written: neither Spark's file listing nor its log reader
    # takes a name starting with a dot.
    tmp = os.path.join(os.path.dirname(final), ".tmp-" + os.path.basename(final))
    write_atomically(final, tmp, write)


def _bins(entries: list[dict[str, Any]], target: int) -> Iterator[list[dict[str, Any]]]:
    """Groups (>= 2 files) of a partition's small files, each up to target bytes."""
    by_dir: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        if e.get("action", "add") == "add" and not e.get("isDir") and e["size"] < target // 2:
            by_dir.setdefault(os.path.dirname(local_path(e["path"])), []).append(e)
    for files in by_dir.values():
        cur: list[dict[str, Any]] = []
        size = 0
        for e in sorted(files, key=lambda e: e["path"]):
            if cur and size + e["size"] > target:
                if len(cur) > 1:
                    yield cur
                cur, size = [], 0
            cur.append(e)
            size += e["size"]
        if len(cur) > 1:
            yield cur


def _merge(group: list[dict[str, Any]]) -> tuple[dict[str, Any], int]:
    """Write the rows of group's files as one file beside them (hidden name,
    fsynced, renamed into place); its log entry."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.ParquetFile(local_path(e["path"])).read() for e in group]
    merged = pa.concat_tables(tables, promote_options="permissive")
    first = local_path(group[0]["path"])
    fname = os.path.join(
        os.path.dirname(first), "part-compacted-%s.c000.snappy.parquet" % uuid.uuid4()
    )
    write_hidden(
        fname,
        lambda f: pq.write_table(
            merged,
            f,
            compression="snappy",
            coerce_timestamps="us",
            allow_truncated_timestamps=False,
        ),
    )
    st = os.stat(fname)
    return dict(
        group[0], path="file://" + fname, size=st.st_size, modificationTime=int(st.st_mtime * 1000)
    ), merged.num_rows


def compact(table: str, target_bytes: int = DEFAULT_TARGET_BYTES) -> dict[str, Any]:
    """Merge the small files of each partition of the table (the caller holds
    table_lock).  Returns {"files_before", "files_after", "rows", "skipped"}:
    skipped is None or why nothing was done."""
    table = os.path.abspath(table)
    out: dict[str, Any] = {"files_before": 0, "files_after": 0, "rows": 0, "skipped": None}
    newest = newest_log_file(table)
    if newest is None:
        out["skipped"] = "the table has no committed batch"
        return out
    if not newest[1].endswith(".compact"):
        out["skipped"] = (
            "its newest log file %s is not a compaction file (a table made "
            "with Spark's default log interval; compacts at every 10th batch)" % newest[1]
        )
        return out
    logf = os.path.join(table, META, newest[1])
    entries = read_log_file(logf)
    gone, added = set(), []
    for group in _bins(entries, target_bytes):
        entry, rows = _merge(group)
        added.append(entry)
        gone |= {e["path"] for e in group}
        out["rows"] += rows
    out["files_before"], out["files_after"] = len(gone), len(added)
    if not added:
        return out
    kept = [e for e in entries if e["path"] not in gone] + added
    text = "v1\n" + "\n".join(json.dumps(e, separators=(",", ":")) for e in kept)
    # Hadoop's local file system checks a file against its ".NAME.crc" when
    # there is one: drop it first (the old listing reads without it), else the
    # new listing would fail that check.
    _unlink_with_crc(logf, only_crc=True)
    # The one step that changes what readers see.
    write_hidden(logf, lambda f: f.write(text.encode("utf-8")))
    for p in gone:
        _unlink_with_crc(local_path(p))
    return out


def _unlink_with_crc(fname: str, only_crc: bool = False) -> None:
    crc = os.path.join(os.path.dirname(fname), "." + os.path.basename(fname) + ".crc")
    for name in (crc,) if only_crc else (fname, crc):
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass
