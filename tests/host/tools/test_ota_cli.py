"""edgebus ota without the bus: the bundle checked against its ota.jsonl (real
files), counts and shares, the waves, the devices a pattern and a board
select, the halt rule, the chunks of a transfer, and the lines printed."""

import hashlib
import json
import subprocess
import sys

import pytest

from edgebus.tools.commands import otaplan as plan
from edgebus.tools.commands.otadelta import CHUNK, chunks
from edgebus.tools.commands.otapush import positions
from tests.conftest import ROOT

FILES = {"edgebus/bus.mpy": b"B" * 2000, "firmware/main.mpy": b"main", "svc/x.mpy": b""}


def make_bundle(d, files=FILES, board="unix", version="1.2.0", listed=None):
    """A bundle directory as `edgebus build` makes it: the files, and ota.jsonl
    listing ``listed`` (default: the files as they are)."""
    d.mkdir(parents=True, exist_ok=True)
    for p, data in files.items():
        (d / p).parent.mkdir(parents=True, exist_ok=True)
        (d / p).write_bytes(data)
    if listed is None:
        listed = [[p, len(b), hashlib.sha256(b).hexdigest()] for p, b in files.items()]
    head = {"version": version, "board": board, "mpy": 6, "files": len(listed)}
    lines = [json.dumps(x) for x in [head] + listed]  # by hand: malformed entries too
    (d / "ota.jsonl").write_text("".join(x + "\n" for x in lines))
    return d


def bundle_error(d):
    with pytest.raises(plan.BundleError) as e:
        plan.load_bundle(str(d))
    return str(e.value)


def test_a_bundle_is_its_files_in_manifest_order_and_its_hash_is_the_manifests(tmp_path):
    d = make_bundle(tmp_path / "b")
    b = plan.load_bundle(str(d))
    raw = (d / "ota.jsonl").read_bytes()
    assert b.hash == hashlib.sha256(raw).hexdigest() and b.manifest == raw
    assert (b.version, b.board) == ("1.2.0", "unix")
    assert b.paths == ["ota.jsonl", "edgebus/bus.mpy", "firmware/main.mpy", "svc/x.mpy"]
    assert b.blobs == [raw, b"B" * 2000, b"main", b""]
    assert b.sizes == [len(raw), 2000, 4, 0] and b.total == len(raw) + 2004
    assert b.short() == "1.2.0 (%s)" % b.hash[:8]


def test_a_directory_without_ota_json_says_to_build_one(tmp_path):
    d = tmp_path / "old"
    d.mkdir()
    assert bundle_error(d) == (
        "%s has no ota.jsonl: run `edgebus build --board B` to make a bundle with one" % d
    )
    (d / "bundle.json").write_text(json.dumps({"board": "esp32"}))
    assert "run `edgebus build --board esp32`" in bundle_error(d)
    assert bundle_error(tmp_path / "none") == "%s: no such directory" % (tmp_path / "none")


def test_each_listed_file_must_be_there_with_its_size_and_sha256(tmp_path):
    good = [[p, len(b), hashlib.sha256(b).hexdigest()] for p, b in FILES.items()]
    missing = make_bundle(tmp_path / "m", listed=good + [["svc/gone.mpy", 3, "00" * 32]])
    assert "lists svc/gone.mpy, which cannot be read" in bundle_error(missing)
    short = make_bundle(tmp_path / "s", listed=[["edgebus/bus.mpy", 1999, good[0][2]]])
    assert bundle_error(short) == (
        "edgebus/bus.mpy: 2000 bytes, ota.jsonl says 1999 (rebuild the bundle)"
    )
    other = make_bundle(tmp_path / "h", listed=[["firmware/main.mpy", 4, "ab" * 32]])
    msg = bundle_error(other)
    assert msg.startswith("firmware/main.mpy: SHA-256 ") and "ota.jsonl says abababab" in msg


@pytest.mark.parametrize(
    "listed, why",
    [
        ([["../etc/passwd", 1, "00"]], "path '../etc/passwd' is not a safe bundle path"),
        ([["/boot.py", 1, "00"]], "path '/boot.py' is not a safe bundle path"),
        ([["a b.mpy", 1, "00"]], "path 'a b.mpy' is not a safe bundle path"),
        ([["x.mpy", "1", "00"]], "files entry ['x.mpy', '1', '00'] is not [path, size, sha256]"),
        ([["x.mpy", 1]], "is not [path, size, sha256]"),
    ],
)
def test_a_malformed_manifest_is_refused_naming_the_entry(tmp_path, listed, why):
    assert why in bundle_error(make_bundle(tmp_path / "b", files={}, listed=listed))


def test_a_manifest_that_is_not_json_or_lacks_its_board_is_refused(tmp_path):
    d = make_bundle(tmp_path / "b", board="")
    assert bundle_error(d).endswith("ota.jsonl: 'board' must be a non-empty string")
    (d / "ota.jsonl").write_text("{nope")
    assert "ota.jsonl: not a manifest (JSON lines" in bundle_error(d)
    # a header whose count is not the lines after it: one cut short
    head = '{"version":"1","board":"unix","mpy":6,"files":3}\n'
    (d / "ota.jsonl").write_text(head + '["a.mpy",0,"x"]\n')
    assert "the header's files count is not the number of lines after it" in bundle_error(d)


def test_the_command_refuses_a_bad_bundle_in_one_line_before_reaching_the_bridge(tmp_path):
    d = make_bundle(tmp_path / "b", listed=[["edgebus/bus.mpy", 1, "00" * 32]])
    r = subprocess.run(
        [sys.executable, "-m", "edgebus.tools.cli", "ota", "push", "--bundle", str(d)]
        + ["--to", "*", "--yes", "--socket", str(tmp_path / "no.sock")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr == (
        "edgebus ota push: edgebus/bus.mpy: 2000 bytes, ota.jsonl says 1 (rebuild the bundle)\n"
    )


@pytest.mark.parametrize(
    "args, why",
    [
        (["--canary", "5x"], "argument --canary: '5x': a count of devices (3) or a share"),
        (["--halt", "120%"], "argument --halt: '120%'"),
        (["--wave", "-1"], "argument --wave: '-1'"),
        (["--parallel", "0"], "argument --parallel: '0': a whole number of at least 1"),
        (["--trial-s", "0"], "argument --trial-s: '0': seconds, more than 0"),
        (["--trial-s", "5"], "argument --trial-s: '5': seconds from 10 to 3600"),
    ],
)
def test_bad_options_are_usage_errors(tmp_path, args, why):
    r = subprocess.run(
        [sys.executable, "-m", "edgebus.tools.cli", "ota", "push", "--bundle", "b", "--to", "*"]
        + args,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and why in r.stderr, r.stderr


def test_counts_and_shares():
    assert plan.parse_share("3") == ("count", 3)
    assert plan.parse_share("10%") == ("share", 10.0)
    assert plan.parse_share(" 0 ") == ("count", 0)
    for bad in ("-1", "101%", "x", "1.5", "%", ""):
        with pytest.raises(ValueError):
            plan.parse_share(bad)
    assert plan.amount(("share", 10.0), 25) == 3  # a share rounds up
    assert plan.amount(("share", 10.0), 10) == 1  # 10% of 10 is one, not two
    assert plan.amount(("share", 0.0), 10) == 0
    assert plan.amount(("count", 50), 10) == 10


def nodes(n):
    return ["n%02d" % i for i in range(n)]


def sizes(waves):
    return [len(w) for w in waves]


def test_waves_start_with_a_canary_of_at_least_one_device_then_the_rest():
    ten = ("share", 10.0)
    assert plan.plan_waves(nodes(10), ten, None) == [["n00"], nodes(10)[1:]]
    assert sizes(plan.plan_waves(nodes(3), ten, None)) == [1, 2]
    assert sizes(plan.plan_waves(nodes(25), ten, None)) == [3, 22]
    assert sizes(plan.plan_waves(nodes(1), ten, None)) == [1]
    assert plan.plan_waves([], ten, None) == []
    # --wave: later waves of a count, or a share of all the devices.
    assert sizes(plan.plan_waves(nodes(25), ten, ("count", 5))) == [3, 5, 5, 5, 5, 2]
    assert sizes(plan.plan_waves(nodes(20), ten, ("share", 25.0))) == [2, 5, 5, 5, 3]
    # --canary 0 (a count): no canary; a count at least the devices: one wave.
    assert sizes(plan.plan_waves(nodes(4), ("count", 0), ("count", 2))) == [2, 2]
    assert sizes(plan.plan_waves(nodes(4), ("count", 9), None)) == [4]
    assert plan.canary_size(("share", 1.0), 4) == 1 and plan.canary_size(("count", 0), 4) == 0


def test_every_device_is_in_one_wave_in_name_order():
    got = plan.plan_waves(["b", "c", "a", "e", "d"], ("count", 1), ("count", 2))
    assert got == [["a"], ["b", "c"], ["d", "e"]]


def test_a_wave_halts_the_push_when_more_than_the_halt_share_went_wrong():
    twenty = ("share", 20.0)
    assert plan.too_many(1, 1, twenty)  # the canary of one failed
    assert not plan.too_many(1, 5, twenty)  # 20% is not more than 20%
    assert plan.too_many(2, 5, twenty)
    assert not plan.too_many(0, 5, ("count", 0))
    assert plan.too_many(1, 100, ("count", 0))  # --halt 0: any failure stops it
    assert not plan.too_many(5, 5, ("share", 100.0))


def test_a_glob_on_node_names_selects_and_another_board_is_set_aside():
    infos = {
        "pump-1": {"node": "pump-1", "board": "esp32"},
        "pump-2": {"node": "pump-2", "board": "unix"},
        "pump-10": {"node": "pump-10", "board": "unix"},
        "Pump-3": {"node": "Pump-3", "board": "unix"},
        "valve-1": {"node": "valve-1", "board": "unix"},
        "odd": {"node": "odd"},
    }
    assert plan.select(infos, "pump-*", "unix") == (["pump-10", "pump-2"], [("pump-1", "esp32")])
    assert plan.select(infos, "pump-?", "unix") == (["pump-2"], [("pump-1", "esp32")])
    assert plan.select(infos, "*", "unix")[1] == [("odd", "None"), ("pump-1", "esp32")]
    assert plan.select(infos, "[pv]*-1", "unix") == (["valve-1"], [("pump-1", "esp32")])
    assert plan.select(infos, "nothing*", "unix") == ([], [])


def test_already_running_is_the_committed_bundle_not_one_on_trial():
    h = "ab" * 32
    assert plan.runs({"running": {"hash": h}, "state": "committed"}, h)
    assert plan.runs({"running": {"hash": h}, "state": "idle"}, h)
    assert not plan.runs({"running": {"hash": h}, "state": "trial"}, h)
    assert not plan.runs({"running": {"hash": None}, "state": "idle"}, h)
    assert not plan.runs(None, h)


def test_outcome_lines_and_the_summary():
    out = [
        plan.Outcome("a", plan.COMMITTED, "1.2.0", 42.4),
        plan.Outcome("b", plan.ALREADY, "1.2.0"),
        plan.Outcome("c", plan.ROLLED_BACK, "service temp failed: ValueError"),
        plan.Outcome("d", plan.FAILED, "begin: a trial is running"),
    ]
    assert [o.line() for o in out] == [
        "a: committed 1.2.0 in 42 s",
        "b: already running 1.2.0",
        "c: rolled back: service temp failed: ValueError",
        "d: failed: begin: a trial is running",
    ]
    assert [o.ok() for o in out] == [True, True, False, False]
    # A transfer's bytes: what crossed the link of the bundle's whole.
    sent = [
        plan.Outcome("e", plan.COMMITTED, "1.2.0", 13.2, 0.523, (3433, 131028)),
        plan.Outcome("f", plan.COMMITTED, "1.2.0", 27.4, 14.94, (131027, 131027)),
        plan.Outcome("g", plan.ROLLED_BACK, "boom", 20.0, 11.6, (101236, 131028)),
    ]
    assert [o.line() for o in sent] == [
        "e: committed 1.2.0 in 13 s (sent 3433 of 131028 bytes in 0.52 s)",
        "f: committed 1.2.0 in 27 s (sent 131027 of 131027 bytes in 14.9 s)",
        "g: rolled back: boom (sent 101236 of 131028 bytes)",
    ]
    assert plan.summary(out, 0, 0) == "1 committed, 1 already running, 1 rolled back, 1 failed"
    assert plan.summary(out[:1], 7, 2) == (
        "1 committed, 0 already running, 0 rolled back, 0 failed, 7 untouched (halted), "
        "2 skipped (another board)"
    )


def test_the_status_table_shows_each_device_and_those_without_the_service():
    h1, h2 = "11" * 32, "22" * 32
    infos = {"a": {"board": "unix"}, "b": {"board": "unix"}, "c": {"board": "esp32"}}
    otas = {
        "a": {
            "running": {"version": "1.0", "hash": None, "slot": None},
            "state": "idle",
            "trial": None,
            "staged": None,
            "last_failure": {"version": "1.1", "hash": h2, "reason": "no session in 120 s"},
        },
        "b": {
            "running": {"version": "1.2", "hash": h1, "slot": "b"},
            "state": "trial",
            "trial": {"version": "1.2", "hash": h1, "slot": "b", "deadline_s": 97},
            "staged": None,
            "last_failure": None,
        },
    }
    # a's link is up; b's went down 5 minutes ago (its row is its last word); c has none
    links = {"a": {"state": "up", "since": 1000.0}, "b": {"state": "down", "since": 1000.0}}
    rows = plan.status_rows(infos, otas, links=links)
    assert [(r["node"], r["board"], r["ota"] is None) for r in rows] == [
        ("a", "unix", False),
        ("b", "unix", False),
        ("c", "esp32", True),
    ]
    lines = plan.render_status(rows, now=1300.0).splitlines()
    assert lines[0].split() == [
        "NODE",
        "LINK",
        "VERSION",
        "HASH",
        "SLOT",
        "STATE",
        "TRIAL",
        "LAST",
        "FAILURE",
    ]
    assert lines[1].split() == ["a", "up", "1.0", "-", "factory", "idle", "-", "1.1"] + [
        "22222222:",
        "no",
        "session",
        "in",
        "120",
        "s",
    ]
    assert lines[2].split() == ["b", "down", "5m", "1.2", "11111111", "b", "trial"] + [
        "1.2",
        "11111111",
        "97s",
        "-",
    ]
    assert lines[3].split() == ["c", "none", "no", "ota", "service"]
    assert [r["node"] for r in plan.status_rows(infos, otas, "[bc]")] == ["b", "c"]
    json.dumps(rows)  # --json prints them as they are


def test_a_transfer_resumes_where_begin_says_the_device_is():
    sz = [300, 2000, 4, 0]
    assert positions([120], sz) == [120, 0, 0, 0]  # the manifest, not yet complete
    assert positions([300, 768, 4, 0], sz) == [300, 768, 4, 0]
    for bad in ([], [301], [300, 1, 2, 3, 4], "x", None, [True], [300, -1]):
        with pytest.raises(ValueError):
            positions(bad, sz)
    got = list(chunks(sz, [120, 0, 0, 0]))
    assert got == [(0, 120, 180), (1, 0, CHUNK), (1, 768, CHUNK), (1, 1536, 464), (2, 0, 4)] + [
        (3, 0, 0)
    ]
    assert list(chunks(sz, [300, 1536, 4, 0])) == [(1, 1536, 464), (3, 0, 0)]
    assert CHUNK == 768  # the contract's largest chunk


def test_the_command_is_listed():
    r = subprocess.run(
        [sys.executable, "-m", "edgebus.tools.cli", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "ota" in r.stdout and "push a bundle in waves" in r.stdout
