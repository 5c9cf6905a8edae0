"""Version-2 sealed segments (tlog/columnar.py, docs/telemetry-log.md 2.3):
Parquet files any engine reads, positions as row numbers, a seal that a
SIGKILL at any step neither loses nor duplicates, damaged files skipped and
named, version-1 segments still read beside them.  Real files only."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from edgebus import tlog
from edgebus.tlog import LogError, LogWriter, list_segments, read_log, read_segment
from edgebus.values import FrozenDict
from tests.conftest import ROOT


def rec(i, **kw):
    r = {
        "ts_host": 1700000000.0 + i,
        "topic": ("t", "n%d" % i),
        "payload": {"i": i},
        "seq": i,
        "link_id": "serial:a",
        "peer_node": "a",
        "peer_sid": "s1",
    }
    r.update(kw)
    return r


CASES = [
    {
        "ts_host": 1712345678.123456,
        "topic": ("capteurs", "température", 7, ""),
        "payload": {"bin": b"\x00\xff", "nested": [1, 2.5, None, True, "ünï"], "big": 2**80},
        "ts_device": 12345.5,
        "seq": 42,
        "origin_kind": "link",
        "conn_id": "c7",
        "principal": "device:ω",
        "link_id": "link-1",
        "peer_node": "peer-a",
        "peer_sid": "sid-42",
        "generation": 7,
        "extra": {"seq": 42, "ts": 12345.5, "late": True, "blob": b"\x01"},
    },
    {"ts_host": 1, "topic": ("a",), "payload": None},
    {"ts_host": 2.0, "topic": "a/b/c", "payload": b"\x00\x01\x02\xff"},
    {"ts_host": 3.0, "topic": ["x", 0], "payload": {"$b64": "not bytes"}},
    {"ts_host": 4.0, "topic": ("x",), "payload": {"$lit": {"$b64": 1}}, "extra": {"$x": 1}},
    {"ts_host": 5.0, "topic": ("x",), "payload": (1, (2, b"z")), "extra": {}},
    {"ts_host": 7.0, "topic": ("x",), "payload": FrozenDict({"k": "v"})},
    {"ts_host": 1e15, "topic": ("far",), "payload": 1},  # beyond Spark's timestamps
]


@pytest.mark.parametrize("decode", [True, False])
def test_same_records_as_version_1_and_plain_parquet(tmp_path, decode):
    v1, v2 = str(tmp_path / "v1"), str(tmp_path / "v2")
    with LogWriter(v1, version=1) as w:
        for c in CASES:
            w.append(c)
    with LogWriter(v2, gateway="gw-1") as w:
        assert [w.append(c) for c in CASES] == [(0, i) for i in range(len(CASES))]
        assert w.position() == (0, len(CASES))
    assert sorted(os.listdir(v2)) == [tlog.parquet_name(0), "LOCK"]
    a = [r for _, r in read_log(v1, decode_payload=decode)]
    it = read_log(v2, decode_payload=decode)
    b = list(it)
    assert it.stats.clean and [p for p, _ in b] == [(0, i) for i in range(len(CASES))]
    assert [r for _, r in b] == a
    assert b[0][1]["topic"] == ("capteurs", "température", 7, "")  # int token kept
    # Any engine reads it as plain Parquet: the documented columns and metadata.
    fname = os.path.join(v2, tlog.parquet_name(0))
    t = pq.read_table(fname)
    assert t.schema.names[:2] == ["topic", "topic_tokens"] and "gateway" in t.schema.names
    meta = t.schema.metadata
    assert meta[b"edgebus.format_version"] == b"2" and meta[b"edgebus.segment"] == b"0"
    assert meta[b"edgebus.gateway"] == b"gw-1"
    rows = t.to_pylist()
    assert [r["offset"] for r in rows] == list(range(len(CASES)))
    assert {r["gateway"] for r in rows} == {"gw-1"} and {r["segment"] for r in rows} == {0}
    assert rows[0]["topic"] == "capteurs/température/7/" and rows[0]["late"] is True
    assert rows[2]["payload"] == '{"$b64":"AAEC/w=="}' and rows[1]["payload"] is None
    assert rows[-1]["ts_host_time"] is None and rows[0]["ts_host_time"] is not None
    assert tlog.latest_offset(v2) == (0, len(CASES)) and tlog.earliest_offset(v2) == (0, 0)
    assert [o for o, _ in read_segment(v2, 0, 2, 5)] == [2, 3, 4]


def test_version_1_segments_are_read_beside_version_2(tmp_path):
    d = str(tmp_path)
    with LogWriter(d, version=1, segment_seconds=None) as w:
        for i in range(5):
            w.append(rec(i))
        w.roll()
        w.append(rec(5, peer_sid="s0"))
        w.flush()
        os.close(w._fd)  # a version-1 writer "crashes"
        w._fd, w._closed = None, True
        os.close(w._lock_fd)
    with LogWriter(d, gateway="gw") as w:  # a version-2 writer takes over
        assert [a for _, a, _ in w.recovered] == ["sealed"]
        for i in range(6, 9):
            w.append(rec(i))
    files = tlog.sealed_files(d)
    assert [files[s][1] for s in sorted(files)] == [1, 2, 2]
    got = [(p, r["seq"]) for p, r in read_log(d)]
    assert [s for _, s in got] == list(range(9))
    assert got[0][0] == (0, tlog.FILE_HEADER_SIZE) and got[5][0] == (1, 0)
    assert tlog.last_seqs(d) == {("serial:a", "s1"): 8, ("serial:a", "s0"): 5}


SEAL_CHILD = r"""
import os, signal, sys, time
sys.path.insert(0, sys.argv[1])
from edgebus.tlog import LogWriter
d, where = sys.argv[2], sys.argv[3]
w = LogWriter(d, segment_seconds=None, gateway="gw")
for i in range(100):
    w.append({"ts_host": time.time(), "topic": ("x",), "payload": i, "seq": i,
              "link_id": "l", "peer_sid": "s"})
w.flush()
real = getattr(os, where)
def crash(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)
setattr(os, where, crash)
w.roll()
"""


@pytest.mark.parametrize("where", ["rename", "unlink"])
def test_sigkill_inside_the_seal_loses_and_duplicates_nothing(tmp_path, where):
    """A real writer process killed inside its seal: before the Parquet file is
    renamed into place (rename), or between that and the row file's removal
    (unlink).  Recovery leaves each record exactly once."""
    d = str(tmp_path / "log")
    child = tmp_path / "child.py"
    child.write_text(SEAL_CHILD)
    p = subprocess.run(
        [sys.executable, str(child), ROOT, d, where], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == -signal.SIGKILL, p.stderr
    names = sorted(os.listdir(d))
    assert tlog.segment_name(0, sealed=False) in names
    if where == "rename":  # a finished temporary file, invisible to readers
        assert list_segments(d) == [] and [n for n in names if n.startswith(".tmp-")]
    else:  # the Parquet segment is in place: readers see it whole
        assert list_segments(d) == [0]
        assert [r["seq"] for _, r in read_log(d)] == list(range(100))
    with LogWriter(d) as w:
        assert w.recovered and w.position() == (1, 0)
        w.append(rec(100, link_id="l", peer_sid="s"))
    assert sorted(os.listdir(d)) == [tlog.parquet_name(0), tlog.parquet_name(1), "LOCK"]
    it = read_log(d)
    assert [r["seq"] for _, r in it] == list(range(101)) and it.stats.clean
    assert tlog.last_seqs(d) == {("l", "s"): 100}


def test_a_row_file_beside_a_shorter_parquet_segment_is_refused(tmp_path):
    d = str(tmp_path)
    with LogWriter(d, version=1) as w:
        for i in range(3):
            w.append(rec(i))
    os.rename(os.path.join(d, tlog.segment_name(0)), os.path.join(d, tlog.segment_name(0, False)))
    tlog.columnar.write_segment(d, 0, [tlog.row_of(tlog.records.normalize(rec(0)))])
    with pytest.raises(LogError, match="resolve by hand"):
        LogWriter(d)


def test_damaged_parquet_is_skipped_and_named(tmp_path):
    d = str(tmp_path)
    with LogWriter(d, segment_seconds=None) as w:
        for s in range(3):
            for i in range(10):
                w.append(rec(s * 10 + i, payload={"pad": "z%d" % i * 50}))
            w.roll()
    f1 = os.path.join(d, tlog.parquet_name(1))
    data = bytearray(Path(f1).read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the data pages
    Path(f1).write_bytes(bytes(data))
    f2 = os.path.join(d, tlog.parquet_name(2))
    os.truncate(f2, os.path.getsize(f2) - 20)  # the footer is gone
    it = read_log(d)
    got = [r["seq"] for _, r in it]
    assert got == list(range(10))  # never a wrong record
    named = {(f, o): why for f, o, why in it.stats.corrupt}
    assert set(named) == {(f1, 0), (f2, 0)}
    assert "unreadable" in named[(f1, 0)] and "segment skipped" in named[(f2, 0)]
    # last_seqs reads three columns only: the damage (in the payloads) does not reach them.
    assert tlog.last_seqs(d) == {("serial:a", "s1"): 19}


def test_retention_and_positions_in_rows(tmp_path):
    d = str(tmp_path)
    with LogWriter(d, segment_bytes=1200, segment_seconds=None, retention_bytes=12000) as w:
        pos = [w.append(rec(i, payload="x" * 100)) for i in range(200)]
    assert all(o < 10 for _, o in pos) and pos[0] == (0, 0)
    ids = list_segments(d)
    assert ids[0] > 0 and ids == list(range(ids[0], ids[-1] + 1))
    total = sum(os.path.getsize(f) for f, _ in tlog.sealed_files(d).values())
    assert total <= 12000 + max(os.path.getsize(f) for f, _ in tlog.sealed_files(d).values())
    got = [(p, r["seq"]) for p, r in read_log(d)]
    assert got == [(p, i) for i, p in enumerate(pos)][-len(got) :]


def test_convert_a_version_1_log(tmp_path):
    from edgebus.tlog.convert import convert_log

    d = str(tmp_path)
    with LogWriter(d, version=1, segment_bytes=2000) as w:
        for i in range(30):
            w.append(rec(i, topic=("t", i)))
    before = [r for _, r in read_log(d)]
    mtimes = {s: os.path.getmtime(f) for s, (f, _) in tlog.sealed_files(d).items()}
    assert len(mtimes) > 2 and convert_log(d, gateway="old-gw") == sorted(mtimes)
    files = tlog.sealed_files(d)
    assert {v for _, v in files.values()} == {2}
    assert {s: os.path.getmtime(f) for s, (f, _) in files.items()} == mtimes  # retention ages
    it = read_log(d)
    assert [r for _, r in it] == before and it.stats.clean
    assert convert_log(d) == []
