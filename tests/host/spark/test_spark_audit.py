"""The delivery audit (ingest/audit/) on two gateways' logs built with the
tlog writer: numbers removed (some explained by bridge/gaps records), late
readings with known latencies, copies within one log and across the two; an
incremental second run; the report's audit summary and plot."""

import argparse

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from edgebus.tlog import LogWriter  # noqa: E402
from tests.host.spark.sparkkit import device_record  # noqa: E402

T0 = 1_711_999_980.0  # a multiple of 60: windows start at T0 + 60 k
W = 60.0
# dev-1 boot s1: numbers 1..90, one every 2 s; removed: 10..14 (a gateway's
# record: evicted), 30 (record: lost), 45..46 (no record); 20..29 came late.
S1_REMOVED = {10: "evicted", 11: "evicted", 12: "evicted", 13: "evicted", 14: "evicted"}
S1_REMOVED.update({30: "lost", 45: "unexplained", 46: "unexplained"})
S1_LATE = {s: 5.0 + (s - 20) for s in range(20, 30)}  # latency 5..14 s
# dev-1 boot s2 (its next boot): 1..20, heard by both gateways (20 copies).
# dev-2 boot t1: 1..40 on gw-b, 5..7 removed (gw-b's record: evicted), 1..4
# logged twice; its health says it sleeps (a journal).
T1_REMOVED = {5: "evicted", 6: "evicted", 7: "evicted"}


def _dev(node, sid, seq, t, latency=0.5, late=False):
    r = device_record(node, sid, seq, t, late=late)
    r["ts_device"] = t - latency
    return r


def _gap_record(t, node, sid, first, last, why):
    return {
        "ts_host": t,
        "topic": ("bridge", "gaps"),
        "payload": {"node": node, "sid": sid, "first": first, "last": last, "why": why},
        "origin_kind": "local",
        "conn_id": "c-bridge",
        "principal": "bridge",
    }


def _logs():
    a, b = [], []
    for s in range(1, 91):
        if s not in S1_REMOVED:
            lat = S1_LATE.get(s, 0.5)
            a.append(_dev("dev-1", "s1", s, T0 + 2 * s + lat, lat, late=s in S1_LATE))
    a.append(_gap_record(T0 + 29, "dev-1", "s1", 10, 14, "evicted"))
    a.append(_gap_record(T0 + 62, "dev-1", "s1", 30, 30, "lost"))
    for s in range(1, 21):
        a.append(_dev("dev-1", "s2", s, T0 + 200 + s))
        b.append(_dev("dev-1", "s2", s, T0 + 200 + s + 0.25))
    for s in range(1, 41):
        if s not in T1_REMOVED:
            b.append(_dev("dev-2", "t1", s, T0 + 3 * s))
        if s <= 4:
            b.append(_dev("dev-2", "t1", s, T0 + 3 * s + 0.5))
    b.append(_gap_record(T0 + 25, "dev-2", "t1", 5, 7, "evicted"))
    for s in range(1, 6):  # relayed to gw-a through gateway gw-r (contract 1)
        r = _dev("dev-3", "r1", s, T0 + 100 + s)
        r["extra"]["via"] = ["gw-r"]
        a.append(r)
    health = _dev("dev-2", "t1", 41, T0 + 124)
    health.update(topic=("dev", "dev-2", "sys", "health"), payload={"sleep": {"every": 60}})
    b.append(health)
    return a, b


def _write(path, gateway, recs):
    with LogWriter(str(path), segment_bytes=4000, gateway=gateway) as w:
        for r in sorted(recs, key=lambda r: r["ts_host"]):
            w.append(r)


def _args(d, *more):
    from edgebus.ingest.job import add_arguments

    ap = argparse.ArgumentParser()
    add_arguments(ap)
    logs = [str(d / "gw-a"), str(d / "gw-b")]
    return ap.parse_args(
        ["--log", *logs, "--table", str(d / "t"), "--checkpoint", str(d / "ck")]
        + ["--once", "--audit-window", str(W), *more]
    )


def _ingest(spark, args):
    from edgebus.ingest import audit, job

    args.log = job.log_dirs(args.log)
    job.start(spark, args).awaitTermination()
    return audit.refresh(spark, args)


def _rows(spark, d):
    from edgebus.ingest.audit.table import SCHEMA

    return [
        r.asDict(recursive=True)
        for r in spark.read.schema(SCHEMA).parquet(str(d / "t.audit")).collect()
    ]


def _pct(xs, q):
    """Linear interpolation between closest ranks (Spark's percentile)."""
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = int(k)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (k - lo)


@pytest.fixture(scope="module")
def audited(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("audit")
    a, b = _logs()
    _write(d / "gw-a", "gw-a", a)
    _write(d / "gw-b", "gw-b", b)
    line = _ingest(spark, _args(d))
    return d, line, _rows(spark, d)


def _boot(rows, node, sid):
    return sorted(
        (r for r in rows if (r["peer_node"], r["peer_sid"]) == (node, sid)),
        key=lambda r: r["window_start"],
    )


def test_gaps_equal_what_was_removed_with_their_reasons(audited):
    _d, line, rows = audited
    assert line.startswith("audit: 4 boots refreshed")
    s1 = _boot(rows, "dev-1", "s1")
    assert sum(r["missing"] for r in s1) == len(S1_REMOVED)
    why = {}
    for r in s1:
        for k, n in r["missing_why"].items():
            why[k] = why.get(k, 0) + n
    assert why == {"evicted": 5, "lost": 1, "unexplained": 2}
    gaps = sorted((g["first"], g["last"], g["why"]) for r in s1 for g in r["gaps"])
    assert gaps == [(10, 14, "evicted"), (30, 30, "lost"), (45, 46, "unexplained")]
    # A gap counts in the window of the number after it (number 47 at T0 + 94.5).
    w47 = next(r for r in s1 if any(g["first"] == 45 for g in r["gaps"]))
    assert w47["window_start"].timestamp() == T0 + 60
    t1 = _boot(rows, "dev-2", "t1")
    assert [(g["first"], g["last"], g["why"]) for r in t1 for g in r["gaps"]] == [(5, 7, "evicted")]
    assert sum(r["received"] for r in t1) == 40 - 3 + 1  # and its sys/health
    assert not any(r["missing"] for r in _boot(rows, "dev-1", "s2"))


def test_late_readings_and_latency(audited):
    _d, _line, rows = audited
    s1 = _boot(rows, "dev-1", "s1")
    assert sum(r["received"] for r in s1) == 90 - len(S1_REMOVED)
    assert sum(r["late"] for r in s1) == len(S1_LATE)
    # Number s of 20..29 arrives at T0 + 3 s - 15: 20..24 in the first window.
    first = s1[0]
    lats = [S1_LATE[s] for s in range(20, 30) if T0 + 2 * s + S1_LATE[s] < T0 + 60]
    assert first["late"] == len(lats)
    assert first["late_p50"] == pytest.approx(_pct(lats, 0.5))
    assert first["late_p99"] == pytest.approx(_pct(lats, 0.99))
    assert first["late_max"] == pytest.approx(max(lats))
    every = [S1_LATE.get(s, 0.5) for s in range(1, 91) if s not in S1_REMOVED]
    every = [
        x
        for s, x in zip([s for s in range(1, 91) if s not in S1_REMOVED], every)
        if T0 + 2 * s + x < T0 + 60
    ]
    assert first["latency_p50"] == pytest.approx(_pct(every, 0.5))
    assert first["latency_p99"] == pytest.approx(_pct(every, 0.99))
    assert all(r["late"] == 0 and r["late_p50"] is None for r in _boot(rows, "dev-2", "t1"))


def test_duplicates_and_gateways(audited):
    _d, _line, rows = audited
    s2 = _boot(rows, "dev-1", "s2")
    assert sum(r["received"] for r in s2) == 20
    assert sum(r["duplicates"] for r in s2) == 20  # the second gateway's copies
    assert all(r["gateways"] == ["gw-a", "gw-b"] for r in s2)
    t1 = _boot(rows, "dev-2", "t1")
    assert sum(r["duplicates"] for r in t1) == 4  # 1..4 logged twice by gw-b
    assert all(r["gateways"] == ["gw-b"] for r in t1)
    assert sum(r["duplicates"] for r in _boot(rows, "dev-1", "s1")) == 0
    r1 = _boot(rows, "dev-3", "r1")
    assert [(r["received"], r["gateways"]) for r in r1] == [(5, ["gw-a", "gw-r"])]


def test_boot_end_and_journal(audited):
    _d, _line, rows = audited
    assert {r["boot_end"] for r in _boot(rows, "dev-1", "s1")} == {"no_journal_known"}
    assert {r["boot_end"] for r in _boot(rows, "dev-1", "s2")} == {None}
    t1 = _boot(rows, "dev-2", "t1")
    assert {r["journal"] for r in t1} == {True} and {r["boot_end"] for r in t1} == {None}


def test_report_summary_and_plot(spark, audited, tmp_path):
    from edgebus.ingest.report.audit import audit_line, format_audit, summarize_audit
    from edgebus.ingest.report.plot import plot_audit

    d = audited[0]
    a = summarize_audit(spark, str(d / "t"), str(d / "t.audit"))
    lats = sorted(S1_LATE.values())
    assert audit_line(a) == (
        "audit: 11 numbers missing (evicted 8, lost 1, unexplained 2); 10 readings came "
        "late, p50 %.3g s, p99 %.3g s; 24 duplicates dropped; 1 ended boot(s) without a "
        "known journal may have lost readings after their last number"
        % (_pct(lats, 0.5), _pct(lats, 0.99))
    )
    s1 = next(ln for ln in format_audit(a).splitlines() if ln.startswith("dev-1 ") and " s1 " in ln)
    assert s1.split()[2:4] == ["82", "10"] and "evicted 5, lost 1, unexplained 2" in s1
    assert s1.split()[-2:] == ["gw-a", "no_journal_known"]
    png = tmp_path / "audit.png"
    assert plot_audit(spark, str(d / "t"), str(png)) == 5  # ~4 min of readings: 5 s bins
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_audit_of_nothing_gives_no_verdict():
    """No boot audited (an empty table, a wrong log folder): the line says
    so rather than "nothing lost"."""
    from edgebus.ingest.report.audit import audit_line

    none = dict(
        boots=[],
        received=0,
        late=0,
        missing=0,
        missing_why={},
        duplicates=0,
        late_p50=None,
        late_p99=None,
        ended_unknown=0,
    )
    assert audit_line(none) == (
        "audit: no records audited (no numbered device readings in the table)"
    )
    one = dict(none, boots=[{"peer_node": "dev-1"}], received=3)
    assert audit_line(one) == "audit: nothing lost; none came late"


def test_a_second_run_recomputes_only_the_touched_boots(spark, audited):
    d, _line, before = audited
    more = [_dev("dev-2", "t1", s, T0 + 300 + s) for s in range(42, 50) if s != 45]
    more.append(_gap_record(T0 + 310, "dev-2", "t1", 45, 45, "lost"))
    _write(d / "gw-b", "gw-b", more)
    line = _ingest(spark, _args(d))
    assert line.startswith("audit: 1 boot refreshed")
    after = _rows(spark, d)
    for boot in (("dev-1", "s1"), ("dev-1", "s2"), ("dev-3", "r1")):
        assert _boot(after, *boot) == _boot(before, *boot)
    t1 = _boot(after, "dev-2", "t1")
    assert sum(r["received"] for r in t1) == 38 + 7
    assert sorted((g["first"], g["last"], g["why"]) for r in t1 for g in r["gaps"]) == [
        (5, 7, "evicted"),
        (45, 45, "lost"),
    ]
    assert sum(r["duplicates"] for r in t1) == 4  # counted once, not again
    assert _ingest(spark, _args(d)) is None  # nothing new: nothing written


def test_missing_ranges_take_the_senders_word_and_records_beyond_the_received():
    """audit.gaps alone (no Spark): overlapping records of two bridges, a run
    no record names, and numbers a record names past the last received."""
    from edgebus.ingest.audit.gaps import missing

    gaps = [(3, 9, "w1"), (20, 20, "w2")]
    records = [(5, 6, "evicted", "r"), (4, 8, "lost", "r"), (30, 32, "lost", "r2")]
    assert missing(gaps, records, 2, 25, "head", "tail") == [
        (3, 3, "unexplained", "w1"),
        (4, 4, "lost", "w1"),
        (5, 6, "evicted", "w1"),
        (7, 8, "lost", "w1"),
        (9, 9, "unexplained", "w1"),
        (20, 20, "unexplained", "w2"),
        (30, 32, "lost", "tail"),
    ]
    # Nothing received: the record's own window; below the first: the first's.
    assert missing([], [(1, 2, "evicted", "r")], None, None, None, None) == [(1, 2, "evicted", "r")]
    assert missing([], [(1, 2, "gone", "r")], 5, 9, "head", "tail") == [(1, 2, "gone", "head")]


def test_copies_are_counted_between_two_positions_once(tmp_path):
    """audit.copies alone (no Spark): a range's records counted per boot, window
    and gateway; the next range starts where this one ended."""
    from edgebus.ingest.audit.copies import count_copies, log_gateway

    recs = [_dev("d", "b", s, T0 + s) for s in range(1, 11)] + [
        _gap_record(T0, "d", "b", 1, 1, "x")
    ]
    _write(tmp_path / "log", "gw-x", recs)
    assert log_gateway(str(tmp_path / "log")) == "gw-x"
    out = count_copies(str(tmp_path / "log"), None, (0, 4), W, {})
    assert out == {("d", "b", int(T0), "gw-x"): 3}  # rows 0..3: the gap record and 1..3
    count_copies(str(tmp_path / "log"), (0, 4), (99, 0), W, out)
    assert out == {("d", "b", int(T0), "gw-x"): 10}
