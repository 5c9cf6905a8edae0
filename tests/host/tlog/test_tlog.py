"""The bridge's telemetry log (tlog/, docs/telemetry-log.md): round
trip, rolling, real SIGKILL crashes, corruption, retention.  Real files only."""

import json
import os
import random
import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from edgebus import tlog
from edgebus.tlog import (
    FILE_HEADER_SIZE,
    RECORD_HEADER_SIZE,
    LogLocked,
    LogWriter,
    ReadStats,
    earliest_offset,
    latest_offset,
    list_segments,
    read_log,
    read_segment,
    record_from_message,
    segment_name,
)
from edgebus.values import FrozenDict, Message, Origin
from tests.conftest import ROOT


def rec(i, **kw):
    r = {"ts_host": 1700000000.0 + i, "topic": ("t", "n%d" % i), "payload": {"i": i}, "seq": i}
    r.update(kw)
    return r


def seg_path(d, sid, sealed=True):
    return os.path.join(str(d), segment_name(sid, sealed))


def read_all(d, **kw):
    it = read_log(str(d), **kw)
    return list(it), it.stats


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


# ---------------------------------------------------------------------------
# Round trip


def test_round_trip_every_field(tmp_path):
    d = str(tmp_path / "log")
    full = {
        "ts_host": 1712345678.123456,
        "topic": ("capteurs", "température", "日本", 7, ""),
        "payload": {
            "bin": b"\x00\xff\xfe raw",
            "nested": [1, 2.5, None, True, "ünï", {"b": bytearray(b"ab")}],
            "big": 2**80,
            "neg": -3,
        },
        "ts_device": 12345.5,
        "seq": 42,
        "origin_kind": "link",
        "conn_id": "c7",
        "principal": "device:ω",
        "link_id": "link-1",
        "peer_node": "peer-a",
        "peer_sid": "sid-42",
        "generation": 7,
        "extra": {"seq": 42, "ts": 12345.5, "note": "é", "blob": b"\x01"},
    }
    cases = [
        full,
        {"ts_host": 1, "topic": ("a",), "payload": None},  # every optional null
        {"ts_host": 2.0, "topic": "a/b/c", "payload": b"\x00\x01\x02\xff"},  # str topic, raw bytes
        {"ts_host": 3.0, "topic": ["x", 0], "payload": {"$b64": "not bytes"}},  # looks like a tag
        {"ts_host": 4.0, "topic": ("x",), "payload": {"$lit": {"$b64": 1}}, "extra": {"$x": 1}},
        {"ts_host": 5.0, "topic": ("x",), "payload": (1, (2, b"z")), "extra": {}},
        {"ts_host": 6.0, "topic": ("x",), "payload": "", "principal": None},
        {"ts_host": 7.0, "topic": ("x",), "payload": FrozenDict({"k": "v"})},
    ]
    expect_payload = [
        full["payload"] | {"nested": [1, 2.5, None, True, "ünï", {"b": b"ab"}]},
        None,
        b"\x00\x01\x02\xff",
        {"$b64": "not bytes"},
        {"$lit": {"$b64": 1}},
        [1, [2, b"z"]],
        "",
        {"k": "v"},
    ]
    with LogWriter(d, version=1) as w:
        positions = [w.append(c) for c in cases]
    assert positions[0] == (0, FILE_HEADER_SIZE)
    got, stats = read_all(d)
    assert stats.clean and stats.records == len(cases) and stats.bytes_skipped == 0
    assert [p for p, _ in got] == positions
    for (_pos, r), c, pl in zip(got, cases, expect_payload):
        assert list(r) == list(tlog.FIELDS)
        assert r["payload"] == pl and type(r["payload"]) is type(pl)
        assert r["ts_host"] == c["ts_host"]
        topic = tuple(c["topic"].split("/")) if isinstance(c["topic"], str) else tuple(c["topic"])
        assert r["topic"] == topic and type(r["topic"]) is tuple
        for k in tlog.FIELDS[3:-1]:
            assert r[k] == c.get(k)
    r0 = got[0][1]
    assert r0["extra"] == full["extra"]
    assert tlog.topic_text(r0["topic"]) == "capteurs/température/日本/7/"
    assert got[1][1]["extra"] is None and got[5][1]["extra"] is None  # {} is logged as null
    assert got[4][1]["extra"] == {"$x": 1}
    # Undecoded form: the logged JSON model, what the Spark reader emits as text.
    raw = [r for _, r in read_log(d, decode_payload=False)]
    assert raw[2]["payload"] == {"$b64": "AAEC/w=="}
    assert raw[3]["payload"] == {"$lit": {"$b64": "not bytes"}}
    assert raw[4]["extra"] == {"$lit": {"$x": 1}}
    assert json.loads(json.dumps(raw[0]["payload"]))["bin"] == {"$b64": "AP/+IHJhdw=="}
    # Bytes on disk: compact UTF-8 JSON bodies, exactly as the doc describes.
    data = Path(seg_path(d, 0)).read_bytes()
    magic, version, flags, sid, crc = struct.unpack(">4sHHQI", data[:FILE_HEADER_SIZE])
    assert (magic, version, flags, sid) == (b"\xffEBL", 1, 0, 0)
    assert crc == zlib.crc32(data[:16])
    m, v, length, crc = struct.unpack(">4sHII", data[20:34])
    body = data[34 : 34 + length]
    assert (m, v) == (b"\xffEBR", 1) and crc == zlib.crc32(body, zlib.crc32(data[20:30]))
    assert b": " not in body and "température".encode() in body
    assert positions[1] == (0, 34 + length)


def test_record_from_message():
    o = Origin(
        "link",
        "c3",
        object(),
        "link-1",
        "peer-a",
        "sid-9",
        4,
        FrozenDict({"seq": 17, "ts": 99.25, "hop": 2}),
    )
    r = record_from_message(Message(("sensors", 3, "temp"), {"c": 21.5}, o), ts_host=5.0)
    assert r["ts_host"] == 5.0 and r["topic"] == ("sensors", 3, "temp")
    assert (r["seq"], r["ts_device"], r["generation"]) == (17, 99.25, 4)
    assert (r["origin_kind"], r["conn_id"], r["link_id"], r["peer_node"], r["peer_sid"]) == (
        "link",
        "c3",
        "link-1",
        "peer-a",
        "sid-9",
    )
    assert isinstance(r["principal"], str)
    assert r["extra"] == {"seq": 17, "ts": 99.25, "hop": 2}
    # Local message: no extra, no provenance, seq/ts absent -> null; ts_host defaults to now.
    before = time.time()
    r = record_from_message(
        Message(("a",), b"x", Origin("local", "c1", None, None, None, None, None, None))
    )
    assert before <= r["ts_host"] <= time.time()
    assert r["seq"] is None and r["ts_device"] is None and r["extra"] is None
    # Ill-typed seq/ts stay in extra only.
    o = Origin("local", "c1", "p", None, None, None, None, FrozenDict({"seq": "7", "ts": True}))
    r = record_from_message(Message(("a",), 1, o), ts_host=1.0)
    assert r["seq"] is None and r["ts_device"] is None and r["extra"] == {"seq": "7", "ts": True}


def test_append_rejects_bad_records_without_writing(tmp_path):
    d = str(tmp_path)
    bad = [
        {"ts_host": 1.0, "topic": ("a",), "payload": float("nan")},
        {"ts_host": 1.0, "topic": ("a",), "payload": {1: "int key"}},
        {"ts_host": 1.0, "topic": ("a",), "payload": {1, 2}},
        {"ts_host": 1.0, "topic": ("a",), "payload": "\ud800"},
        {"ts_host": 1.0, "topic": ("a",), "payload": 1, "colour": "red"},
        {"topic": ("a",), "payload": 1},
        {"ts_host": 1.0, "topic": (True,), "payload": 1},
        {"ts_host": 1.0, "topic": (), "payload": 1},
        {"ts_host": 1.0, "topic": ("a",), "payload": 1, "generation": "7"},
        {"ts_host": 1.0, "topic": ("a",), "payload": 1, "seq": True},
        {"ts_host": 1.0, "topic": ("a",), "payload": 1, "principal": 5},
        {"ts_host": float("inf"), "topic": ("a",), "payload": 1},
        {"ts_host": 1.0, "topic": ("a",), "payload": 1, "extra": [1]},
        {"ts_host": 1.0, "topic": ("a",), "payload": b"x" * (tlog.MAX_BODY_BYTES + 1)},
        "not a dict",
    ]
    with LogWriter(d, version=1) as w:
        assert w.append(rec(0)) == (0, FILE_HEADER_SIZE)
        before = w.position()
        for b in bad:
            with pytest.raises((TypeError, ValueError)):
                w.append(b)
            assert w.position() == before
        assert w.append(rec(1)) == before
    got, stats = read_all(d)
    assert [r["seq"] for _, r in got] == [0, 1] and stats.clean


# ---------------------------------------------------------------------------
# Rolling


def test_roll_by_size(tmp_path):
    d = str(tmp_path)
    with LogWriter(d, version=1, segment_bytes=1024, segment_seconds=None) as w:
        assert w.active_segment is None and list_segments(d) == []
        positions = [w.append(rec(i, payload="p" * 50)) for i in range(40)]
        big = w.append(rec(40, payload="B" * 3000))  # larger than a segment
        positions.append(big)
        positions.append(w.append(rec(41)))
        active = w.active_segment
        assert os.path.exists(seg_path(d, active, sealed=False))
        assert active not in list_segments(d)  # only sealed ones are listed
        assert list_segments(d) == list(range(active))
    ids = list_segments(d)
    assert ids == list(range(len(ids))) and len(ids) >= 8
    assert [p[0] for p in positions] == sorted(p[0] for p in positions)
    assert big[1] == FILE_HEADER_SIZE  # alone in its segment
    for sid in ids:
        size = os.path.getsize(seg_path(d, sid))
        assert size <= 1024 or sid == big[0]
    got, stats = read_all(d)
    assert stats.clean and [p for p, _ in got] == positions
    assert [r["seq"] for _, r in got] == list(range(42))
    assert not [n for n in os.listdir(d) if n.endswith(".open")]


def test_roll_by_time_and_tick(tmp_path):
    d = str(tmp_path)
    clk = Clock(1000.0)
    with LogWriter(d, version=1, segment_seconds=10, clock=clk) as w:
        p0 = w.append(rec(0))
        clk.t = 1005.0
        p1 = w.append(rec(1))
        assert p0 == (0, FILE_HEADER_SIZE) and p1[0] == 0 and p1[1] > p0[1]
        assert list_segments(d) == []
        clk.t = 1010.0  # age 10 >= 10: roll first
        assert w.append(rec(2)) == (1, FILE_HEADER_SIZE)
        assert list_segments(d) == [0]
        assert os.path.getmtime(seg_path(d, 0)) == 1010.0  # seal time = writer's clock
        clk.t = 1015.0
        w.tick()  # not old enough yet
        assert list_segments(d) == [0] and w.active_segment == 1
        clk.t = 1020.5
        w.tick()  # no append needed to seal
        assert list_segments(d) == [0, 1] and w.active_segment is None
        w.tick()
        assert w.roll() is None  # nothing active
        assert w.append(rec(3)) == (2, FILE_HEADER_SIZE)
        assert w.roll() == 2
        assert w.position() == (3, FILE_HEADER_SIZE)
    assert list_segments(d) == [0, 1, 2]
    assert [(p, r["seq"]) for p, r in read_all(d)[0]] == [
        (p0, 0),
        (p1, 1),
        ((1, FILE_HEADER_SIZE), 2),
        ((2, FILE_HEADER_SIZE), 3),
    ]


def test_fsync_modes_and_flush(tmp_path):
    for mode in ("segment", "always", "interval"):
        d = str(tmp_path / mode)
        clk = Clock()
        with LogWriter(d, version=1, fsync=mode, fsync_interval=1.0, clock=clk) as w:
            for i in range(5):
                clk.t += 0.6
                w.append(rec(i))
                w.tick()
            assert w.flush() == w.position()
            # The data of a flushed active segment is in its .open file already.
            assert os.path.getsize(seg_path(d, 0, sealed=False)) == w.position()[1]
        assert [r["seq"] for _, r in read_all(d)[0]] == list(range(5))
    with pytest.raises(ValueError):
        LogWriter(str(tmp_path / "x"), fsync="sometimes")


def test_one_writer_per_directory(tmp_path):
    d = str(tmp_path)
    w = LogWriter(d, version=1)
    with pytest.raises(LogLocked):
        LogWriter(d, version=1)
    w.append(rec(0))
    w.close()
    w.close()  # idempotent
    with pytest.raises(tlog.LogError):
        w.append(rec(1))
    with LogWriter(d, version=1) as w2:
        assert w2.append(rec(1)) == (1, FILE_HEADER_SIZE)  # ids continue after reopen
    assert "LOCK" in os.listdir(d) and list_segments(d) == [0, 1]


# ---------------------------------------------------------------------------
# Crash safety: a real child process killed with SIGKILL

CHILD = r"""
import os, random, sys, time
sys.path.insert(0, sys.argv[1])
from edgebus.tlog import LogWriter
d, base, mode, seg = sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
rng = random.Random(base)
w = LogWriter(d, segment_bytes=seg, segment_seconds=None, fsync=mode, fsync_interval=0.002,
              version=int(sys.argv[6]))
print("OPEN", flush=True)
i = base
while True:
    for _ in range(rng.randint(1, 25)):
        w.append({"ts_host": time.time(), "topic": ("crash", str(base), "é"),
                  "payload": {"i": i, "pad": "x" * rng.randint(0, 400),
                              "bin": os.urandom(rng.randint(0, 40))},
                  "seq": i, "peer_node": "child", "peer_sid": str(base), "generation": base})
        i += 1
    sid, _pos = w.flush()
    # The bytes the sync point made durable in the row file (power loss keeps them).
    off = os.path.getsize(os.path.join(d, "%020d.seg.open" % sid))
    print("SYNC", i - 1, sid, off, flush=True)
    if rng.random() < 0.1:
        w.roll()
"""


@pytest.mark.slow
@pytest.mark.parametrize("version", [1, 2])
def test_crash_with_sigkill_recovers(tmp_path, version):
    """SIGKILL a writing child at random instants, ten times over the same
    directory.  Half the runs also simulate power loss after the kill: the
    active segment loses its unsynced bytes, cut at a random byte.  Version
    2: recovery turns the row file into a Parquet segment."""
    d = str(tmp_path / "log")
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    rng = random.Random(20240611)
    modes = ["segment", "always", "interval"]
    synced = {}  # base -> highest seq reported durable by the child
    present = {}  # base -> count of records seen after the previous recovery
    recoveries = []
    iterations = 10
    for it in range(iterations):
        base = (it + 1) * 1_000_000
        p = subprocess.Popen(
            [
                sys.executable,
                str(child),
                ROOT,
                d,
                str(base),
                modes[it % 3],
                str(rng.choice([2048, 8192, 65536])),
                str(version),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines = []
        if it % 2 == 0:  # kill at a random instant (some during start-up)
            time.sleep(rng.uniform(0.0, 0.3))
        else:  # kill soon after the n-th reported sync
            want = rng.randint(1, 60)
            for line in p.stdout:
                lines.append(line)
                if line.startswith("SYNC") and sum(x.startswith("SYNC") for x in lines) >= want:
                    break
            time.sleep(rng.uniform(0, 0.01))
        p.send_signal(signal.SIGKILL)
        out, err = p.communicate(timeout=10)
        assert p.returncode == -signal.SIGKILL, err
        lines += out.splitlines()
        syncs = [
            tuple(map(int, x.split()[1:]))
            for x in lines
            if x.startswith("SYNC") and len(x.split()) == 4
        ]
        synced[base] = syncs[-1][0] if syncs else base - 1

        if it % 4 in (1, 2):  # power loss: unsynced bytes vanish
            for name in os.listdir(d):
                if name.endswith(".seg.open"):
                    f = os.path.join(d, name)
                    lo = syncs[-1][2] if syncs and syncs[-1][1] == int(name[:20]) else 0
                    os.truncate(f, rng.randint(lo, os.path.getsize(f)))

        # Before any recovery: readers see sealed segments only, all whole and valid.
        got, stats = read_all(d)
        assert stats.clean, stats.corrupt

        with LogWriter(d, version=version) as w:  # recovery
            assert w.active_segment is None
            recoveries += w.recovered
        names = os.listdir(d)
        assert not [n for n in names if n.endswith(".open") or n.endswith(".corrupt")]

        got, stats = read_all(d)
        assert stats.clean, stats.corrupt
        seqs = [r["seq"] for _, r in got]
        assert len(seqs) == len(set(seqs)), "duplicate records"
        assert [p for p, _ in got] == sorted(p for p, _ in got)
        by_base = {}
        for _, r in got:
            assert r["peer_node"] == "child" and r["payload"]["i"] == r["seq"]
            by_base.setdefault(r["generation"], []).append(r["seq"])
        for b, s in synced.items():
            s_list = by_base.get(b, [])
            # A run's records are a prefix of what it appended, covering all it synced.
            assert s_list == list(range(b, b + len(s_list)))
            assert b + len(s_list) - 1 >= s
            if b in present:  # earlier runs are untouched by later crashes
                assert len(s_list) == present[b]
            present[b] = len(s_list)
    assert sum(s - b + 1 for b, s in synced.items()) > 0, "no child ever synced"
    assert recoveries, "no crash ever left an active segment behind"


def _write_open(d, sid, frames, tail=b""):
    with open(seg_path(d, sid, sealed=False), "wb") as f:
        f.write(tlog.file_header(sid))
        for fr in frames:
            f.write(fr)
        f.write(tail)


def test_recovery_of_crash_leftovers(tmp_path):
    d = str(tmp_path)
    with LogWriter(d, version=1) as w:
        w.append(rec(0))
    frames = [tlog.frame(tlog.encode_body(rec(i))) for i in (1, 2, 3)]
    _write_open(d, 1, frames[:2], tail=frames[2][:-5])  # torn last record
    with LogWriter(d, version=1) as w:
        assert [a for _, a, _ in w.recovered] == ["sealed"]
        assert w.append(rec(9)) == (2, FILE_HEADER_SIZE)
    assert os.path.getsize(seg_path(d, 1)) == FILE_HEADER_SIZE + len(frames[0]) + len(frames[1])
    assert [r["seq"] for _, r in read_all(d)[0]] == [0, 1, 2, 9]

    # Header only, empty file, torn header: removed; ids reused since never visible.
    _write_open(d, 3, [])
    with LogWriter(d, version=1) as w:
        assert [a for _, a, _ in w.recovered] == ["removed"]
    for content in (b"", tlog.file_header(3)[:7]):
        with open(seg_path(d, 3, sealed=False), "wb") as f:
            f.write(content)
        with LogWriter(d, version=1) as w:
            assert [a for _, a, _ in w.recovered] == ["removed"]
            assert w.append(rec(10)) == (3, FILE_HEADER_SIZE)
            w.roll()
            os.unlink(seg_path(d, 3))
    # A bad header followed by data is not silently destroyed: set aside.
    with open(seg_path(d, 3, sealed=False), "wb") as f:
        f.write(b"\x00" * FILE_HEADER_SIZE + frames[0])
    with LogWriter(d, version=1) as w:
        assert [a for _, a, _ in w.recovered] == ["quarantined"]
        assert w.position()[0] == 4
    assert os.path.exists(seg_path(d, 3, sealed=False) + ".corrupt")
    assert list_segments(d) == [0, 1, 2]


# ---------------------------------------------------------------------------
# Corruption


def _three_segments(d):
    pos = []
    with LogWriter(d, version=1, segment_seconds=None) as w:
        for s in range(3):
            for i in range(10):
                pos.append(w.append(rec(s * 10 + i, payload={"v": "abc" * i, "b": b"\x01" * i})))
            w.roll()
    return pos


def test_corruption_is_skipped_counted_and_named(tmp_path):
    d = str(tmp_path)
    pos = _three_segments(d)
    original = {p: r for p, r in read_all(d)[0]}
    # Flip bytes in the body of record 4 of segment 0.
    off4 = pos[4][1]
    f0 = seg_path(d, 0)
    data = bytearray(Path(f0).read_bytes())
    data[off4 + RECORD_HEADER_SIZE + 10] ^= 0x55
    data[off4 + RECORD_HEADER_SIZE + 11] ^= 0x55
    Path(f0).write_bytes(data)
    # Break the magic of record 7 of segment 0 as well.
    off7 = pos[7][1]
    data[off7] = 0x00
    Path(f0).write_bytes(data)
    # Truncate segment 1 in the middle of its last record.
    f1 = seg_path(d, 1)
    last = pos[19][1]
    os.truncate(f1, last + 9)

    got, stats = read_all(d)
    gone = {pos[4], pos[7], pos[19]}
    assert [p for p, _ in got] == [p for p in pos if p not in gone]
    for p, r in got:
        assert r == original[p]  # never a wrong record
    assert stats.records == 27
    assert stats.corrupt == [
        (f0, off4, "CRC mismatch"),
        (f0, off7, "bad record magic"),
        (f1, last, "truncated record header (9 bytes before end of file)"),
    ]
    assert stats.bytes_skipped == (pos[5][1] - off4) + (pos[8][1] - off7) + 9
    assert not stats.clean and stats.missing == []

    # A torn body (header whole) is named as such too.
    os.truncate(f1, last + RECORD_HEADER_SIZE + 3)
    it = read_segment(d, 1)
    assert [p for p, _ in it] == [p[1] for p in pos[10:19]]
    assert it.stats.corrupt == [(f1, last, it.stats.corrupt[0][2])]
    assert it.stats.corrupt[0][2].startswith("truncated record (body needs")


def test_random_damage_never_raises_or_yields_a_wrong_record(tmp_path):
    d = str(tmp_path / "log")
    pos = _three_segments(d)
    original = {p: r for p, r in read_all(d)[0]}
    clean = Path(seg_path(d, 1)).read_bytes()
    rng = random.Random(7)
    for _trial in range(300):
        data = bytearray(clean)
        for _ in range(rng.randint(1, 6)):
            kind = rng.random()
            i = rng.randrange(len(data))
            if kind < 0.6:
                data[i] ^= 1 << rng.randrange(8)
            elif kind < 0.8:
                data[i : i + rng.randint(1, 40)] = b""
            else:
                data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 30)))
        if rng.random() < 0.3:
            del data[rng.randrange(len(data)) :]
        Path(seg_path(d, 1)).write_bytes(data)
        it = read_segment(d, 1)
        out = list(it)
        for _off, r in out:
            # Any record yielded is one that was written (shifted offsets allowed
            # only when bytes were inserted/removed before it).
            assert r in [original[p] for p in pos[10:20]]
        seqs = [r["seq"] for _, r in out]
        assert seqs == sorted(set(seqs))
        assert it.stats.records == len(out)
        if len(out) < 10:
            assert it.stats.corrupt
        for f, off, reason in it.stats.corrupt:
            assert f == seg_path(d, 1) and 0 <= off <= len(data) and reason


def test_bad_file_headers(tmp_path):
    d = str(tmp_path)
    pos = _three_segments(d)
    # Segment 0: future format version (valid CRC) -> whole segment skipped.
    head = struct.pack(">4sHHQ", b"\xffEBL", 2, 0, 0)
    head += struct.pack(">I", zlib.crc32(head))
    f0 = seg_path(d, 0)
    data = Path(f0).read_bytes()
    Path(f0).write_bytes(head + data[FILE_HEADER_SIZE:])
    # Segment 1: garbage header -> counted, records still read.
    f1 = seg_path(d, 1)
    data = bytearray(Path(f1).read_bytes())
    data[2] ^= 0xFF
    Path(f1).write_bytes(data)
    # Segment 2 copied under another id: the header names 2, the file says 3.
    Path(seg_path(d, 3)).write_bytes(Path(seg_path(d, 2)).read_bytes())
    got, stats = read_all(d)
    assert [p for p, _ in got] == pos[10:30]
    assert [(f, o) for f, o, _ in stats.corrupt] == [(f0, 0), (f1, 0), (seg_path(d, 3), 0)]
    assert "unsupported format version 2" in stats.corrupt[0][2]
    assert "names segment 2" in stats.corrupt[2][2]


# ---------------------------------------------------------------------------
# Offsets and ranges


def test_offsets_are_replayable_ranges(tmp_path):
    d = str(tmp_path)
    assert latest_offset(d) is None and earliest_offset(d) is None
    assert list(read_log(d)) == [] and list_segments(str(tmp_path / "nope")) == []
    pos = _three_segments(d)
    assert earliest_offset(d) == (0, FILE_HEADER_SIZE)
    end = latest_offset(d)
    assert end == (2, os.path.getsize(seg_path(d, 2)))
    # Splitting at any record boundary or segment end gives each record exactly once.
    cuts = [(0, 0)] + [pos[i] for i in (3, 10, 11, 25)] + [(1, os.path.getsize(seg_path(d, 1)))]
    cuts = sorted(cuts) + [end]
    seen = []
    for a, b in zip(cuts, cuts[1:]):
        it = read_log(d, start=a, end=b)
        seen += [p for p, _ in it]
        assert it.stats.clean
    assert seen == pos
    # Per-segment partitions with offsets inside: [start, end) by record start.
    it = read_segment(d, 1, pos[12][1], pos[15][1])
    assert [o for o, _ in it] == [p[1] for p in pos[12:15]]
    stats = ReadStats()
    for sid in list_segments(d):
        list(read_segment(d, sid, stats=stats))
    assert stats.records == 30 and stats.clean
    # Nothing after the end; a removed segment is reported, not raised.
    assert list(read_log(d, start=end)) == []
    os.unlink(seg_path(d, 0))
    it = read_log(d, start=(0, 0))
    assert [p for p, _ in it] == pos[10:]
    assert it.stats.missing == [(0, 0)] and it.stats.corrupt == []
    it = read_segment(d, 0)
    assert list(it) == [] and it.stats.missing == [(0, 0)]
    os.unlink(seg_path(d, 1))
    it = read_log(d, start=(0, 100), end=(1, 10**9))
    assert list(it) == [] and it.stats.missing == [(0, 1)]
    it = read_log(d, start=pos[3], end=(2**64 - 1, 0))  # far future end: no loop
    assert [p for p, _ in it] == pos[20:] and it.stats.missing == [(0, 1)]


# ---------------------------------------------------------------------------
# Retention


def test_retention_by_size(tmp_path):
    d = str(tmp_path)
    clk = Clock()
    with LogWriter(
        d, version=1, segment_bytes=1000, segment_seconds=None, retention_bytes=3000, clock=clk
    ) as w:
        for i in range(100):
            w.append(rec(i, payload="x" * 100))
            ids = list_segments(d)
            total = sum(os.path.getsize(seg_path(d, s)) for s in ids)
            assert total <= 3000
            if ids:
                assert ids == list(range(ids[0], ids[-1] + 1))  # only a prefix is ever removed
                assert w.active_segment > ids[-1]
        assert list_segments(d)[0] > 0
        assert os.path.exists(seg_path(d, w.active_segment, sealed=False))
    got, stats = read_all(d)
    assert stats.clean and [r["seq"] for _, r in got][-1] == 99
    # The newest sealed segment is kept even when alone it exceeds the budget.
    with LogWriter(d, version=1, segment_bytes=1000, segment_seconds=None, retention_bytes=10) as w:
        newest = list_segments(d)[-1]
        assert list_segments(d) == [newest]
        w.append(rec(100, payload="y" * 900))
        w.roll()
        assert list_segments(d) == [newest + 1]


def test_retention_by_age(tmp_path):
    d = str(tmp_path)
    clk = Clock(1000.0)
    with LogWriter(d, version=1, segment_seconds=None, retention_seconds=100, clock=clk) as w:
        for t in (1000, 1050, 1090, 1095):  # sealed at these times
            clk.t = t
            w.append(rec(t))
            w.roll()
        assert list_segments(d) == [0, 1, 2, 3]
        clk.t = 1160.0
        w.append(rec(9999))  # active: never deleted
        w.tick()  # cutoff 1060: 0 and 1 go
        assert list_segments(d) == [2, 3] and w.active_segment == 4
        clk.t = 5000.0
        w.tick()  # all expired: newest kept
        assert list_segments(d) == [3]
        assert os.path.exists(seg_path(d, 4, sealed=False))
    # Sealed on close at t=5000; reopening far later still keeps the newest.
    with LogWriter(d, version=1, retention_seconds=100, clock=Clock(9000.0)):
        assert list_segments(d) == [4]
    assert [r["seq"] for _, r in read_all(d)[0]] == [9999]


# ---------------------------------------------------------------------------
# The newest sequence number per sender boot, after a crash

TAIL_CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from edgebus.tlog import LogWriter
w = LogWriter(sys.argv[2], segment_seconds=None, version=int(sys.argv[3]))
def put(link, sid, seq):
    w.append({"ts_host": time.time(), "topic": ("dev", "x"), "payload": seq, "seq": seq,
              "link_id": link, "peer_node": "n", "peer_sid": sid})
for s in range(1, 50):
    put("serial:a", "a1", s)
w.roll()                                     # a1 ends in a sealed segment
for s in range(1, 8):
    put("serial:a", "a2", s)                 # the next boot of the same device
    put("mqtt:b", "b1", 100 + s)
put("serial:a", "a2", 3)                     # a replayed copy: the highest counts
w.append({"ts_host": time.time(), "topic": ("app",), "payload": 1})   # host traffic: no key
w.flush()
put("mqtt:b", "b1", 999)                     # never synced: buffered, dies with the process
print("SYNCED", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("version", [1, 2])
def test_last_seqs_after_a_crash(tmp_path, version):
    """A real writer process killed with SIGKILL after a sync point leaves an
    .open segment; once a new writer has recovered it, last_seqs gives each
    (link, peer boot) its highest durable seq."""
    d = str(tmp_path / "log")
    child = tmp_path / "child.py"
    child.write_text(TAIL_CHILD)
    p = subprocess.Popen(
        [sys.executable, str(child), ROOT, d, str(version)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout.readline().strip() == "SYNCED"
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
    assert os.path.exists(seg_path(d, 1, sealed=False))
    assert tlog.last_seqs(d) == {("serial:a", "a1"): 49}  # .open segments are not read
    with LogWriter(d, version=version) as w:
        assert [a for _, a, _ in w.recovered] == ["sealed"]
        assert tlog.last_seqs(d) == {
            ("serial:a", "a1"): 49,
            ("serial:a", "a2"): 7,
            ("mqtt:b", "b1"): 107,
        }
        # max_bytes bounds the reading to the newest segments (at least one).
        assert tlog.last_seqs(d, max_bytes=1) == {("serial:a", "a2"): 7, ("mqtt:b", "b1"): 107}
    assert tlog.last_seqs(str(tmp_path / "none")) == {}


def test_atomic_writes_leave_the_old_file_or_the_new_one(tmp_path):
    """The host's atomic writes (edgebus.tlog.names): a failed fill leaves the old
    file and no temporary; a file or a tree is renamed into place whole."""
    final, tmp = tmp_path / "state.json", tmp_path / "state.json.tmp"
    tlog.write_atomically(str(final), str(tmp), lambda f: f.write(b"one"))

    def half(f):
        f.write(b"tw")
        raise OSError("disk full")

    with pytest.raises(OSError):
        tlog.write_atomically(str(final), str(tmp), half)
    assert final.read_bytes() == b"one" and not tmp.exists()
    # A symlink planted at the temporary's name is never written through.
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    tmp.symlink_to(victim)
    tlog.write_atomically(str(final), str(tmp), lambda f: f.write(b"two"), mode=0o600)
    assert victim.read_bytes() == b"keep" and final.read_bytes() == b"two"
    assert final.stat().st_mode & 0o777 == 0o600  # made so, never wider first
    (tmp_path / "t" / "sub").mkdir(parents=True)
    (tmp_path / "t" / "sub" / "image").write_bytes(b"new")
    tlog.rename_durably(str(tmp_path / "t"), str(tmp_path / "out2"))
    assert (tmp_path / "out2" / "sub" / "image").read_bytes() == b"new"
    assert not (tmp_path / "t").exists()
    tlog.rename_durably(str(final), str(tmp_path / "moved.json"))
    assert (tmp_path / "moved.json").read_bytes() == b"two" and not final.exists()
