"""``edgebus-bridge --workers N`` (bridge/split.py, bridge/workers.py): one
configuration run as N processes that split the MQTT fleet by node id.

The split itself is checked on configurations; then, with real parts (a
mosquitto, 12 CPython devices of dev/swarm.py, a bridge of 2 workers with its
log and /metrics): every device is held by the worker its node id hashes to,
`edgebus status` shows all of them through the one socket, `edgebus sub`
sees them all and `edgebus pub` reaches the worker that holds the device, /metrics labels
each worker's series, a keystore device added at run time joins its worker on
`edgebus devices reload`, and a worker killed with SIGKILL is started again by
the supervisor while its devices lose nothing (every reading they sent is in
one of the workers' logs, none that was acknowledged missing)."""

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from dev.broker import Mosquitto, free_port
from dev.harness.bridge import BridgeProcess
from dev.harness.poll import wait_until
from dev.swarm import Swarm, check
from edgebus import tlog
from edgebus.bridge import config as bridge_config
from edgebus.bridge import split
from edgebus.bridge.keystore import KeyStore
from tests.conftest import ROOT, edgebus_ok

DEVICES = 12


def _cfg(tmp_path, text):
    p = tmp_path / "b.toml"
    p.write_text(text)
    return str(p)


def test_a_configuration_splits_its_mqtt_devices_by_node_id(tmp_path):
    devs = ["d%d" % i for i in range(40)]
    path = _cfg(
        tmp_path,
        '[bridge]\nnode = "gw"\nworkers = 3\nsocket = "%s/s.sock"\nstate_dir = "%s/st"\n'
        'metrics = "127.0.0.1:9999"\n[log]\ndir = "%s/log"\n'
        '[[serial]]\nnode = "s1"\nport = "/dev/null"\nkey = "k"\n'
        '[mqtt]\nclient_id = "br"\ndevices = [%s]\n'
        % (tmp_path, tmp_path, tmp_path, ", ".join('{node = "%s", key = "k"}' % d for d in devs)),
    )
    whole = bridge_config.load(path)
    assert whole.workers == 3 and whole.worker is None
    parts = [split.load(path, i) for i in range(3)]
    held = [set(p.mqtt.keys) for p in parts]
    assert set().union(*held) == set(devs) and sum(map(len, held)) == len(devs)
    assert all(held), "40 nodes over 3 workers: each holds some"
    for i, p in enumerate(parts):
        assert all(split.worker_of(n, 3) == i for n in held[i])
        assert p.mqtt.shard and p.mqtt.part == (i, 3) and p.mqtt.client_id == "br-w%d" % i
        assert p.state_dir == os.path.join(whole.state_dir, "w%d" % i)
        assert p.log_dir == os.path.join(whole.log_dir, "w%d" % i)
        assert p.keys == whole.keys  # one keystore
        assert p.metrics == "127.0.0.1:0" and p.node == "gw"
        assert [s.node for s in p.serial] == (["s1"] if i == 0 else [])
    assert [p.socket for p in parts] == split.sockets(whole)
    assert split.sockets(whole) == ["%s/s.sock" % tmp_path] + [
        "%s/s.sock.w%d" % (tmp_path, i) for i in (1, 2)
    ]
    # --workers overrides the file; the hash is stable (CRC-32, not Python's hash())
    assert bridge_config.load(path, 2).workers == 2
    assert split.worker_of("d1", 3) == 295091302 % 3  # CRC-32 of "d1"


def test_workers_need_an_mqtt_fleet_and_a_sane_count(tmp_path):
    path = _cfg(tmp_path, '[bridge]\nworkers = 2\nstate_dir = "%s/st"\n' % tmp_path)
    with pytest.raises(bridge_config.ConfigError, match=r"workers split the \[mqtt\] devices"):
        bridge_config.load(path)
    path = _cfg(tmp_path, "[bridge]\nworkers = 0\n")
    with pytest.raises(bridge_config.ConfigError, match="workers"):
        bridge_config.load(path)
    r = subprocess.run(
        [sys.executable, "-m", "edgebus.bridge.daemon", "--config", path, "--workers", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 2 and "--workers must be between 1 and 64" in r.stderr


def _supervised(state):
    with open(os.path.join(state, split.STATUS_FILE)) as f:
        return json.load(f)


def _metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
        return r.read().decode()


def _again(state, before, count, bridge, what):
    """Worker 1's account once its ``count`` ("restarts", "hangs") is 1 and it
    runs with a pid other than ``before``'s."""
    return wait_until(
        lambda: (
            (w := _supervised(str(state))["workers"][1])[count] == 1
            and w["pid"] not in (None, before["pid"])
            and w
        ),
        60,
        what,
        procs=[bridge.proc],
    )


def _bare(tmp_path, port, more=""):
    """A bridge of 2 workers and no device (its state directory), started."""
    state = tmp_path / "state"
    toml = tmp_path / "bridge.toml"
    toml.write_text(
        '[bridge]\nnode = "gw"\nworkers = 2\n%sstate_dir = "%s"\nsocket = "%s"\n'
        '[mqtt]\nurl = "mqtt://127.0.0.1:%d"\ndevices = []\n'
        % (more, state, tmp_path / "bridge.sock", port)
    )
    return BridgeProcess(str(tmp_path), toml=str(toml)).start().ready(60), state


def _newcomer(nodes):
    """A node id, not among ``nodes``, that worker 1 of 2 holds."""
    return next(n for n in ("late-%d" % i for i in range(100)) if split.worker_of(n, 2) == 1)


@pytest.mark.mosquitto
def test_two_workers_share_the_fleet_and_one_killed_loses_nothing(tmp_path):
    state, tlog_dir, sock = tmp_path / "state", tmp_path / "tlog", tmp_path / "bridge.sock"
    metrics = free_port()
    with Mosquitto() as broker:
        swarm = Swarm(
            DEVICES, ("127.0.0.1", broker.port), rate=5.0, workers=1, log=str(tmp_path / "w.log")
        )
        nodes = swarm.nodes()
        toml = tmp_path / "bridge.toml"
        toml.write_text(
            '[bridge]\nnode = "gw"\nworkers = 2\nstate_dir = "%s"\nsocket = "%s"\n'
            'metrics = "127.0.0.1:%d"\nheartbeat = 1.0\n[log]\ndir = "%s"\n'
            'patterns = ["dev/#"]\nsegment_seconds = 1\n\n%s\nkeystore = true\n'
            % (state, sock, metrics, tlog_dir, swarm.toml())
        )
        bridge = BridgeProcess(str(tmp_path), toml=str(toml))
        try:
            bridge.start().ready(60)
            with swarm:
                ok, p = swarm.wait(lambda p: p["up"] == DEVICES and p["acked"] >= 3 * DEVICES, 90)
                assert ok, p

                # One status through the one socket: every worker, every device once.
                st = json.loads(edgebus_ok("status", "--socket", str(sock), "--json"))
                assert [w["worker"] for w in st["workers"]] == [[0, 2], [1, 2]]
                for i, w in enumerate(st["workers"]):
                    mine = {lid.split(":", 1)[1] for lid in w["links"] if lid.startswith("mqtt:")}
                    assert mine == {n for n in nodes if split.worker_of(n, 2) == i}
                    assert all(w["links"]["mqtt:" + n]["state"] == "up" for n in mine)
                text = edgebus_ok("status", "--socket", str(sock))
                assert "bridge of 2 workers" in text
                # (each worker counts the status command's own local link)
                assert "all workers: links %d: %d up" % (DEVICES + 2, DEVICES + 2) in text, text
                far = next(n for n in nodes if split.worker_of(n, 2) == 1)
                one = json.loads(
                    edgebus_ok("status", "--socket", str(sock), "--json", "--link", "mqtt:" + far)
                )
                assert list(one["links"]) == ["mqtt:" + far] and one["worker"] == [1, 2]

                # The shell commands: sub sees every worker's devices; a publish
                # to a device goes to the worker that holds it, and only there.
                out = edgebus_ok(
                    "sub", "--socket", str(sock), "--json", "--count", "48", "dev/+/sensor/temp"
                )
                seen = {json.loads(x)["topic"].split("/")[1] for x in out.splitlines()}
                assert {split.worker_of(n, 2) for n in seen} == {0, 1}, seen
                edgebus_ok("pub", "--socket", str(sock), "dev/%s/cmd/hello" % far, "1")

                # One /metrics: each worker's series, labelled.
                m = _metrics(metrics)
                assert 'edgebus_worker_up{worker="0"} 1.0' in m
                assert 'edgebus_worker_up{worker="1"} 1.0' in m
                assert 'edgebus_log_appended_total{worker="1"}' in m
                assert m.count("# TYPE edgebus_log_appended_total counter") <= 1

                # A device whose key file comes at run time joins its worker on a reload.
                late = _newcomer(nodes)
                KeyStore(str(state / "keys")).write(late, {"key": "k" * 32, "since": 0})
                r = json.loads(edgebus_ok("devices", "reload", "--socket", str(sock), "--json"))
                assert r["added"] == [late] and r["devices"] == DEVICES + 1

                # Worker 1 killed: started again, its devices resume.
                before = _supervised(str(state))["workers"][1]
                os.kill(before["pid"], signal.SIGKILL)
                after = _again(state, before, "restarts", bridge, "worker 1 started again")
                assert after["last_exit"] == -signal.SIGKILL
                a0 = swarm.progress()["acked"]
                ok, p = swarm.wait(
                    lambda p: p["up"] == DEVICES and p["acked"] >= a0 + 3 * DEVICES, 90
                )
                assert ok, p
                assert "restart 1" in bridge.log()
                last = swarm.drained(90)
                assert bridge.stop(timeout=120) == 0
        finally:
            bridge.close()
    res = check([str(tlog_dir / "w0"), str(tlog_dir / "w1")], last)
    t = res["totals"]
    sent = sum(d["sent"] for d in last["devices"])
    # A reading worker 1 had written but not acknowledged when it was killed
    # comes again (a duplicate, which ingest keeps once); none is missing.
    assert t["acked_missing"] == 0 and t["unknown"] == 0 and t["gaps"] == 0, t
    assert t["logged"] == sent, (t, sent)
    hello = ("dev", far, "cmd", "hello")
    found = [
        [r for _, r in tlog.read_log(str(tlog_dir / w)) if tuple(r["topic"]) == hello]
        for w in ("w0", "w1")
    ]
    assert [len(f) for f in found] == [0, 1], found


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.mosquitto
def test_workers_do_not_outlive_a_killed_supervisor(tmp_path):
    with Mosquitto() as broker:
        bridge, state = _bare(tmp_path, broker.port)
        try:
            pids = [w["pid"] for w in _supervised(str(state))["workers"]]
            assert all(pids) and all(_alive(p) for p in pids)
            bridge.kill()  # SIGKILL: the supervisor says nothing to its workers
            wait_until(lambda: not any(_alive(p) for p in pids), 30, "the workers gone with it")
        finally:
            bridge.close()


@pytest.mark.mosquitto
def test_a_hung_worker_is_killed_and_started_again(tmp_path):
    """SIGSTOP: the worker's event loop stops showing signs of life (as one stuck
    in a loop would); past [bridge] worker_hang the supervisor kills it and
    starts it again."""
    with Mosquitto() as broker:
        bridge, state = _bare(tmp_path, broker.port, "worker_hang = 3\n")
        try:
            first = _supervised(str(state))["workers"][1]
            wait_until(lambda: split.last_alive(str(state / "w1")), 30, "worker 1's sign of life")
            os.kill(first["pid"], signal.SIGSTOP)
            again = _again(state, first, "hangs", bridge, "worker 1 killed as hung, started again")
            assert again["restarts"] == 1 and again["last_exit"] == -signal.SIGKILL
            assert "showed no sign of life" in bridge.log()
            worker0 = _supervised(str(state))["workers"][0]
            assert worker0["restarts"] == 0  # the other was left alone
            assert bridge.stop(timeout=60) == 0
        finally:
            bridge.close()
