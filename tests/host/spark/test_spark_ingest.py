"""`edgebus ingest` (ingest/job.py): exactly once across a SIGKILL of the job's
process mid-batch, duplicates removed, local traffic kept, corruption skipped,
several gateways' logs into one table.

Only what is about the process runs the command in a process of its own: the
job SIGKILLed, and a refused list of logs (its exit code, before any Spark).
The other runs are the same command in this process on the shared session
(sparkkit.ingest_here: the command's parser and job.run, without a JVM start
each); test_spark_compaction's --compact run checks a process's quiet start."""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from dev.harness.process import Process  # noqa: E402
from edgebus.tlog import RECORD_HEADER_SIZE, LogWriter, segment_name, segments  # noqa: E402
from tests.host.spark.sparkkit import (  # noqa: E402
    ROOT,
    device_record,
    expected_row,
    ingest,
    ingest_cmd,
    ingest_here,
    local_record,
    spark_env,
)

T0 = 1_712_000_000.0
NODES = ("node-a", "node-b", "node-c")


def committed_files(table):
    """Data files the file sink's metadata log lists (committed batches only)."""
    import json

    meta = os.path.join(str(table), "_spark_metadata")
    listed = set()
    for m in [x for x in os.listdir(meta) if x.isdigit()] if os.path.isdir(meta) else []:
        for line in Path(os.path.join(meta, m)).read_text().splitlines()[1:]:
            listed.add(json.loads(line)["path"].replace("file://", ""))
    return listed


def data_files(table):
    found = set()
    for dp, _dn, fn in os.walk(str(table)):
        if "_spark_metadata" not in dp:
            found |= {os.path.join(dp, x) for x in fn if x.endswith(".parquet")}
    return found


def batch_ids(ckpt, sub):
    try:
        return {int(f) for f in os.listdir(os.path.join(str(ckpt), sub)) if f.isdigit()}
    except FileNotFoundError:
        return set()


class Fleet:
    """Writes a log the way the bridge would, remembering what it wrote."""

    def __init__(self, path):
        self.path = str(path)
        self.t = T0
        self.seq = {n: 0 for n in NODES}
        self.written = []  # (record, position)
        self.unique = set()  # (node, sid, seq) keys logged

    def write(self, n, dup_every=0, local_every=10, version=2):
        with LogWriter(self.path, segment_bytes=6000, version=version) as w:
            for i in range(n):
                self.t += 0.01
                if local_every and i % local_every == local_every - 1:
                    rec = local_record(i, self.t)
                else:
                    node = NODES[i % len(NODES)]
                    rec = device_record(node, node + "-s1", self.seq[node], self.t, gen=2)
                    self.seq[node] += 1
                    self.unique.add((node, node + "-s1", rec["seq"]))
                self.written.append((rec, w.append(rec)))
                if dup_every and i % dup_every == 0 and rec.get("seq") is not None:
                    # A link replay: the same device record logged again a moment later.
                    self.t += 0.01
                    dup = dict(rec, ts_host=self.t)
                    self.written.append((dup, w.append(dup)))


def corrupt_one(fleet):
    """Damage a body byte of a device record in the second segment (version 1,
    row format); return it."""
    rec, pos = next(
        (r, p) for r, p in fleet.written if p[0] == 1 and r.get("seq") is not None and p[1] > 20
    )
    fname = os.path.join(fleet.path, segment_name(pos[0]))
    data = bytearray(Path(fname).read_bytes())
    data[pos[1] + RECORD_HEADER_SIZE + 5] ^= 0x20
    Path(fname).write_bytes(bytes(data))
    return rec, pos


def check_table(spark, table, fleet, lost_pos):
    from edgebus.ingest.report import read_table

    df = read_table(spark, table)
    rows = [r.asDict() for r in df.collect()]
    keyed = [(r["peer_node"], r["peer_sid"], r["seq"]) for r in rows if r["seq"] is not None]
    lost = {(r["peer_node"], r["peer_sid"], r["seq"]) for r, p in fleet.written if p == lost_pos}
    # Every device record exactly once (duplicates included once), none invented.
    assert len(keyed) == len(set(keyed))
    assert set(keyed) == fleet.unique - lost
    # Local records (no device key) all kept, each once.
    local_want = {p for r, p in fleet.written if r.get("seq") is None}
    local_got = [(r["segment"], r["offset"]) for r in rows if r["seq"] is None]
    assert len(local_got) == len(set(local_got)) and set(local_got) == local_want
    # Provenance and values intact in the table, and the partition columns.
    by_pos = {(r["segment"], r["offset"]): r for r in rows}
    import datetime

    for rec, pos in fleet.written[::37]:
        if pos in by_pos:
            row = dict(by_pos[pos])
            assert (
                row.pop("date")
                == datetime.datetime.fromtimestamp(rec["ts_host"], datetime.timezone.utc).date()
            )
            row.pop("ts_host_time")
            assert row == expected_row(rec, pos)
    return rows


def test_a_folder_that_is_no_log_is_refused_before_spark(tmp_path):
    """An empty folder, the bridge's working folder given for its log
    folder, or a bridge of several workers' log folder (a log per worker
    below it): one line naming the log folders below it if any (the workers':
    as a glob), exit 2 (usage), no
    checkpoint bound to it and no table; Spark never starts (no session, so
    fast). A bridge's fresh log (its lock, no segment yet) is a log."""
    run, table, ckpt = tmp_path / "run", tmp_path / "table", tmp_path / "ckpt"
    (run / "state").mkdir(parents=True)
    LogWriter(str(run / "tlog")).close()  # what a bridge leaves: LOCK, no segment
    (tmp_path / "empty").mkdir()
    workers = tmp_path / "workers"  # a bridge of several workers' [log] dir
    for i in range(2):
        LogWriter(str(workers / ("w%d" % i))).close()
    for log, hint in (
        (tmp_path / "empty", "give a bridge's [log] dir"),
        (run, "did you mean %s?" % (run / "tlog")),
        (workers, "its workers' logs are %s (quote it for the shell's sake)" % (workers / "w*")),
    ):
        r = ingest(log, table, ckpt, "--once", timeout=60)
        assert (r.returncode, r.stdout) == (2, ""), r.stderr
        assert r.stderr == (
            "edgebus ingest: %s holds no log segments and is no telemetry log "
            "directory; %s\n" % (log, hint)
        )
        assert not ckpt.exists() and not table.exists()
    assert segments.is_log_dir(str(run / "tlog"))


def test_exactly_once_across_sigkill_with_duplicates_and_corruption(spark, tmp_path):
    from edgebus.ingest.corruption import corrupt_report

    log, table, ckpt = tmp_path / "log", tmp_path / "table", tmp_path / "ckpt"
    fleet = Fleet(log)
    # A log begun by a version-1 bridge (row segments), continued in version 2.
    fleet.write(2400, dup_every=17, version=1)
    _, lost_pos = corrupt_one(fleet)

    # Run 1: a continuous query in small micro-batches, SIGKILLed (JVM, Python
    # workers and all) while a batch is planned but not committed, preferably
    # once that batch has written some of its files.
    p = Process(
        ingest_cmd(log, table, ckpt, "--max-records-per-trigger", "150", "--trigger-interval", "0"),
        cwd=ROOT,
        env=spark_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    killed_mid_batch = torn = False
    deadline = time.time() + 150
    try:
        while time.time() < deadline and p.poll() is None:
            done, planned = batch_ids(ckpt, "commits"), batch_ids(ckpt, "offsets")
            if len(done) >= 3 and planned - done:
                torn = bool(data_files(table) - committed_files(table))
                if torn or len(done) > 15:
                    os.killpg(p.pid, signal.SIGKILL)
                    killed_mid_batch = True
                    break
            time.sleep(0.005)
    finally:
        if p.poll() is None and not killed_mid_batch:
            os.killpg(p.pid, signal.SIGKILL)
        out = p.communicate(timeout=60)[0].decode(errors="replace")
    assert killed_mid_batch, out[-3000:]
    done, planned = batch_ids(ckpt, "commits"), batch_ids(ckpt, "offsets")
    assert planned - done, "the kill should leave a planned, uncommitted batch"
    orphans = data_files(table) - committed_files(table)

    # The bridge goes on: more records, and replays of records from before the kill.
    fleet.write(600, dup_every=0, local_every=7)
    with LogWriter(str(log), segment_bytes=6000) as w:
        for rec, _ in [x for x in fleet.written if x[0].get("seq") is not None][-40:-20]:
            fleet.t += 0.01
            dup = dict(rec, ts_host=fleet.t)
            fleet.written.append((dup, w.append(dup)))

    # A record logged with a clock gone back by more than the watermark is
    # dropped as late, and said so.
    with LogWriter(str(log), segment_bytes=6000) as w:
        late = [
            device_record("node-a", "node-a-s1", 10**6, T0 - 3600, gen=2),
            local_record(10**6, T0 - 3600),
        ]
        late_pos = {w.append(r) for r in late}
    fleet.write(30, dup_every=0)

    # Run 2: restart on the same checkpoint, process what is there, exit. The
    # checkpoint and the table are all the killed process left: the restart is
    # the command in this process (on the shared session).
    r = ingest_here(spark, log, table, ckpt, "--once")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "the log has 1 corrupt region(s) and 0 missing segment range(s), skipped" in r.stdout
    assert "WARNING: 2 records were older than the watermark" in r.stdout
    rows = check_table(spark, table, fleet, lost_pos)
    assert not late_pos & {(r["segment"], r["offset"]) for r in rows}
    n_dups = (
        len(fleet.written)
        - len(fleet.unique)
        - sum(1 for rec, _ in fleet.written if rec.get("seq") is None)
    )
    assert n_dups > 100 and len(rows) == len(fleet.written) - n_dups - 1
    # The killed batch's files (rows written again by the replay, or torn) stay
    # on disk outside the metadata log, which is why the table reads right.
    assert not orphans & committed_files(table)
    assert orphans or not torn
    rep = corrupt_report(str(table / "_corrupt"))
    assert [(x["segment"], x["offset"]) for x in rep["regions"]] == [lost_pos]
    assert rep["regions"][0]["file"] == os.path.join(str(log), segment_name(lost_pos[0]))

    # Run 3: nothing new: the table does not change.
    r = ingest_here(spark, log, table, ckpt, "--once")
    assert r.returncode == 0 and "read 0 log records" in r.stdout, r.stdout + r.stderr[-2000:]
    assert sorted(map(str, check_table(spark, table, fleet, lost_pos))) == sorted(map(str, rows))


def test_retransmitted_copies_are_removed_and_late_is_kept(spark, tmp_path):
    """Lossless recovery as the log sees it: the bridge logged seq 0..119 of
    a device boot, then died before acknowledging 80..119; the device
    retransmits them out of its spool (late, logged again 30 s later) and then
    delivers 120..159, held in the spool during the outage, late too. The
    job keeps each (peer_node, peer_sid, seq) once, across micro-batches,
    and the late column tells spooled readings apart."""
    from edgebus.ingest.report import read_table

    log, table, ckpt = tmp_path / "log", tmp_path / "table", tmp_path / "ckpt"
    t = T0
    with LogWriter(str(log), segment_bytes=4000) as w:
        for s in range(120):
            t += 0.05
            w.append(device_record("node-a", "a1", s, t))
            if s % 10 == 9:
                w.append(local_record(s, t))
        t += 30
        for s in range(80, 160):
            t += 0.01
            w.append(device_record("node-a", "a1", s, t, late=True))
        w.append(device_record("node-b", "b1", 5, t, late=True))
    # Two micro-batches of 107 records: the first holds seq 0..97 (and 9 local
    # records), so the copies of 80..97 come a batch after the first ones
    # (dedup across batches, by its state) and those of 98..119 in the same
    # batch (within one); more batches would only repeat the first case.
    r = ingest_here(spark, log, table, ckpt, "--once", "--max-records-per-trigger", "107")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    batches = re.search(r"read 213 log records in (\d+) micro-batches", r.stdout)
    assert batches and int(batches.group(1)) == 2, r.stdout
    rows = [x.asDict() for x in read_table(spark, table).collect()]
    keyed = sorted((x["peer_node"], x["seq"]) for x in rows if x["seq"] is not None)
    assert keyed == [("node-a", s) for s in range(160)] + [("node-b", 5)]
    assert sum(1 for x in rows if x["seq"] is None) == 12
    late = {x["seq"]: x["late"] for x in rows if x["peer_node"] == "node-a"}
    assert not any(late[s] for s in range(80))
    assert all(late[s] for s in range(120, 160))
    assert all(x["late"] is False for x in rows if x["seq"] is None)
    _read_without_spark(table, rows)


def _read_without_spark(table, rows):
    """The table as pandas and DuckDB read it (its committed files, partition
    columns from their directories): the rows Spark reads, nothing else."""
    import duckdb
    import pandas as pd

    from edgebus.ingest.tablelog import dataset

    def keys(tuples):
        return sorted(
            (tuple(None if v is None or v is pd.NA or v != v else v for v in t) for t in tuples),
            key=repr,
        )

    want = keys((x["peer_node"], x["seq"], x["offset"], x["date"]) for x in rows)
    pdf = dataset(table).to_table().to_pandas()
    cols = ["peer_node", "seq", "offset", "date"]
    assert keys(pdf[cols].astype(object).itertuples(index=False)) == want
    ds = dataset(table)  # noqa: F841 (DuckDB finds it by its name)
    got = duckdb.connect().sql('SELECT peer_node, seq, "offset", date FROM ds').fetchall()
    assert keys(got) == want


def test_three_gateways_into_one_table(spark, tmp_path):
    """Three bridges' logs (a glob) into one table by one job: per-gateway
    counts right, local traffic of every log kept (the same positions in
    each log), a device that moves from gateway a to b in one boot keeps one
    history (the seq numbers both logged are kept once). A changed list of
    logs for the same checkpoint is refused, clearly."""
    from pyspark.sql import functions as F

    from edgebus.ingest.report import read_table

    logs, table, ckpt = tmp_path / "logs", tmp_path / "table", tmp_path / "ckpt"
    want = {}  # gateway -> (device rows, local rows)
    for g, gw in enumerate(("gw-a", "gw-b", "gw-c")):
        n = k = 0
        with LogWriter(str(logs / gw), segment_bytes=5000, gateway=gw) as w:
            for i in range(100 + 50 * g):
                node = "node-%s%d" % (gw[-1], i % 3)
                w.append(device_record(node, node + "-1", i // 3, T0 + i))
                n += 1
                if i % 20 == 0:
                    w.append(local_record(i, T0 + i))
                    k += 1
            if gw == "gw-a":  # node-m boots here, seq 0..49
                for s in range(50):
                    w.append(device_record("node-m", "m-1", s, T0 + 200 + s))
            if gw == "gw-b":  # ... and moves here, seq 40..99
                for s in range(40, 100):
                    w.append(device_record("node-m", "m-1", s, T0 + 245 + s))
        want[gw] = (n, k)
    r = ingest_here(spark, str(logs / "gw-*"), table, ckpt, "--once")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "read %d log records" % (sum(map(sum, want.values())) + 110) in r.stdout, r.stdout
    df = read_table(spark, table)

    def per_gateway(rows):
        return {
            x["gateway"]: x["n"]
            for x in rows.groupBy("gateway").agg(F.count(F.lit(1)).alias("n")).collect()
        }

    assert per_gateway(
        df.where(F.col("peer_node").startswith("node-") & (F.col("peer_node") != "node-m"))
    ) == {g: n for g, (n, _) in want.items()}
    assert per_gateway(df.where(F.col("seq").isNull())) == {g: k for g, (_, k) in want.items()}
    moved = [
        (x["seq"], x["gateway"])
        for x in df.where(F.col("peer_node") == "node-m").select("seq", "gateway").collect()
    ]
    assert sorted(s for s, _ in moved) == list(range(100))
    assert {g for s, g in moved if s < 40} == {"gw-a"} and {g for s, g in moved if s >= 50} == {
        "gw-b"
    }
    # One history: node-m's rows sit in one partition of the table.
    parts = [
        os.path.join(d, p)
        for d in os.listdir(table)
        if d.startswith("date=")
        for p in os.listdir(table / d)
        if p == "peer_node=node-m"
    ]
    assert len(parts) == 1
    # The command refuses before starting Spark: its exit code and message.
    r = ingest(str(logs / "gw-a"), table, ckpt, "--once")
    assert r.returncode == 2 and "a checkpoint keeps its list of logs" in r.stderr, r.stderr
