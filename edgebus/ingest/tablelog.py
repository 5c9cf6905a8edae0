"""Tables the ingest job derives from its table (typed views, rejects, the
delivery audit), written from the driver in batches, exactly once.

Such a table is laid out as the job's own: Parquet files in partition
directories, listed by a file sink metadata log (``DIR/_spark_metadata``) whose
newest file, ``N.compact``, is the whole listing.  So ``spark.read.parquet(DIR)``
reads only committed files, with any Spark settings (a reader derives the log's
interval from its ``.compact`` files), and ``edgebus ingest --compact`` can merge
its small files.  Each batch's state (a deriver's high-water marks) is
``DIR/_edgebus/N.json``, written before the listing, and read only for the
batch the listing names: one atomic rename of the listing commits both.

A batch is written by Spark into ``DIR/_staging/N`` and its files are moved
into their partitions after a plan of the moves is saved; a batch that
crashed before its commit is undone from that plan when the next one starts,
so no uncommitted file stays where a reader that ignores the listing (DuckDB,
pandas, Polars on ``**/*.parquet``) would take it.  One writer at a time: the
job holds the ingest table's lock while it refreshes.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import TYPE_CHECKING, Any

from edgebus.ingest.compaction import (
    META,
    local_path,
    newest_log_file,
    read_log_file,
    write_hidden,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

STATE = "_edgebus"
STAGING = "_staging"
_PLAN = "plan.json"
_KEEP = 2  # listings (and states) kept: the newest and the one before


def committed(table: str) -> tuple[int, dict[str, Any]]:
    """(id, state) of the table's last committed batch; (-1, {}) for none."""
    newest = newest_log_file(table)
    if newest is None:
        return -1, {}
    try:
        with open(os.path.join(table, STATE, "%d.json" % newest[0]), encoding="utf-8") as f:
            state: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        state = {}
    return newest[0], state


def files(table: str) -> list[str]:
    """Local paths of the table's committed Parquet files: what a reader
    other than Spark should read (pyarrow, pandas, Polars, DuckDB)."""
    newest = newest_log_file(table)
    if newest is None:
        return []
    entries = read_log_file(os.path.join(table, META, newest[1]))
    return [local_path(e["path"]) for e in entries if e.get("action", "add") == "add"]


def dataset(table: str) -> Any:
    """The table's committed files as a pyarrow dataset, with the partition
    columns from their directories (``date`` a date, the others strings, null
    where Spark wrote its default partition) and every file's columns (a
    derived table's later files may have more): what pandas
    (``dataset(t).to_table().to_pandas()``), Polars (``pl.scan_pyarrow_dataset``)
    and DuckDB (a query naming the dataset) read without Spark."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    found = files(table)
    table = os.path.abspath(table)
    rel = os.path.relpath(os.path.dirname(found[0]), table) if found else ""
    keys = [d.split("=", 1)[0] for d in rel.split(os.sep) if "=" in d]
    fields = [pa.field(k, pa.date32() if k == "date" else pa.string()) for k in keys]
    parts = ds.partitioning(pa.schema(fields), flavor="hive") if fields else None
    # Footers only: the schema of each file, so a column added later is kept.
    schema = pa.unify_schemas([pq.read_schema(f) for f in found] + [pa.schema(fields)])
    return ds.dataset(
        found, schema=schema, format="parquet", partitioning=parts, partition_base_dir=table
    )


def write_batch(
    df: DataFrame | None,
    table: str,
    state: dict[str, Any],
    partition_by: tuple[str, ...] = (),
    replace: bool = False,
) -> int:
    """Append df's rows to the table (or, with replace, make them its only
    rows) and save state, as one batch; returns the batch id.  df None adds no
    rows and commits the state alone."""
    table = os.path.abspath(table)
    last, _ = committed(table)
    batch = last + 1
    staging = os.path.join(table, STAGING, str(batch))
    _undo(os.path.join(table, STAGING))
    moved: list[str] = []
    if df is not None:
        w = df.write.mode("overwrite")
        if partition_by:
            w = w.partitionBy(*partition_by)
        w.parquet("file://" + staging)
        found = _parquet_files(staging)
        plan = [(src, os.path.join(table, os.path.relpath(src, staging))) for src in found]
        _write_json(os.path.join(staging, _PLAN), [dst for _, dst in plan])
        for src, dst in plan:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.rename(src, dst)
        moved = [dst for _, dst in plan]
    old = [] if last < 0 else read_log_file(os.path.join(table, META, "%d.compact" % last))
    kept = [] if replace else old
    entries = kept + [_entry(p) for p in moved]
    os.makedirs(os.path.join(table, STATE), exist_ok=True)
    _write_json(os.path.join(table, STATE, "%d.json" % batch), state)
    text = "v1\n" + "\n".join(json.dumps(e, separators=(",", ":")) for e in entries)
    os.makedirs(os.path.join(table, META), exist_ok=True)
    # The commit: readers see the new listing, or the old one.
    _write_text(os.path.join(table, META, "%d.compact" % batch), text)
    shutil.rmtree(staging, ignore_errors=True)
    if replace:
        listed = {e["path"] for e in entries}
        for e in old:
            if e["path"] not in listed:
                _unlink(local_path(e["path"]))
    _forget(table, batch)
    return batch


def _undo(staging_root: str) -> None:
    """Remove what an uncommitted batch left: its staged files and the files
    its plan had moved into the partitions."""
    if not os.path.isdir(staging_root):
        return
    for name in os.listdir(staging_root):
        d = os.path.join(staging_root, name)
        try:
            with open(os.path.join(d, _PLAN), encoding="utf-8") as f:
                for p in json.load(f):
                    _unlink(p)
        except (FileNotFoundError, ValueError):
            pass
        shutil.rmtree(d, ignore_errors=True)


def _forget(table: str, batch: int) -> None:
    """Old listings and states: a reader needs only the newest."""
    for sub, suffix in ((META, ".compact"), (STATE, ".json")):
        d = os.path.join(table, sub)
        for name in os.listdir(d):
            head = name[: -len(suffix)]
            if name.endswith(suffix) and head.isdigit() and int(head) <= batch - _KEEP:
                _unlink(os.path.join(d, name))


def _parquet_files(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "_"))]
        out += [os.path.join(dirpath, n) for n in names if n.endswith(".parquet")]
    return sorted(out)


def _entry(path: str) -> dict[str, Any]:
    st = os.stat(path)
    # The fields of Spark's SinkFileStatus, as its file sink writes them.
    return {
        "path": "file://" + path,
        "size": st.st_size,
        "isDir": False,
        "modificationTime": int(st.st_mtime * 1000),
        "blockReplication": 1,
        "blockSize": 33554432,
        "action": "add",
    }


def _write_json(fname: str, obj: Any) -> None:
    _write_text(fname, json.dumps(obj, indent=1))


def _write_text(fname: str, text: str) -> None:
    write_hidden(fname, lambda f: f.write(text.encode("utf-8")))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
