"""The `edgebus` PySpark data source (ingest/) on real local Spark:
schema and values, batch and streaming, offsets, range splits, corruption;
version-2 (Parquet) segments and version-1 (row) ones alike."""

import datetime
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from edgebus.tlog import RECORD_HEADER_SIZE, LogWriter, segment_name  # noqa: E402
from tests.host.spark.sparkkit import device_record, expected_row, local_record  # noqa: E402

T0 = 1_712_000_000.0


GW = "gw-test"
VERSIONS = pytest.mark.parametrize("version", [1, 2])


def write_log(d, records, **kw):
    """Positions of records written to log d; version 2 (Parquet) names GW."""
    kw.setdefault("segment_bytes", 2048)
    if kw.get("version", 2) == 2:
        kw.setdefault("gateway", GW)
    with LogWriter(str(d), **kw) as w:
        return [w.append(r) for r in records]


def gateway_of(version):
    return GW if version == 2 else None


def rows_by_pos(df):
    return {(r["segment"], r["offset"]): r.asDict() for r in df.collect()}


def mixed_records(n=60):
    """Device records of two nodes, local records, and the awkward cases."""
    recs = []
    for i in range(n):
        if i % 5 == 4:
            recs.append(local_record(i, T0 + i))
        else:
            recs.append(
                device_record(
                    "node-%d" % (i % 2), "s%d" % (i % 2), i, T0 + i, gen=3 + i % 2, late=i % 7 == 3
                )
            )
    recs += [
        {
            "ts_host": T0 + n,
            "topic": ("capteurs", "température", "日本", 7, ""),
            "payload": {"bin": b"\x00\xff", "nested": [1, 2.5, None, True, "ünï"], "big": 2**80},
            "ts_device": 12345,
            "seq": 2**70,
            "generation": -5,
            "origin_kind": "link",
            "conn_id": "c7",
            "principal": "device:ω",
            "link_id": "l1",
            "peer_node": "p",
            "peer_sid": "s",
            "extra": {"seq": 2**70, "note": "é"},
        },
        {"ts_host": T0 + n + 1, "topic": ("a",), "payload": None},  # all optional null
        {"ts_host": int(T0) + n + 2, "topic": "x/y", "payload": b"\x01\x02"},  # int ts_host
        {
            "ts_host": T0 + n + 3,
            "topic": ("x",),
            "payload": {"$b64": "not bytes"},
            "extra": {"$x": 1},
        },
        {"ts_host": T0 + n + 4, "topic": ("x",), "payload": "", "extra": {}},
        {
            "ts_host": T0 + n + 5,
            "topic": ("x",),
            "payload": 1,
            "ts_device": 2**60 + 1,
            "generation": 2**63,
            "seq": -(2**63),
        },  # edges of long/double
        {"ts_host": T0 + n + 6, "topic": ("x",), "payload": 1, "ts_device": 10**400},
        # late is extra's own member "late" being true, nothing that looks like it
        {"ts_host": T0 + n + 7, "topic": ("x",), "payload": 1, "extra": {"x": {"late": True}}},
        {"ts_host": T0 + n + 8, "topic": ("x",), "payload": 1, "extra": {"n": '"late":true'}},
        {"ts_host": T0 + n + 9, "topic": ("x",), "payload": 1, "extra": {"late": 1}},
        {"ts_host": T0 + n + 10, "topic": ("x",), "payload": 1, "extra": {"late": False}},
        {"ts_host": T0 + n + 11, "topic": ("x",), "payload": 1, "extra": {"a": 1, "late": True}},
    ]
    return recs


def check_rows(got, recs, positions, gateway=None):
    assert len(got) == len(recs)
    for rec, pos in zip(recs, positions):
        row = dict(got[pos])
        want = expected_row(rec, pos, gateway)
        t = row.pop("ts_host_time")
        assert t == datetime.datetime.fromtimestamp(rec["ts_host"], datetime.timezone.utc).replace(
            tzinfo=None
        )
        assert row == want


@VERSIONS
def test_batch_schema_and_values(spark, tmp_path, version):
    from edgebus.ingest.schema import SCHEMA

    recs = mixed_records()
    positions = write_log(tmp_path / "log", recs, version=version)
    assert len({p[0] for p in positions}) > 3  # several segments
    df = spark.read.format("edgebus").load(str(tmp_path / "log"))
    assert df.schema == SCHEMA
    assert [f.name for f in df.schema.fields] == [
        "topic",
        "topic_tokens",
        "payload",
        "ts_device",
        "ts_host",
        "ts_host_time",
        "link_id",
        "peer_node",
        "peer_sid",
        "generation",
        "seq",
        "origin_kind",
        "conn_id",
        "principal",
        "extra",
        "late",
        "gateway",
        "segment",
        "offset",
    ]
    got = rows_by_pos(df)
    check_rows(got, recs, positions, gateway_of(version))
    # Spot checks of the documented conversions.
    odd = got[positions[len(recs) - 12]]
    assert odd["topic"] == "capteurs/température/日本/7/" and odd["seq"] is None  # > int64
    assert json.loads(odd["payload"])["bin"] == {"$b64": "AP8="}
    assert json.loads(odd["payload"])["big"] == 2**80 and odd["ts_device"] == 12345.0
    assert got[positions[-11]]["payload"] is None and got[positions[-11]]["extra"] is None
    assert got[positions[-9]]["payload"] == '{"$lit":{"$b64":"not bytes"}}'
    assert got[positions[-9]]["extra"] == '{"$lit":{"$x":1}}'
    assert got[positions[-8]]["payload"] == '""' and got[positions[-8]]["extra"] is None
    edge = got[positions[-7]]
    assert (edge["ts_device"], edge["generation"], edge["seq"]) == (2.0**60, None, -(2**63))
    assert got[positions[-6]]["ts_device"] is None
    assert [got[p]["late"] for p in positions[-5:]] == [False, False, False, False, True]
    spooled = [i for i in range(60) if i % 7 == 3 and i % 5 != 4]  # device_record(late=)
    assert sum(got[p]["late"] for p in positions) == len(spooled) + 1


def test_payload_helpers(spark, tmp_path):
    from pyspark.sql import functions as F

    from edgebus.ingest.helpers import payload_bytes, payload_field, payload_struct

    recs = [
        {
            "ts_host": T0,
            "topic": ("t",),
            "payload": {"temp": 21.5, "ok": True, "n": 3, "pos": {"x": 1}, "xs": [4, 5]},
        },
        {"ts_host": T0 + 1, "topic": ("t",), "payload": {"temp": "warm"}},  # wrong type
        {"ts_host": T0 + 2, "topic": ("t",), "payload": 7},  # bare number
        {"ts_host": T0 + 3, "topic": ("t",), "payload": b"\x00raw"},
        {"ts_host": T0 + 4, "topic": ("t",), "payload": None, "extra": {"ts": 9.5}},
    ]
    write_log(tmp_path / "log", recs)
    df = spark.read.format("edgebus").load(str(tmp_path / "log")).orderBy("offset")
    got = df.select(
        payload_field("payload", "temp", "double").alias("temp"),
        payload_field(F.col("payload"), "ok", "boolean").alias("ok"),
        payload_field("payload", "pos.x", "int").alias("x"),
        payload_field("payload", "xs[1]", "long").alias("x1"),
        payload_field("payload", "pos").alias("pos"),
        payload_field("payload", "$", "long").alias("bare"),
        payload_bytes("payload").alias("raw"),
        payload_struct("payload", "temp double, n long").alias("st"),
        payload_field("extra", "ts", "double").alias("ets"),
    ).collect()
    assert [r["temp"] for r in got] == [21.5, None, None, None, None]  # "warm": null, no error
    assert got[0]["ok"] is True and got[0]["x"] == 1 and got[0]["x1"] == 5
    assert got[0]["pos"] == '{"x":1}'
    assert got[2]["bare"] == 7 and got[0]["bare"] is None
    assert bytes(got[3]["raw"]) == b"\x00raw" and got[0]["raw"] is None
    assert (got[0]["st"]["temp"], got[0]["st"]["n"]) == (21.5, 3)
    assert got[4]["ets"] == 9.5 and got[4]["temp"] is None


@VERSIONS
def test_byte_range_splits_give_the_same_rows(spark, tmp_path, version):
    """Cuts fall inside records (version 1) or between rows (version 2): each
    record is still read once, nothing is reported corrupt."""
    recs = mixed_records(200)
    positions = write_log(tmp_path / "log", recs, segment_bytes=16384, version=version)
    corrupt = tmp_path / "corrupt"
    for opts in ({"splitBytes": "1000"}, {"splitBytes": "1777"}, {"minPartitions": "7"}):
        df = (
            spark.read.format("edgebus")
            .options(**opts)
            .option("corruptDir", str(corrupt))
            .load(str(tmp_path / "log"))
        )
        rows = df.collect()
        assert len(rows) == len(recs)
        check_rows(rows_by_pos(df), recs, positions, gateway_of(version))
    assert not corrupt.exists()
    from edgebus.ingest.ranges import RangeGroup
    from edgebus.ingest.source import EdgebusDataSource

    parts = (
        EdgebusDataSource({"path": str(tmp_path / "log"), "splitBytes": "1000"})
        .reader(None)
        .partitions()
    )
    assert all(isinstance(p, RangeGroup) for p in parts)
    assert len(parts) > len({p[0] for p in positions})


@VERSIONS
def test_small_segments_are_packed_into_few_partitions(spark, tmp_path, version):
    """Many small segments (the bridge seals one a minute) are packed into
    about minPartitions partitions, by default the session's parallelism,
    each reading its segments in log order; every record is read once."""
    from edgebus.ingest.source import EdgebusDataSource, with_parallelism

    recs = mixed_records(2000)
    positions = write_log(tmp_path / "log", recs, segment_bytes=8192, version=version)
    nseg = len({p[0] for p in positions})
    assert nseg > 40
    log = str(tmp_path / "log")
    plans = {}
    for k, opts in (("default", {}), ("four", {"minPartitions": "4"})):
        parts = EdgebusDataSource(dict(opts, path=log)).reader(None).partitions()
        ranges = [(r.segment, r.start, r.end) for g in parts for r in g.ranges]
        assert ranges == sorted(ranges) and len({r[0] for r in ranges}) == nseg
        plans[k] = len(parts)
    assert 2 <= plans["default"] < nseg / 4  # packed, yet spread over the cores
    assert plans["default"] < plans["four"] < nseg / 4
    # register() passes the session's parallelism to the planning worker.
    from pyspark import cloudpickle

    cls = pickle.loads(cloudpickle.dumps(with_parallelism(5)))
    assert cls({"path": log}).reader(None).opts.min_partitions == 5
    assert cls({"path": log, "minPartitions": "3"}).reader(None).opts.min_partitions == 3
    for opts, want in (({}, plans["default"]), ({"minPartitions": "4"}, plans["four"])):
        df = spark.read.format("edgebus").options(**opts).load(log)
        assert df.rdd.getNumPartitions() == want
    check_rows(rows_by_pos(df), recs, positions, gateway_of(version))


def test_empty_and_absent_log(spark, tmp_path):
    os.makedirs(tmp_path / "empty")
    assert spark.read.format("edgebus").load(str(tmp_path / "empty")).count() == 0
    with pytest.raises(Exception, match="no log directory"):
        spark.read.format("edgebus").load(str(tmp_path / "absent")).count()


def test_local_workers_import_the_installed_pyspark(spark):
    """Python workers (session._local_workers) import pyspark from its
    installed copy, not from Spark's pyspark.zip, compiled anew in every
    process (docs/spark.md, "Python workers")."""
    import pyspark

    where = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__file__)
    assert where.collect() == [pyspark.__file__]


def stream_to_table(spark, log, out, ckpt, **opts):
    """Run an availableNow stream of the log into a Parquet table; returns the
    number of micro-batches that read rows."""
    r = spark.readStream.format("edgebus")
    for k, v in opts.items():
        r = r.option(k, str(v))
    q = (
        r.load(str(log))
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return sum(1 for p in q.recentProgress if p["numInputRows"] > 0)


@VERSIONS
def test_streaming_offsets_rate_limits_and_restart(spark, tmp_path, version):
    from edgebus.ingest.schema import SCHEMA

    log, out, ckpt = tmp_path / "log", tmp_path / "out", tmp_path / "ckpt"
    recs = mixed_records(120)
    positions = write_log(log, recs, segment_bytes=4096, version=version)
    batches = stream_to_table(spark, log, out, ckpt, maxRecordsPerTrigger=40)
    assert batches == -(-len(recs) // 40)
    # The checkpoint's offsets are log positions, as JSON.
    offs = sorted((f for f in os.listdir(ckpt / "offsets") if f.isdigit()), key=int)
    last = Path(ckpt / "offsets" / offs[-1]).read_text().splitlines()[-1]
    # (The end of the newest sealed segment is written as the next one's start.)
    assert json.loads(last) == {"segment": positions[-1][0] + 1, "offset": 0}
    # More records, sealed later: the restarted query reads only those.
    more = [device_record("node-9", "s9", i, T0 + 500 + i) for i in range(50)]
    positions += write_log(log, more, segment_bytes=4096, version=version)
    batches = stream_to_table(spark, log, out, ckpt, maxBytesPerTrigger=1500)
    assert batches >= 3  # byte budget cuts inside segments and records
    df = spark.read.schema(SCHEMA).parquet(str(out))
    got = rows_by_pos(df)
    assert df.count() == len(got)  # nothing twice
    check_rows(got, recs + more, positions, gateway_of(version))


def damage(path, sid, offset, how):
    fname = os.path.join(str(path), segment_name(sid))
    data = bytearray(Path(fname).read_bytes())
    if how == "crc":
        data[offset + RECORD_HEADER_SIZE + 3] ^= 0x55  # a body byte
    elif how == "magic":
        data[offset] = 0x00
    elif how == "truncate":
        del data[offset + 9 :]
    elif how == "header":
        data[5] = 0x77  # file header version/CRC
    with open(fname, "wb") as f:
        f.write(data)


def test_corrupt_and_truncated_records_are_skipped_and_reported(spark, tmp_path):
    from edgebus.ingest.corruption import corrupt_report

    log = tmp_path / "log"
    recs = [device_record("n", "s", i, T0 + i) for i in range(150)]
    positions = write_log(log, recs, segment_bytes=4096, version=1)
    by_seg = {}
    for i, p in enumerate(positions):
        by_seg.setdefault(p[0], []).append(i)
    segs = sorted(by_seg)
    assert len(segs) >= 5
    lost = {}
    # A CRC mismatch in the middle of segment 0, a bad magic in segment 1,
    # two adjacent bad records in segment 2, a truncated tail of segment 3.
    i = by_seg[segs[0]][3]
    damage(log, segs[0], positions[i][1], "crc")
    lost[positions[i]] = "CRC"
    i = by_seg[segs[1]][0]
    damage(log, segs[1], positions[i][1], "magic")
    lost[positions[i]] = "magic"
    i, j = by_seg[segs[2]][5], by_seg[segs[2]][6]
    damage(log, segs[2], positions[i][1], "crc")
    damage(log, segs[2], positions[j][1], "crc")
    lost[positions[i]] = "CRC"
    i = by_seg[segs[3]][-2]
    damage(log, segs[3], positions[i][1], "truncate")
    lost[positions[i]] = "truncated"
    gone = {positions[i], positions[j], positions[by_seg[segs[3]][-1]]} | set(lost)
    keep = [(r, p) for r, p in zip(recs, positions) if p not in gone]
    # The same answer however the segments are cut into partitions.
    for k, opts in enumerate(({}, {"splitBytes": "1024"}, {"splitBytes": "1333"})):
        cdir = tmp_path / ("corrupt%d" % k)
        df = (
            spark.read.format("edgebus")
            .options(**opts)
            .option("corruptDir", str(cdir))
            .load(str(log))
        )
        got = rows_by_pos(df)
        assert set(got) == {p for _, p in keep}  # no wrong row, none invented
        check_rows(got, [r for r, _ in keep], [p for _, p in keep])
        rep = corrupt_report(str(cdir))
        assert rep["missing"] == []
        named = {(r["segment"], r["offset"]): r for r in rep["regions"]}
        assert set(named) == set(lost), opts  # each bad region once, by position
        for pos, word in lost.items():
            r = named[pos]
            assert r["file"] == os.path.join(str(log), segment_name(pos[0]))
            assert word.lower() in r["reason"].lower()
            assert r["bytes"] > 0


def test_streaming_skips_corruption_and_missing_segments(spark, tmp_path):
    from edgebus.ingest.corruption import corrupt_report
    from edgebus.ingest.schema import SCHEMA

    log, cdir = tmp_path / "log", tmp_path / "corrupt"
    recs = [device_record("n", "s", i, T0 + i) for i in range(80)]
    positions = write_log(log, recs, segment_bytes=2048, version=1)
    segs = sorted({p[0] for p in positions})
    damage(log, segs[1], 0, "header")  # bad file header: records still read
    os.unlink(log / segment_name(segs[2]))  # a quarantined / deleted segment
    i = [k for k, p in enumerate(positions) if p[0] == segs[3]][2]
    damage(log, segs[3], positions[i][1], "crc")
    stream_to_table(
        spark, log, tmp_path / "out", tmp_path / "ckpt", corruptDir=cdir, maxBytesPerTrigger=700
    )
    got = rows_by_pos(spark.read.schema(SCHEMA).parquet(str(tmp_path / "out")))
    want = {p for p in positions if p[0] != segs[2] and p != positions[i]}
    assert set(got) == want
    rep = corrupt_report(str(cdir))
    assert rep["missing"] == [[segs[2], segs[2]]]
    assert [(r["segment"], r["offset"]) for r in rep["regions"]] == [(segs[1], 0), positions[i]]
    assert "header" in rep["regions"][0]["reason"]


def test_schema_is_fixed(spark, tmp_path):
    write_log(tmp_path / "log", [local_record(0, T0)])
    with pytest.raises(Exception, match="schema is fixed"):
        spark.read.format("edgebus").schema("topic string").load(str(tmp_path / "log")).collect()
    shutil.rmtree(tmp_path / "log")


def test_region_ownership_random_cuts_and_damage(tmp_path):
    """Without Spark: for random damage and random cuts, the ranges of a plan
    together yield exactly the records of a whole-segment read and report
    exactly its bad regions, each once (docs/spark.md, corrupt data)."""
    import random

    from edgebus.ingest.offsets import Options
    from edgebus.ingest.ranges import SegmentRange
    from edgebus.ingest.reading import read_range
    from edgebus.tlog import list_segments, read_segment

    rnd = random.Random(6)
    trials = int(os.environ.get("EDGEBUS_OWNERSHIP_TRIALS", "60"))
    for trial in range(trials):
        d = tmp_path / ("log%d" % trial)
        recs = [
            device_record("n", "s", i, T0 + i, payload={"v": "x" * rnd.randrange(0, 300)})
            for i in range(rnd.randrange(5, 40))
        ]
        write_log(d, recs, segment_bytes=1 << 20, version=1)
        fname = str(d / segment_name(0))
        data = bytearray(Path(fname).read_bytes())
        for _ in range(rnd.randrange(0, 4)):
            k = rnd.randrange(len(data))
            how = rnd.choice(("flip", "zero", "insert", "cut"))
            if how == "flip":
                data[k] ^= 1 << rnd.randrange(8)
            elif how == "zero":
                n = rnd.randrange(1, 40)
                data[k : k + n] = bytes(len(data[k : k + n]))
            elif how == "insert":
                data[k:k] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 30)))
            elif how == "cut" and k > 30:
                del data[k:]
        Path(fname).write_bytes(bytes(data))
        truth = read_segment(str(d), 0)
        want_rows = [off for off, _ in truth]
        want_bad = sorted(off for _, off, _ in truth.stats.corrupt)
        size = len(data)
        inner = {rnd.randrange(21, size) for _ in range(rnd.randrange(0, 6)) if size > 21}
        cuts = sorted({0, size} | inner)
        cdir = tmp_path / ("bad%d" % trial)
        opts = Options({"path": str(d), "corruptDir": str(cdir)})
        rows = []
        for a, b in zip(cuts, cuts[1:]):
            for rb in read_range(opts, SegmentRange(0, a, b)):
                rows += rb.column("offset").to_pylist()
        reported = []
        for name in sorted(os.listdir(cdir)) if cdir.exists() else []:
            reported += [r["offset"] for r in json.loads(Path(cdir / name).read_text())["regions"]]
        assert list_segments(str(d)) == [0]
        assert rows == want_rows, (trial, cuts)
        assert sorted(reported) == want_bad, (trial, cuts)


def test_retention_reports_only_unread_segments_as_missing(spark, tmp_path):
    from edgebus.ingest.corruption import corrupt_report
    from edgebus.ingest.schema import SCHEMA
    from edgebus.tlog import list_segments

    log, cdir = tmp_path / "log", tmp_path / "corrupt"
    first = write_log(log, [device_record("n", "s", i, T0 + i) for i in range(40)])
    k = first[-1][0] + 1
    stream_to_table(spark, log, tmp_path / "out", tmp_path / "ckpt", corruptDir=cdir)
    assert corrupt_report(str(cdir)) == {"regions": [], "missing": []}
    # The stream falls behind: retention removes what it read and more.
    second = write_log(
        log,
        [device_record("n", "s", 40 + i, T0 + 40 + i) for i in range(80)],
        retention_bytes=3 * 2048,
    )
    left = list_segments(str(log))
    assert left[0] > k
    stream_to_table(spark, log, tmp_path / "out", tmp_path / "ckpt", corruptDir=cdir)
    assert corrupt_report(str(cdir)) == {"regions": [], "missing": [[k, left[0] - 1]]}
    got = rows_by_pos(spark.read.schema(SCHEMA).parquet(str(tmp_path / "out")))
    assert set(got) == set(first) | {p for p in second if p[0] in left}


def _hand_written(path, sid, body):
    """Append one record with a body of our own (valid frame and CRC) to a
    sealed segment, as a foreign or buggy writer might."""
    import struct
    import zlib

    head = struct.pack(">4sHI", b"\xffEBR", 1, len(body))
    frame = head + struct.pack(">I", zlib.crc32(body, zlib.crc32(head))) + body
    with open(os.path.join(str(path), segment_name(sid)), "ab") as f:
        f.write(frame)


def test_bulk_reader_yields_exactly_what_the_reference_reader_does(tmp_path):
    """ingest/reading.py in bulk (msgspec, Arrow) against tlog record by
    record, on odd values, bodies only tlog accepts, bad bodies and bad bytes,
    cut into many ranges: the same rows, the same regions reported."""
    from edgebus.ingest import corruption, reading
    from edgebus.ingest.offsets import BEGIN, Options, latest, offset_dict
    from edgebus.ingest.planning import plan
    from edgebus.ingest.schema import SCHEMA

    assert reading.BULK, "msgspec is missing: the bulk reader is not used"
    log = tmp_path / "log"
    recs = mixed_records(120)
    recs[3] = dict(recs[3], topic=("a", 3, "b"), payload=b"\x00\xffbytes")
    recs[4] = dict(recs[4], payload={"$x": [1, {"$b64": "x"}]}, extra={"k": 'é\n"q'})
    recs[5] = dict(recs[5], payload=None, seq=2**64 + 5, generation=2**63)
    recs[6] = dict(recs[6], payload="null", ts_device=10**400)
    positions = write_log(log, recs, segment_bytes=3000, version=1)
    last = positions[-1][0]
    # Appended by hand to the last sealed segment: members reordered and an
    # unknown one (valid); bad UTF-8, an unknown tag, extra not an object and an
    # empty topic (invalid: corrupt); then valid again.
    ok = (
        b'{"topic":["x"],"extra":null,"ts_host":5.5,"payload":{"a":1},"ts_device":null,'
        b'"seq":1,"origin_kind":null,"conn_id":null,"principal":null,"link_id":null,'
        b'"peer_node":"p","peer_sid":"s","generation":null,"more":[1]}'
    )
    for body in (
        ok,
        ok.replace(b'"x"', b'"\xc3x"'),
        ok.replace(b'{"a":1}', b'{"$zz":1}'),
        ok.replace(b'"extra":null', b'"extra":[1]'),
        ok.replace(b'["x"]', b"[]"),
        ok,
    ):
        _hand_written(log, last, body)
    damage(log, positions[10][0], positions[10][1], "crc")
    damage(log, positions[40][0], positions[40][1], "magic")
    end = offset_dict(*latest(str(log)))
    for split in ("1024", "1500", "100000"):
        o = Options({"path": str(log), "splitBytes": split})
        parts, _ = plan(o.path, BEGIN, end, o.split_bytes)
        got = {"fast": ([], []), "slow": ([], [])}
        for name, fn in (("fast", reading.read_range), ("slow", reading.read_range_slow)):
            reported = got[name][1]
            real = corruption.report
            corruption.report = lambda opts, part, fname, bad, missing: reported.extend(
                (b["segment"], b["offset"], b["reason"], b["bytes"]) for b in bad
            )
            try:
                for p in parts:
                    for batch in fn(o, p):
                        assert batch.schema.names == SCHEMA.names
                        got[name][0].extend(batch.to_pylist())
            finally:
                corruption.report = real
        assert got["fast"][0] == got["slow"][0], split
        assert sorted(got["fast"][1]) == sorted(got["slow"][1]), split
        assert len(got["fast"][0]) == len(recs) - 2 + 2
        assert len(got["fast"][1]) == 3  # the four bad bodies are one region
        odd = {r["offset"]: r for r in got["fast"][0] if r["segment"] == positions[5][0]}
        r5 = odd[positions[5][1]]
        assert r5["payload"] is None and r5["seq"] is None and r5["generation"] is None


def test_damaged_parquet_segments_are_skipped_and_named(spark, tmp_path):
    """Version 2: a row group failing its page checksums and a file without its
    footer are skipped and named in corruptDir; every other row is read, none
    is wrong, however the plan cuts the segments."""
    from edgebus.ingest.corruption import corrupt_report
    from edgebus.tlog import parquet_name

    log = tmp_path / "log"
    recs = [device_record("n", "s", i, T0 + i, payload={"v": "x%d" % i * 30}) for i in range(90)]
    positions = write_log(log, recs, segment_bytes=9000)
    segs = sorted({p[0] for p in positions})
    assert len(segs) >= 4
    f1, f2 = (str(log / parquet_name(s)) for s in segs[1:3])
    data = bytearray(Path(f1).read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the data pages
    Path(f1).write_bytes(bytes(data))
    os.truncate(f2, os.path.getsize(f2) - 30)  # the footer is gone
    keep = [(r, p) for r, p in zip(recs, positions) if p[0] not in segs[1:3]]
    for k, opts in enumerate(({}, {"splitBytes": "1024"})):
        cdir = tmp_path / ("corrupt%d" % k)
        df = (
            spark.read.format("edgebus")
            .options(**opts)
            .option("corruptDir", str(cdir))
            .load(str(log))
        )
        got = rows_by_pos(df)
        check_rows(got, [r for r, _ in keep], [p for _, p in keep], GW)
        rep = corrupt_report(str(cdir))
        named = {(r["file"], r["offset"]): r["reason"] for r in rep["regions"]}
        # The damaged row group is named by each range that reads part of it, at
        # the first row of that part; the file without a footer once, at row 0.
        assert {f for f, _ in named} == {f1, f2} and (f1, 0) in named, opts
        assert all("unreadable" in why for (f, _), why in named.items() if f == f1)
        assert [o for f, o in named if f == f2] == [0] and "segment skipped" in named[(f2, 0)]
