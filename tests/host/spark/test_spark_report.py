"""`edgebus report` (ingest/report/) on a table ingested from a log with
known gaps: counts, gap ranges, generations, last-seen, the delivery audit's
summary, the PNG."""

import argparse
import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from edgebus.tlog import LogWriter  # noqa: E402
from tests.host.spark.sparkkit import ROOT, device_record, local_record  # noqa: E402

T0 = 1_712_000_000.0

# (node, session, generation, seq numbers sent and logged, first ts_host)
SESSIONS = [
    ("node-a", "a1", 1, [s for s in range(100) if not (10 <= s <= 14 or s in (50, 97, 98))], 0),
    ("node-a", "a2", 2, [s for s in range(30) if not 5 <= s <= 9], 400),
    ("node-b", "b1", 7, list(range(100, 160)), 200),
]
GAPS = {
    ("node-a", "a1"): [(10, 14), (50, 50), (97, 98)],
    ("node-a", "a2"): [(5, 9)],
    ("node-b", "b1"): [],
}
N_LOCAL = 12


@pytest.fixture(scope="module")
def table(spark, tmp_path_factory):
    """The log above, with some records logged twice, ingested by the job."""
    from edgebus.ingest import audit
    from edgebus.ingest.job import add_arguments, start

    d = tmp_path_factory.mktemp("report")
    recs = []
    for node, sid, gen, seqs, t in SESSIONS:
        for k, s in enumerate(seqs):
            recs.append(device_record(node, sid, s, T0 + t + 3 * k, gen=gen))
            if k % 9 == 0:  # a replay, logged again half a second later
                recs.append(device_record(node, sid, s, T0 + t + 3 * k + 0.5, gen=gen))
    recs += [local_record(i, T0 + 50 * i) for i in range(N_LOCAL)]
    # A retained fact from b1's session-start snapshot: no seq number.
    snap = device_record(
        "node-b",
        "b1",
        0,
        T0 + 200,
        gen=7,
        payload={"fw": "0.1.0"},
        topic=("dev", "node-b", "sys", "info"),
    )
    del snap["seq"], snap["ts_device"]
    snap["extra"] = {}
    recs.append(snap)
    recs.sort(key=lambda r: r["ts_host"])
    with LogWriter(str(d / "log"), segment_bytes=8000) as w:
        for r in recs:
            w.append(r)
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    args = ap.parse_args(
        [
            "--log",
            str(d / "log"),
            "--table",
            str(d / "table"),
            "--checkpoint",
            str(d / "ckpt"),
            "--once",
        ]
    )
    start(spark, args).awaitTermination()
    args.log = [str(d / "log")]
    assert audit.refresh(spark, args).startswith("audit: 3 boots refreshed")
    return d / "table"


def test_summary_counts_gaps_generations_last_seen(spark, table):
    from edgebus.ingest.report import summarize

    s = summarize(spark, str(table))
    sent = sum(len(x[3]) for x in SESSIONS)
    assert s["rows"] == sent + N_LOCAL + 1
    assert s["first"] == T0 and s["corrupt"] == {"regions": [], "missing": []}
    devs = {d["peer_node"]: d for d in s["devices"]}
    assert [d["peer_node"] for d in s["devices"]] == ["node-a", "node-b", None]
    a, b, local = devs["node-a"], devs["node-b"], devs[None]
    assert (a["messages"], a["sessions"], a["generations"]) == (92 + 25, 2, [1, 2])
    assert (b["messages"], b["sessions"], b["generations"]) == (61, 1, [7])
    assert (local["messages"], local["sessions"], local["generations"]) == (N_LOCAL, 0, [])
    assert a["last_seen"] == T0 + 400 + 3 * 24 and b["last_seen"] == T0 + 200 + 3 * 59
    assert local["last_seen"] == T0 + 50 * (N_LOCAL - 1)
    got = {(x["peer_node"], x["peer_sid"]): x for x in s["sessions"]}
    assert set(got) == set(GAPS)
    for key, gaps in GAPS.items():
        x = got[key]
        assert x["gaps"] == gaps
        assert x["missing"] == sum(b - a + 1 for a, b in gaps)
    assert (got[("node-b", "b1")]["seq_min"], got[("node-b", "b1")]["seq_max"]) == (100, 159)
    assert got[("node-b", "b1")]["snapshot"] == 1 and got[("node-a", "a1")]["snapshot"] == 0
    assert got[("node-a", "a2")]["generations"] == [2]


def test_printed_report_and_plot(spark, table, tmp_path):
    from edgebus.ingest.report import format_report, summarize
    from edgebus.ingest.report.plot import plot_audit

    s = summarize(spark, str(table))
    text = format_report(s, "T")
    lines = text.splitlines()
    assert lines[1].startswith("%d messages from 2 devices" % s["rows"])
    row = next(ln for ln in lines if ln.startswith("node-a ") and "a1" in ln).split()
    assert row[:6] == ["node-a", "a1", "1", "92", "0..99", "8"]
    assert " ".join(row[6:]) == "10..14, 50, 97..98"
    assert next(ln for ln in lines if ln.startswith("(local)")).split()[1] == str(N_LOCAL)
    assert "5..9" in next(ln for ln in lines if " a2 " in ln)
    # 60 numbered messages and the snapshot's one: said apart, as 100..159 has 60.
    assert next(ln for ln in lines if " b1 " in ln).split()[3:5] == ["60+1", "100..159"]
    png = tmp_path / "audit.png"
    width = plot_audit(spark, str(table), str(png))
    assert width == 5  # the readings' device times (1000 + seq) span 159 s: 5 s bins
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000


# The CLI in a process of its own that says, after the command, whether it
# imported pyspark (a JVM starts only through it).
_CLI_SAYING_PYSPARK = (
    "import sys; from edgebus.tools.cli import main; rc = main(sys.argv[1:]); "
    "print('pyspark imported: %s' % ('pyspark' in sys.modules)); sys.exit(rc)"
)


def _cli(*argv, timeout=240):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-c", _CLI_SAYING_PYSPARK, *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_report_command(spark, table, tmp_path, capsys):
    """The CLI, as a user runs it: pyarrow in its process, no Spark; --spark
    prints the same report read with Spark: here the process's session, which
    it leaves running (started by itself, the session is ingest's session())."""
    from edgebus.ingest.report import command

    png = tmp_path / "fleet.png"
    r = _cli("report", "--table", str(table), "--plot", str(png), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert r.stdout.endswith("pyspark imported: False\n"), r.stdout[-200:]
    ap = argparse.ArgumentParser()
    command.add_arguments(ap)
    spark_png = str(tmp_path / "spark.png")
    assert command.run(ap.parse_args(["--table", str(table), "--plot", spark_png, "--spark"])) == 0
    s = capsys.readouterr().out
    assert s.replace("spark.png", "fleet.png") + "pyspark imported: False\n" == r.stdout
    assert spark.range(3).count() == 3  # still running
    assert "10..14, 50, 97..98" in r.stdout and "node-b" in r.stdout
    # The audit: the gaps have no bridge/gaps record; the replays were dropped.
    audit = r.stdout.split("delivery audit")[1].splitlines()
    a1 = next(ln for ln in audit if ln.startswith("node-a ") and " a1 " in ln)
    assert a1.split()[2:4] == ["92", "0"] and "unexplained 8" in a1
    assert "audit: 13 numbers missing (unexplained 13); none came late" in r.stdout
    dupes = sum(1 for x in SESSIONS for k in range(len(x[3])) if k % 9 == 0)
    assert "; %d duplicates dropped" % dupes in r.stdout
    assert "plot: %s" % png in r.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"
    r = _cli("report", "--table", str(tmp_path / "nope"), timeout=60)
    assert r.returncode == 2 and "no table" in r.stderr


def _sorted_rows(rows):
    return sorted(rows, key=lambda r: sorted((k, repr(v)) for k, v in r.items()))


def test_arrow_report_is_spark_report(spark, table, tmp_path):
    """The report's figures read with pyarrow (report.arrow) are the Spark
    path's, to the last bit, so the printed report and the plot's rows are
    the same; a Parquet file in the folders that the metadata logs do not
    list (a killed job's) is read by neither."""
    import shutil

    from edgebus.ingest.audit import audit_dir
    from edgebus.ingest.report import arrow, format_report, summarize
    from edgebus.ingest.report.audit import format_audit, summarize_audit
    from edgebus.ingest.report.plot import plot_data

    adir = audit_dir(str(table))
    # A committed file of each table copied under a name no listing has.
    listed = arrow.listed_files(str(table))
    stray = [
        os.path.join(os.path.dirname(f), "part-99999-killed-job.c000.snappy.parquet")
        for f in (listed[0], arrow.listed_files(adir)[0])
    ]
    for f, src in zip(stray, (listed[0], arrow.listed_files(adir)[0])):
        shutil.copyfile(src, f)
    try:
        s, a = arrow.summarize(str(table)), arrow.summarize_audit(str(table), adir)
        p = arrow.plot_data(str(table))
    finally:
        for f in stray:
            os.unlink(f)
    assert s["rows"] == sum(len(x[3]) for x in SESSIONS) + N_LOCAL + 1
    assert a is not None and a["received"] == sum(len(x[3]) for x in SESSIONS)
    assert s == summarize(spark, str(table))
    assert a == summarize_audit(spark, str(table), adir)
    assert format_report(s, "T") + format_audit(a) == format_report(
        summarize(spark, str(table)), "T"
    ) + format_audit(summarize_audit(spark, str(table), adir))
    want = plot_data(spark, str(table))
    assert p is not None and want is not None and p["width"] == want["width"] == 5
    for k in ("boots", "bins", "gaps", "points"):
        assert _sorted_rows(p[k]) == _sorted_rows(r.asDict() for r in want[k]), k
    # No audit table: no audit section, as with Spark.
    assert arrow.summarize_audit(str(table), str(tmp_path / "none")) is None


def test_arrow_late_latency_is_sparks(spark):
    """The late readings' p50/p99: Spark's percentile, computed the same way."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from edgebus.ingest.report import arrow

    lats = [0.1 * k**1.5 + 0.003 for k in range(137)]
    rows = [
        ("n", "s%d" % (k % 3), k, 1000.0 + lat, 1000.0, k % 5 != 0) for k, lat in enumerate(lats)
    ]
    t = pa.table(dict(zip(["peer_node", "peer_sid", "seq", "t", "td", "late"], zip(*rows))))
    got = arrow.late_latency(t)
    df = spark.createDataFrame(
        rows, "peer_node string, peer_sid string, seq long, t double, td double, late boolean"
    ).where("late")
    q = "percentile(t - td, array(0.5, 0.99))"
    want = {
        (r[0], r[1]): r[2] for r in df.groupBy("peer_node", "peer_sid").agg(F.expr(q)).collect()
    }
    want[None] = df.selectExpr(q).first()[0]
    assert got == want


def test_listed_files_delta_logs_and_deletes(tmp_path):
    """A file sink log with Spark's default interval: a compaction file, then
    batch files that add and delete; only what they leave listed is read."""
    import json

    from edgebus.ingest.report import arrow

    meta = tmp_path / "t" / "_spark_metadata"
    meta.mkdir(parents=True)

    def entry(name, action="add"):
        return json.dumps({"path": "file://%s/t/%s" % (tmp_path, name), "action": action})

    (meta / "0").write_text("v1\n" + entry("a"))
    (meta / "1.compact").write_text("v1\n" + entry("a") + "\n" + entry("b"))
    (meta / "2").write_text("v1\n" + entry("c") + "\n" + entry("a", "delete"))
    (meta / "3").write_text("v1\n" + entry("d"))
    (meta / ".3.crc").write_text("")
    (meta / ".tmp-4.compact").write_text("v1\n" + entry("e"))  # a listing being written
    got = arrow.listed_files(str(tmp_path / "t"))
    assert got == [str(tmp_path / "t" / n) for n in ("b", "c", "d")]
    (meta / "1.compact").unlink()
    (meta / "1").write_text("v1\n" + entry("b"))
    assert arrow.listed_files(str(tmp_path / "t")) == [
        str(tmp_path / "t" / n) for n in ("b", "c", "d")
    ]
    assert arrow.listed_files(str(tmp_path / "none")) == []


def test_empty_table(spark, tmp_path):
    from edgebus.ingest.report import format_report, summarize
    from edgebus.ingest.report.plot import plot_audit

    os.makedirs(tmp_path / "t")
    s = summarize(spark, str(tmp_path / "t"))
    assert (s["rows"], s["devices"], s["sessions"]) == (0, [], [])
    assert "0 messages from 0 devices" in format_report(s, "t")
    assert plot_audit(spark, str(tmp_path / "t"), str(tmp_path / "p.png")) is None


def test_arrow_audit_of_nothing_gives_no_verdict(tmp_path):
    """An audit table that lists no file, over an empty table: the arrow
    path's audit is the Spark path's empty one, and its line no verdict."""
    from edgebus.ingest.report import arrow
    from edgebus.ingest.report.audit import format_audit

    (tmp_path / "t").mkdir()
    (tmp_path / "t.audit" / "_spark_metadata").mkdir(parents=True)
    (tmp_path / "t.audit" / "_spark_metadata" / "0.compact").write_text("v1\n")
    a = arrow.summarize_audit(str(tmp_path / "t"), str(tmp_path / "t.audit"))
    assert a is not None and (a["boots"], a["received"], a["missing"]) == ([], 0, 0)
    assert "nothing lost" not in format_audit(a)
    assert format_audit(a).endswith(
        "audit: no records audited (no numbered device readings in the table)"
    )
    assert arrow.summarize(str(tmp_path / "t"))["rows"] == 0
    assert arrow.plot_data(str(tmp_path / "t")) is None
