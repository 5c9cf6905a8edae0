"""`edgebus provision`: from nothing to a device in the bridge's status with
two commands (real mosquitto, edgebus-bridge as a process, the firmware on the
MicroPython unix port), and the refusals, which leave nothing behind."""

import json
import subprocess

import pytest

from dev.broker import Mosquitto
from dev.harness.bridge import BridgeProcess
from dev.harness.process import Process, env, python, run_module
from edgebus.tools import cli
from edgebus.tools.boardkit import devicefiles
from edgebus.tools.commands import deploy
from tests.host.mqtt.tlskit import TestCA

BRIDGE = (
    '[bridge]\nnode = "gw"\nstate_dir = "state"\nsocket = "bridge.sock"\nheartbeat = 0.5\n'
    '[mqtt]\nurl = "mqtt://127.0.0.1:%d"\nkeystore = true\n'
)


@pytest.mark.mosquitto
@pytest.mark.micropython
def test_from_nothing_to_a_device_in_the_bridges_status(tmp_path):
    with Mosquitto() as broker:
        toml = tmp_path / "bridge.toml"
        toml.write_text(BRIDGE % broker.port)
        bridge = BridgeProcess(str(tmp_path), toml=toml).start().ready()
        try:
            out = tmp_path / "devices"
            r = run_module(
                "edgebus.tools.cli",
                "provision",
                "n1",
                "--board",
                "unix",
                "--broker",
                "mqtt://127.0.0.1:%d" % broker.port,
                "--bridge-config",
                toml,
                "--out",
                out,
                timeout=60,
            )
            assert r.returncode == 0 and "the bridge at " in r.stdout, r.stdout + r.stderr
            assert "edgebus fleet --from %s" % out in r.stdout, r.stdout
            assert (
                "edgebus deploy --board unix --port PORT --config %s" % (out / "n1" / "config.json")
                in r.stdout
            )
            with open(out / "n1" / "config.json") as f:
                cfg = json.load(f)
            assert (cfg["node"], cfg["uplink"]["port"]) == ("n1", broker.port)
            # The second command: the provisioned device on the unix port (the simulator).
            with Process(
                python("edgebus.tools.cli", "fleet", "--from", out, "--out", tmp_path / "fleet"),
                cwd=tmp_path,
                env=env(),
                stdout=subprocess.DEVNULL,
            ) as fleet:
                bridge.wait_status(
                    lambda st: (st["links"].get("mqtt:n1") or {}).get("state") == "up", 60
                )
                st = run_module("edgebus.tools.cli", "status", "--socket", bridge.sock, timeout=30)
                assert fleet.poll() is None
                # It runs as provisioned: the fleet's own defaults change nothing it set.
                with open(tmp_path / "fleet" / "devices" / "n1" / "config.json") as f:
                    ran = json.load(f)
                for k in ("health_period", "services", "link"):
                    assert ran.get(k) == cfg.get(k), (k, ran.get(k), cfg.get(k))
                # Its presence, heard before its first frame, is not a refused device.
                assert bridge.status()["mqtt"]["unknown_devices"] == 0
                # SIGTERM, the fleet's clean stop: its devices (each in a
                # session of its own) stop with it, none left running.
                assert fleet.stop() == 0
            assert st.returncode == 0 and "mqtt:n1" in st.stdout, st.stdout + st.stderr
        finally:
            bridge.stop()
            bridge.close()


def test_fleet_from_refuses_a_period_it_would_not_honour(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["fleet", "--from", str(tmp_path), "--period", "0.5"])
    assert "--period is for the devices the fleet makes" in str(e.value)


def _provision(capsys, *args):
    rc = cli.main(["provision", *map(str, args)])
    o = capsys.readouterr()
    return rc, o.out, o.err


@pytest.mark.parametrize(
    "args, code, says",
    [
        (["n/1", "--board", "unix", "--broker", "mqtt://h"], 2, "node 'n/1': a node id is"),
        (["n1", "--board", "nope", "--broker", "mqtt://h"], 2, 'unknown board "nope"'),
        (["n1", "--board", "unix", "--broker", "http://h"], 2, "expected mqtt://host[:port]"),
        (["n1", "--board", "unix", "--broker", "mqtt://h:99999"], 2, "expected mqtt://"),
        (["n1", "--board", "unix", "--broker", "mqtts://h"], 2, "is TLS: give --ca FILE"),
        (["n1", "--board", "unix", "--broker", "mqtt://h", "--wifi", "x"], 2, "no WiFi radio"),
        (["n1", "--board", "esp8266"], 2, "uplink is MQTT: give --broker"),
        (
            ["n1", "--board", "esp32", "--broker", "mqtt://h", "--wifi", "x"],
            2,
            "needs its password",
        ),
        (["n1", "n1", "--board", "esp32"], 2, "a node is given twice"),
        (["n1", "--board", "esp32", "--ntp", "pool.ntp.org"], 2, "--ntp goes with --broker"),
        (["n1", "--board", "esp32", "--sleep", "0.5"], 2, "sleep.every must be between 1"),
    ],
)
def test_refusals_leave_nothing_behind(tmp_path, capsys, monkeypatch, args, code, says):
    monkeypatch.delenv("EDGEBUS_WIFI_PASSWORD", raising=False)
    where = ["--keys", tmp_path / "keys", "--out", tmp_path / "out"]
    rc, out, err = _provision(capsys, *args, *where)
    assert rc == code and says in err and err.count("\n") == 1, err
    assert not (tmp_path / "keys").exists() and not (tmp_path / "out").exists()


def test_an_existing_node_is_refused_and_force_says_what_it_replaces(tmp_path, capsys):
    where = ["--keys", tmp_path / "keys", "--out", tmp_path / "out", "--board", "esp32"]
    rc, out, _ = _provision(capsys, "a1", *where)
    assert rc == 0 and "no running bridge to reload" in out, out
    cfg = tmp_path / "out" / "a1" / "config.json"
    first = cfg.read_text()
    assert oct(cfg.stat().st_mode & 0o777) == "0o600"
    rc, _, err = _provision(capsys, "a2", "a1", *where)  # one of them exists: neither is made
    assert rc == 1 and "a1 already has a key (kid " in err, err
    assert not (tmp_path / "out" / "a2").exists() and cfg.read_text() == first
    rc, out, _ = _provision(capsys, "a1", *where, "--force")
    assert rc == 0 and "(replaced key kid " in out, out
    assert json.loads(cfg.read_text())["key"] != json.loads(first)["key"]


def test_a_real_boards_config_is_written_whole_and_refuses_the_example_key(tmp_path, capsys):
    """WiFi and TLS on a Pico W; the firmware's own validation (a real board's,
    here CPython: not the simulator) takes it, and refuses it with the example's key."""
    (tmp_path / "pw").write_text("s3cret\n")
    ca = TestCA(tmp_path)
    _, key = ca.issue("broker.lan")
    rc, _, err = _provision(
        capsys,
        "w0",
        "--board",
        "esp32",
        "--broker",
        "mqtts://b",
        "--ca",
        key,
        "--keys",
        tmp_path / "k0",
    )
    assert rc == 2 and "is not a CA certificate (PEM or DER): its first PEM block is" in err, err
    assert not (tmp_path / "k0").exists()  # a private key is never copied to devices
    rc, out, err = _provision(
        capsys,
        "w1",
        "--board",
        "rp2-pico-w",
        "--wifi",
        "home",
        "--wifi-password-file",
        tmp_path / "pw",
        "--broker",
        "mqtts://broker.lan",
        "--ca",
        ca.ca,
        "--ntp",
        "pool.ntp.org",
        "--sleep",
        "300",
        "--keys",
        tmp_path / "keys",
        "--out",
        tmp_path / "out",
    )
    assert rc == 0, err
    d = tmp_path / "out" / "w1"
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["network"] == {"ssid": "home", "password": "s3cret"}
    assert cfg["time"] == {"ntp": "pool.ntp.org"} and cfg["sleep"] == {"every": 300}
    assert cfg["link"]["journal"] == "journal"
    assert cfg["uplink"] == {
        "kind": "mqtt",
        "host": "broker.lan",
        "port": 8883,
        "tls": {"ca": "ca.pem", "server_name": "broker.lan"},
    }
    assert (d / "ca.pem").read_bytes() == (tmp_path / "ca.pem").read_bytes()  # TestCA's
    assert json.loads((tmp_path / "keys" / "w1.json").read_text())["key"] == cfg["key"]
    config = devicefiles.firmware("config")
    assert config.validate(cfg) is cfg
    with pytest.raises(config.ConfigError, match="key is the example's 'change-me'"):
        config.validate(dict(cfg, key=config.EXAMPLE_KEY))
    # edgebus deploy takes the CA from beside the config, and says when it is not there.
    assert "edgebus deploy --board rp2-pico-w" in out and "mpremote" not in out
    assert deploy.tls_files(str(d / "config.json"), (d / "config.json").read_bytes()) == [
        ("ca.pem", str(d / "ca.pem"))
    ]
    (d / "ca.pem").unlink()
    with pytest.raises(deploy.DeployError, match="uplink.tls.ca names ca.pem, which is not beside"):
        deploy.tls_files(str(d / "config.json"), (d / "config.json").read_bytes())
