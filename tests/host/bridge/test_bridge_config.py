"""The bridge's configuration over its whole schema (edgebus.bridge.config.SCHEMA):
every key of every table, fed a value it must refuse, ends edgebus-bridge
with exit 2 and one line naming the table and the key, never a traceback."""

import json
import logging
import math
import os
import socket
import subprocess
import sys

import pytest

from edgebus import tlog
from edgebus.bridge import config as bc
from edgebus.bridge import daemon, schema

# A valid configuration with every table, so each key has a table to sit in.
BASE = {
    "bridge": {"state_dir": "state"},
    "log": {"dir": "log"},
    "serial": [{"node": "d", "port": "/dev/edgebus-none", "key": "k"}],
    "mqtt": {"devices": [{"node": "m", "key": "k"}]},
    "peer": [{"node": "p", "key": "k", "connect": "127.0.0.1:9"}],
    "mailbox": {"entries": 16},
    "quota": {"readings": 1000},
    "acl": [{"uid": 1000}],
}
ARRAYS = ("serial", "peer", "acl")
BRIDGE = os.path.join(os.path.dirname(sys.executable), "edgebus-bridge")  # as installed


def _toml(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string
    if isinstance(v, list):
        return "[%s]" % ", ".join(_toml(x) for x in v)
    return "{%s}" % ", ".join("%s = %s" % (k, _toml(x)) for k, x in v.items())


def _document(doc):
    out = []
    for name, t in doc.items():
        for entry in t if name in ARRAYS else [t]:
            out.append(("[[%s]]" if name in ARRAYS else "[%s]") % name)
            out.extend("%s = %s" % (k, _toml(v)) for k, v in entry.items())
    return "\n".join(out) + "\n"


def _bad_values(spec, tmp):
    """Values the key must refuse: one of a wrong type, and by its kind."""
    out = ["x" if str not in spec.types else 5]
    k = spec.kind
    if k == schema.RANGE:
        out += [spec.lo - 1, spec.hi + 1] + ([math.nan] if float in spec.types else [])
    elif k == schema.CHOICE:
        out += ["bogus"]
    elif k == schema.TEXT:
        out += [""]
    elif k == schema.NODE:
        out += ["", "a/b", "a+", "#", "a\x00"]
    elif k in (schema.DIR, schema.SOCKET):
        # /proc takes no new entries (not even root's); a file is no directory
        out += ["/proc/edgebus-test/x", str(tmp / "afile" / "x"), ""]
        out += ["/tmp/" + "s" * 120] if k == schema.SOCKET else []
    elif k == schema.FILE:
        out += [str(tmp / "missing")]
    elif k == schema.ADDRESS:
        out += ["nohost", "h:0", "h:70000"]
    elif k == schema.URL:
        out += ["http://h", "mqtt://", "mqtt://h:0"]
    elif k in (schema.PATTERNS, schema.RULES):
        out += [[3], ["a/#/b"], [""]]
    elif k == schema.TABLES:
        out += [["x"]]
    return out


class Started(Exception):
    """The daemon got past its configuration to the bridge's start."""


def _run(tmp, doc, capsys):
    """(exit status or Started, stderr) of edgebus-bridge's entry point on doc."""
    path = tmp / "bridge.toml"
    path.write_text(_document(doc))
    try:
        rc = daemon.main(["--config", str(path)])
    except Started:
        rc = Started
    return rc, capsys.readouterr().err, str(path)


def test_every_key_refuses_a_bad_value_in_one_line(tmp_path, monkeypatch, capsys):
    def started(*a, **kw):
        raise Started()

    monkeypatch.setattr(daemon, "Bridge", started)
    # main() sets up logging: the root logger is as it was after the test
    monkeypatch.setattr(logging.root, "handlers", list(logging.root.handlers))
    monkeypatch.setattr(logging.root, "level", logging.root.level)
    (tmp_path / "afile").write_text("")
    rc, err, _ = _run(tmp_path, BASE, capsys)
    assert rc is Started, err  # the base is valid: only the bad value stops it
    cases = 0
    for name, (label, keys) in schema.SCHEMA.items():
        for key, spec in keys.items():
            for bad in _bad_values(spec, tmp_path):
                doc = json.loads(json.dumps(BASE))
                if name == "mqtt.devices":
                    table, where = doc["mqtt"]["devices"][0], label + " #1"
                elif name in ARRAYS:
                    table, where = doc[name][0], label + " #1"
                else:
                    table, where = doc[name], label
                table[key] = bad
                if key == "key_file":
                    del table["key"]  # an inline key would be taken instead
                rc, err, path = _run(tmp_path, doc, capsys)
                what = "%s %s = %r" % (label, key, bad)
                assert rc == 2, what
                assert "Traceback" not in err and err.count("\n") == 1, (what, err)
                assert err.startswith("edgebus-bridge: %s: %s: %s" % (path, where, key)), (
                    what,
                    err,
                )
                cases += 1
    assert cases > 150


def _bridge(tmp_path, toml):
    path = tmp_path / "bridge.toml"
    path.write_text('[bridge]\nstate_dir = "state"\n' + toml)
    return subprocess.run(
        [BRIDGE, "--config", str(path)], capture_output=True, text=True, timeout=60
    )


def test_what_fails_at_the_start_is_one_line_too(tmp_path):
    """As a user meets them: a log directory that cannot be made, a number out
    of range, addresses another process holds (found only by binding)."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    with taken:
        for toml, line in (
            ('[log]\ndir = "/proc/x"\n', "[log]: dir /proc/x: cannot make it"),
            (
                '[log]\ndir = "log"\nsegment_seconds = -5\n',
                "[log]: segment_seconds must be between",
            ),
            (
                'metrics = "127.0.0.1:%d"\n' % port,
                "[bridge]: metrics 127.0.0.1:%d: cannot listen" % port,
            ),
            (
                '[[peer]]\nnode = "p"\nkey = "k"\nlisten = "127.0.0.1:%d"\n' % port,
                "[[peer]] #1: listen 127.0.0.1:%d: cannot listen" % port,
            ),
        ):
            r = _bridge(tmp_path, toml)
            assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
            assert r.stderr.count("\n") == 1 and line in r.stderr, r.stderr


def test_a_log_another_bridge_holds_is_named(tmp_path):
    held = tlog.LogWriter(str(tmp_path / "log"))
    try:
        r = _bridge(tmp_path, '[log]\ndir = "log"\n')
    finally:
        held.close()
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert (
        "[log]: dir %s: cannot open the log: another writer holds" % (tmp_path / "log") in r.stderr
    )


@pytest.mark.parametrize(
    "toml", ['[bridge]\nkeys = "k"\n', '[log]\ndir = "l"\n', '[bridge]\nsocket = "run/b.sock"\n']
)
def test_reading_a_configuration_makes_nothing(tmp_path, toml):
    """The tools read a bridge's configuration (edgebus keys, devices): only
    the daemon's start (prepare) makes its directories."""
    path = tmp_path / "bridge.toml"
    path.write_text(toml)
    cfg = bc.load(str(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bridge.toml"]
    bc.prepare(cfg)
    assert {"k", "l", "run", "edgebus-state"} & {p.name for p in tmp_path.iterdir()}


@pytest.mark.parametrize(
    "pattern, refused",
    [
        ("dev/+/sys/#", "sys/ota/op"),
        ("#", "sys/ota/op"),
        ("dev/kitchen/sys/ota/op", "sys/ota/op"),
        ("dev/+/sys/key/+", "sys/key/set"),
        ("dev/+/sys/config/get", None),
        ("dev/+/sys/ota/status", None),
    ],
)
def test_relay_calls_never_reach_a_devices_code_or_key(pattern, refused):
    # A device must not be able to update or re-key another through the bridge's relay.
    doc = {"bridge": {"relay_calls": [pattern]}}
    if refused is None:
        assert bc.parse(doc).relay_calls == [pattern]
        return
    with pytest.raises(bc.ConfigError) as e:
        bc.parse(doc)
    assert str(e.value).startswith("[bridge] relay_calls: %r" % pattern)
    assert refused in str(e.value) and "only the bridge may" in str(e.value)
