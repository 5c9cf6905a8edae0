"""Derived tables written from the driver in batches (edgebus.ingest.tablelog):
Spark reads only committed batches, a crashed batch is undone, state is per batch."""

import json
import os

import pyarrow.parquet as pq

from edgebus.ingest import compaction, tablelog


def _rows(spark, table):
    return sorted(tuple(r) for r in spark.read.parquet(table).select("k", "v").collect())


def test_batches_append_replace_and_keep_their_state(spark, tmp_path):
    table = str(tmp_path / "view")
    assert tablelog.committed(table) == (-1, {})
    df1 = spark.createDataFrame([("a", 1), ("b", 2)], "k string, v long")
    assert tablelog.write_batch(df1, table, {"mark": 1}, partition_by=("k",)) == 0
    df2 = spark.createDataFrame([("a", 3)], "k string, v long")
    assert tablelog.write_batch(df2, table, {"mark": 2}, partition_by=("k",)) == 1
    assert _rows(spark, table) == [("a", 1), ("a", 3), ("b", 2)]
    assert tablelog.committed(table) == (1, {"mark": 2})
    # Readers other than Spark take the committed files.
    got = sorted(
        (os.path.basename(os.path.dirname(f)), r["v"])
        for f in tablelog.files(table)
        for r in pq.read_table(f).to_pylist()
    )
    assert got == [("k=a", 1), ("k=a", 3), ("k=b", 2)]
    # A batch of state only; then one that replaces every row.
    assert tablelog.write_batch(None, table, {"mark": 3}) == 2
    assert len(tablelog.files(table)) == 3
    old = tablelog.files(table)
    df3 = spark.createDataFrame([("c", 9)], "k string, v long")
    assert tablelog.write_batch(df3, table, {"mark": 4}, partition_by=("k",), replace=True) == 3
    assert _rows(spark, table) == [("c", 9)]
    assert not any(os.path.exists(f) for f in old)
    # Only the newest listings are kept.
    assert sorted(os.listdir(os.path.join(table, "_spark_metadata"))) == ["2.compact", "3.compact"]


def test_a_crashed_batch_is_undone_and_the_table_compacts(spark, tmp_path):
    table = str(tmp_path / "view")
    for i in range(3):
        df = spark.createDataFrame([("a", i)], "k string, v long")
        tablelog.write_batch(df, table, {"mark": i}, partition_by=("k",))
    # A batch that moved its file into the partition and died before its commit.
    staging = os.path.join(table, "_staging", "3")
    os.makedirs(staging)
    orphan = os.path.join(table, "k=a", "part-orphan.parquet")
    with open(orphan, "wb") as f:
        f.write(b"not committed")
    with open(os.path.join(staging, "plan.json"), "w") as f:
        json.dump([orphan], f)
    assert tablelog.committed(table) == (2, {"mark": 2})
    df = spark.createDataFrame([("a", 7)], "k string, v long")
    assert tablelog.write_batch(df, table, {"mark": 3}, partition_by=("k",)) == 3
    assert not os.path.exists(orphan)
    assert not os.listdir(os.path.join(table, "_staging"))
    assert _rows(spark, table) == [("a", 0), ("a", 1), ("a", 2), ("a", 7)]
    # edgebus ingest --compact merges a derived table's small files too.
    r = compaction.compact(table)
    assert (r["files_before"], r["files_after"], r["rows"]) == (4, 1, 4)
    assert _rows(spark, table) == [("a", 0), ("a", 1), ("a", 2), ("a", 7)]
    assert tablelog.committed(table) == (3, {"mark": 3})
