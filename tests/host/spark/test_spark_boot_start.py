"""The delivery audit and the plot on a log like the demo's, ingested by the
real job: a boot's first readings, taken while its first session came up, are
on time; readings spooled through an outage (early in the boot too, before a
reading in session), or by a device that booted with the bridge out of reach,
are late; a host client's messages (the shell) are
counted apart, never as a device. Spark's figures and pyarrow's are the same."""

import argparse

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from edgebus.tlog import LogWriter  # noqa: E402
from tests.host.spark.sparkkit import device_record  # noqa: E402

T0 = 1_796_000_000.0


def _reading(node, sid, seq, taken, arrived, late):
    r = device_record(node, sid, seq, arrived, late=late)
    r["ts_device"] = r["extra"]["ts"] = taken
    return r


def _records():
    recs = []
    # dev-a: boots at T0; its first session is up 0.6 s later, so 1..3 were
    # spooled (late-flagged by the link) and came at its start; 4..40 live;
    # then a 20 s outage: 41..60 spooled, delivered when it is back.
    for s in range(1, 4):
        recs.append(_reading("dev-a", "a1", s, T0 + 0.2 * (s - 1), T0 + 0.6, True))
    for s in range(4, 41):
        recs.append(_reading("dev-a", "a1", s, T0 + 0.2 * (s - 1), T0 + 0.2 * (s - 1) + 0.002, 0))
    back = T0 + 0.2 * 59 + 20
    for s in range(41, 61):
        recs.append(_reading("dev-a", "a1", s, T0 + 0.2 * (s - 1), back, True))
    # dev-b booted with the bridge out of reach for 60 s: its first session
    # delivers a minute of readings, late.
    for s in range(1, 31):
        recs.append(_reading("dev-b", "b1", s, T0 + 2 * (s - 1), T0 + 60, True))
    # dev-c: a prompt first session (1..3 on time), 4..10 live, then an outage
    # of 4 s early in the boot: 11..30 spooled are late, though they arrive
    # within START_GRACE of the boot's first number.
    tc = T0 + 100
    for s in range(1, 4):
        recs.append(_reading("dev-c", "c1", s, tc + 0.2 * (s - 1), tc + 0.6, True))
    for s in range(4, 11):
        recs.append(_reading("dev-c", "c1", s, tc + 0.2 * (s - 1), tc + 0.2 * (s - 1) + 0.002, 0))
    for s in range(11, 31):
        recs.append(_reading("dev-c", "c1", s, tc + 0.2 * (s - 1), tc + 6.5, True))
    # dev-d: its first session delivers 1..3 (spooled while it came up), and
    # an outage of 4 s begins before it takes a reading in session: 4..23,
    # taken after its first number arrived, are late.
    td = T0 + 200
    for s in range(1, 4):
        recs.append(_reading("dev-d", "d1", s, td + 0.2 * (s - 1), td + 0.5, True))
    for s in range(4, 24):
        recs.append(_reading("dev-d", "d1", s, td + 0.2 * (s - 1), td + 4.7, True))
    for s in range(24, 31):
        recs.append(_reading("dev-d", "d1", s, td + 0.2 * (s - 1), td + 0.2 * (s - 1) + 0.002, 0))
    # The shell's command, as the bridge logs a host client's message.
    recs.append(
        {
            "ts_host": T0 + 5,
            "topic": ("dev", "dev-a", "cmd", "led"),
            "payload": 1,
            "origin_kind": "socket",
            "conn_id": "c14",
            "principal": "{'uid': 0, 'gid': 0, 'pid': 10451}",
            "link_id": "local:10451:1",
            "extra": {"ts": T0 + 5, "client": "cli"},
        }
    )
    return sorted(recs, key=lambda r: r["ts_host"])


@pytest.fixture(scope="module")
def table(spark, tmp_path_factory):
    from edgebus.ingest import audit
    from edgebus.ingest.job import add_arguments, start

    d = tmp_path_factory.mktemp("bootstart")
    with LogWriter(str(d / "log")) as w:
        for r in _records():
            w.append(r)
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    args = ap.parse_args(
        ["--log", str(d / "log"), "--table", str(d / "table"), "--checkpoint", str(d / "ck")]
        + ["--once"]
    )
    start(spark, args).awaitTermination()
    args.log = [str(d / "log")]
    assert audit.refresh(spark, args).startswith("audit: 4 boots refreshed")
    return str(d / "table")


def test_boot_start_on_time_outage_late(spark, table):
    from edgebus.ingest.audit import audit_dir
    from edgebus.ingest.report import arrow
    from edgebus.ingest.report.audit import audit_line, summarize_audit

    a = summarize_audit(spark, table, audit_dir(table))
    assert a == arrow.summarize_audit(table, audit_dir(table))
    boots = {b["peer_node"]: b for b in a["boots"]}
    assert set(boots) == {"dev-a", "dev-b", "dev-c", "dev-d"}  # the shell is no device
    assert (boots["dev-a"]["received"], boots["dev-a"]["late"]) == (60, 20)
    assert (boots["dev-b"]["received"], boots["dev-b"]["late"]) == (30, 30)
    assert (boots["dev-c"]["received"], boots["dev-c"]["late"]) == (30, 20)
    assert (boots["dev-d"]["received"], boots["dev-d"]["late"]) == (30, 20)
    # dev-a's late ones waited 20.0 (the newest) to 23.8 s (the oldest).
    assert 20 < boots["dev-a"]["late_p50"] < 24
    assert audit_line(a).startswith("audit: nothing lost; 90 readings came late")


def test_plot_draws_boot_start_on_time(spark, table):
    from edgebus.ingest.report import arrow
    from edgebus.ingest.report.plot import plot_data

    d = plot_data(spark, table)
    assert d is not None
    assert sorted((b["peer_node"], b["n"]) for b in d["boots"]) == [
        ("dev-a", 60),
        ("dev-b", 30),
        ("dev-c", 30),
        ("dev-d", 30),
    ]
    w = d["width"]
    first = min(b["bin"] for b in d["bins"] if b["peer_node"] == "dev-a")
    a_bins = {b["bin"]: b for b in d["bins"] if b["peer_node"] == "dev-a"}
    assert a_bins[first]["late"] == 0  # the boot's start: on time
    outage = a_bins[int((T0 + 0.2 * 50) // w)]
    assert outage["late"] == outage["n"] > 0
    assert all(b["late"] == b["n"] for b in d["bins"] if b["peer_node"] == "dev-b")
    late_pts = [p for p in d["points"] if p["late"]]
    assert len(late_pts) == 90
    start = [p for p in d["points"] if p["x"] < T0 + 0.5]  # dev-a's 1..3, dev-b's 1
    assert sorted((p["late"], round(p["lat"], 1)) for p in start) == [
        (False, 0.2),
        (False, 0.4),
        (False, 0.6),
        (True, 60.0),
    ]
    p = arrow.plot_data(table)
    assert p is not None
    key = lambda r: sorted((k, repr(v)) for k, v in dict(r).items())  # noqa: E731
    for k in ("boots", "bins", "gaps", "points"):
        assert sorted(map(key, p[k])) == sorted(key(r.asDict()) for r in d[k]), k


def test_report_counts_host_clients_apart(spark, table):
    from edgebus.ingest.report import arrow, format_report, summarize

    s = summarize(spark, table)
    assert s == arrow.summarize(table)
    assert s["host_clients"] == 1
    line = format_report(s, "T").splitlines()[1]
    assert line.startswith("151 messages from 4 devices; 1 message from host clients, ")
    assert [x["peer_node"] for x in s["sessions"]] == ["dev-a", "dev-b", "dev-c", "dev-d"]
