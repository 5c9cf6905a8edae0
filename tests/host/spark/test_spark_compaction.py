"""`edgebus ingest --compact` (ingest/compaction.py) on a real table: small
files of several micro-batches merged per partition, the table reading the same
rows, the next run on the same checkpoint going on exactly once, a SIGKILL
before or after the listing's swap changing no row, and one job per table.

The runs that only make a table to compact, or go on from a checkpoint, are
the command run in this process on the shared session (ingest_here); the
--compact run is the command in a process of its own, as a user runs it."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from edgebus.tlog import LogWriter  # noqa: E402
from tests.host.spark.sparkkit import (  # noqa: E402
    ROOT,
    device_record,
    ingest,
    ingest_here,
    local_record,
)

T0 = 1_712_000_000.0


def write(log, first, n):
    with LogWriter(str(log), segment_bytes=6000, gateway="gw") as w:
        for i in range(first, first + n):
            node = "node-%d" % (i % 3)
            w.append(device_record(node, node + "-s1", i // 3, T0 + i * 0.01))
            if i % 10 == 0:
                w.append(local_record(i, T0 + i * 0.01))


def listed(table):
    """{partition dir: [data files]} as the newest sink log file lists them."""
    from edgebus.ingest.compaction import newest_log_file, read_log_file

    _bid, name = newest_log_file(str(table))
    out = {}
    for e in read_log_file(os.path.join(str(table), "_spark_metadata", name)):
        p = e["path"].replace("file://", "")
        out.setdefault(os.path.dirname(p), []).append(p)
    return out


def on_disk(table):
    return sorted(
        os.path.join(dp, f)
        for dp, _dn, fn in os.walk(str(table))
        if "_spark_metadata" not in dp
        for f in fn
        if f.endswith(".parquet")
    )


def rows(spark, table):
    from edgebus.ingest.report import read_table

    return sorted(
        json.dumps(r.asDict(), default=str, sort_keys=True)
        for r in read_table(spark, str(table)).collect()
    )


def test_compaction_merges_small_files_and_keeps_exactly_once(spark, tmp_path):
    log, table, ckpt = tmp_path / "log", tmp_path / "table", tmp_path / "ckpt"
    # 550 records in 2 micro-batches of 275: each writes its own files into
    # every partition, so each holds small files of two batches to merge (more
    # batches only cost a second or two each, and merge the same way).
    write(log, 0, 500)
    r = ingest_here(spark, log, table, ckpt, "--once", "--max-records-per-trigger", "275")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "read 550 log records in 2 micro-batches" in r.stdout, r.stdout
    before = listed(table)
    assert len(before) == 4 and all(len(f) >= 2 for f in before.values())  # 3 devices + local
    want = rows(spark, table)
    assert len(want) == 550

    # The command as a user runs it (its own Spark), which compacts before
    # its query and after it.
    r = ingest(log, table, ckpt, "--once", "--compact")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    # Spark's start-up says nothing: no WARN lines, no default profile's banner.
    assert not [ln for ln in r.stderr.splitlines() if " WARN " in ln or "log4j" in ln], r.stderr
    assert "Setting default log level" not in r.stderr, r.stderr
    n_small = sum(len(f) for f in before.values())
    assert "compacted %d small files into 4" % n_small in r.stdout, r.stdout
    after = listed(table)
    assert sorted(after) == sorted(before) and all(len(f) == 1 for f in after.values())
    # The small files are gone from disk, the merged ones are what is listed.
    assert on_disk(table) == sorted(f for fs in after.values() for f in fs)
    assert rows(spark, table) == want

    # The job goes on from its checkpoint: new records once, old ones not again.
    write(log, 500, 150)
    r = ingest_here(spark, log, table, ckpt, "--once", "--max-records-per-trigger", "110")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "read 165 log records" in r.stdout, r.stdout
    got = rows(spark, table)
    assert len(got) == 715 and len(set(got)) == 715 and set(want) <= set(got)


def test_one_job_per_table(tmp_path):
    from edgebus.ingest.compaction import table_lock

    log, table = tmp_path / "log", tmp_path / "table"
    write(log, 0, 30)
    held = table_lock(str(table))
    try:
        r = ingest(log, table, tmp_path / "ckpt", "--once", "--compact")
    finally:
        held.close()
    assert r.returncode == 2 and "another edgebus ingest writes the table" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "ckpt" / "offsets")


# Compaction in a process of its own, SIGKILLed at the first `event` (an audit
# event: os.rename, os.remove) on a path ending in `suffix`.
KILLED_COMPACTION = """
import os, signal, sys
from edgebus.ingest.compaction import compact
table, event, suffix = sys.argv[1:4]

def hook(ev, args):
    if ev == event and str(args[1] if ev == "os.rename" else args[0]).endswith(suffix):
        os.kill(os.getpid(), signal.SIGKILL)

sys.addaudithook(hook)
compact(table)
"""


def test_compaction_killed_before_or_after_the_swap_keeps_the_rows(spark, tmp_path):
    log, table, ckpt = tmp_path / "log", tmp_path / "table", tmp_path / "ckpt"
    # 330 records in 2 micro-batches: two batches' small files in each partition.
    write(log, 0, 300)
    r = ingest_here(spark, log, table, ckpt, "--once", "--max-records-per-trigger", "165")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    before, want = listed(table), rows(spark, table)
    assert all(len(f) > 1 for f in before.values())
    env = dict(os.environ, PYTHONPATH=ROOT)
    # Killed as it renames the new listing into place: merged files written,
    # not listed; then as it removes the first replaced file: listing swapped.
    for event, suffix, listing in (
        ("os.rename", ".compact", "old"),
        ("os.remove", ".parquet", "new"),
    ):
        p = subprocess.run(
            [sys.executable, "-c", KILLED_COMPACTION, str(table), event, suffix],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == -9, p.stderr[-2000:]
        now = listed(table)
        if listing == "old":
            assert now == before
        else:
            assert sorted(now) == sorted(before) and all(len(f) == 1 for f in now.values())
        assert rows(spark, table) == want
    # What the kills left on disk (merged files of the first, small ones of the
    # second) is unlisted, so no reader through Spark sees it.
    assert len(on_disk(table)) > sum(len(f) for f in listed(table).values())
