"""Key rotation and provisioning with real parts: the firmware on the
MicroPython unix port (tools/sim/fleet.py) on a pty cable to the bridge (in this
process, serving its real unix socket), and the `edgebus keys` command as a
subprocess."""

import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

import edgebus
from edgebus.bridge import config as bridge_config
from edgebus.bridge.keystore import KeyStore
from edgebus.link import keywrap
from edgebus.link.handshake import kid
from edgebus.tools.sim.fleet import Fleet
from tests.conftest import until
from tests.host.bridge.test_shell import NOBODY, as_user, with_bridge
from tests.host.bridge.test_shell import edgebus as run_edgebus

pytestmark = pytest.mark.slow


def _device_key(d):
    with open(d["config"]) as f:
        return json.load(f)["key"]


def _set_device_key(d, key):
    with open(d["config"]) as f:
        cfg = json.load(f)
    cfg["key"] = key
    with open(d["config"], "w") as f:
        json.dump(cfg, f)


@pytest.mark.micropython
def test_rotate_a_device_key_with_grace_tamper_and_offline(tmp_path):
    sockdir = tempfile.mkdtemp(prefix="edgebus-keys-")  # a directory uid 65534 can reach
    os.chmod(sockdir, 0o755)
    with Fleet(tmp_path / "fleet", serial=1, period=0.5) as fleet:
        d = fleet.devices[0]
        node, k0 = d["node"], d["key"]
        toml = tmp_path / "bridge.toml"
        toml.write_text(
            '[bridge]\nnode = "gw"\nstate_dir = "state"\nsocket = "%s"\n'
            'heartbeat = 0.5\n[[serial]]\nnode = "%s"\nport = "%s"\nkey = "%s"\n'
            % (os.path.join(sockdir, "bridge.sock"), node, d["port"], k0)
        )
        cfg = bridge_config.load(toml)
        store = KeyStore(cfg.keys)
        fleet.start()
        key_set = ("dev", node, "sys", "key", "set")

        async def body(b):
            link = b.links["serial:" + node]
            c = b.bus.connect(principal=("test",))

            async def restarted(key):
                """The device started again with key in its config."""
                fleet.kill(node)
                _set_device_key(d, key)
                fleet.start(node)

            async def session_after(sessions):
                await until(
                    lambda: (
                        link.status == "up"
                        and link.counters["sessions"] > sessions
                        and key_set in b.bus.endpoints()
                    ),
                    60,
                )

            await until(lambda: key_set in b.bus.endpoints(), 60)
            # another local user without an [[acl]] entry may not rotate
            got = await asyncio.to_thread(
                as_user, NOBODY, cfg.socket, ['call bridge/keys/rotate {"node": "%s"}' % node]
            )
            assert got[0].startswith("error denied "), got
            assert store.read(node) is None and _device_key(d) == k0

            rc, out, err = await run_edgebus(
                cfg.socket, "keys", "rotate", node, "--grace", "1h", "--json"
            )
            assert rc == 0, err
            r = json.loads(out)
            k1 = _device_key(d)
            assert k1 != k0 and len(k1) == 64 and r["kid"] == kid(k1.encode())
            assert r["old_kid"] == kid(k0.encode()) and r["ok"] is True
            rec = store.read(node)
            assert rec["key"] == k1 and rec["pending"] == []
            assert [p["key"] for p in rec["previous"]] == [k0]
            assert 3500 < rec["previous"][0]["until"] - time.time() <= 3600
            assert oct(os.stat(store.file(node)).st_mode & 0o777) == "0o600"
            assert link.status == "up"  # the running session went on

            rc, out, err = await run_edgebus(cfg.socket, "keys", "list", "--config", str(toml))
            assert rc == 0 and kid(k1.encode()) in out and kid(k0.encode()) in out
            assert k1 not in out and k0 not in out

            # after a restart the device links with the new key; the old one,
            # within its grace, still links too
            for key in (k1, k0):
                n = link.counters["sessions"]
                await restarted(key)
                await session_after(n)

            # a tampered wrap, or one under another key, changes nothing
            before = Path(d["config"]).read_text()
            good = keywrap.wrap(k0.encode(), "ab" * 32, "00112233aabbccdd")
            flip = dict(
                good, wrapped=("1" if good["wrapped"][0] == "0" else "0") + good["wrapped"][1:]
            )
            for req in (flip, keywrap.wrap(b"not-its-key", "ab" * 32, "00112233aabbccdd")):
                with pytest.raises(edgebus.Failed) as ei:
                    await c.call("dev/%s/sys/key/set" % node, req, timeout=10)
                assert "key unchanged: the check does not match" in ei.value.reason
            with pytest.raises(edgebus.Failed) as ei:  # nor does a plain config change
                await c.call("dev/%s/sys/config/set" % node, {"key": "ab" * 32}, timeout=10)
            assert "key moves only wrapped" in ei.value.reason
            assert Path(d["config"]).read_text() == before
            assert await c.call("dev/%s/sys/key/set" % node, None, timeout=10) == {
                "kid": kid(k0.encode())
            }

            # the device holds k0 (still accepted): a rotation takes it from
            # there; with a 1 s grace, k0 and k1 are refused once it passed
            rc, out, err = await run_edgebus(cfg.socket, "keys", "rotate", node, "--grace", "1s")
            k2 = _device_key(d)
            assert rc == 0 and out.startswith(
                "%s: new key kid %s; the old key (kid %s)"
                % (node, kid(k2.encode()), kid(k0.encode()))
            ), err
            until_t = max(p["until"] for p in store.read(node)["previous"])
            await until(lambda: time.time() > until_t + 0.1, 5)
            assert store.accepted(node) == [k2]
            fails = link.counters.get("auth_failures", 0)
            n = link.counters["sessions"]
            await restarted(k0)
            await until(lambda: link.counters.get("auth_failures", 0) > fails, 30)
            assert link.counters["sessions"] == n
            await restarted(k2)
            await session_after(n)

            # an offline device: a clear failure, the keystore as it was
            fleet.kill(node)
            await until(lambda: key_set not in b.bus.endpoints(), 30)
            kept = Path(store.file(node)).read_text()
            rc, out, err = await run_edgebus(cfg.socket, "keys", "rotate", node, "-t", "3")
            assert rc == 8 and "device offline: %s has no session" % node in err, err
            assert Path(store.file(node)).read_text() == kept
            rc, out, err = await run_edgebus(cfg.socket, "keys", "rotate", "ghost")
            assert rc == 8 and "unknown node 'ghost'" in err, err

        try:
            with_bridge(cfg, body)
        finally:
            shutil.rmtree(sockdir, ignore_errors=True)


def test_keys_new_provisions_a_device_and_refuses_to_overwrite(tmp_path):
    keys, dev = tmp_path / "keys", tmp_path / "device.json"
    with open(dev, "w") as f:
        json.dump({"node": "n1", "key": "change-me", "uplink": {"kind": "uart"}}, f)

    async def main():
        rc, out, err = await run_edgebus(
            "", "keys", "new", "n1", "--keys", str(keys), "--device-config", str(dev)
        )
        assert rc == 0, err
        k = json.loads(Path(dev).read_text())["key"]
        assert (
            len(k) == 64
            and int(k, 16)
            and json.loads(Path(dev).read_text())["uplink"] == {"kind": "uart"}
        )
        assert KeyStore(str(keys)).read("n1")["key"] == k and k not in out
        assert "kid %s" % kid(k.encode()) in out
        assert oct(os.stat(dev).st_mode & 0o777) == "0o600"
        rc, out, err = await run_edgebus("", "keys", "new", "n1", "--keys", str(keys))
        assert rc == 1 and "n1 already has a key" in err and "--force" in err
        assert KeyStore(str(keys)).read("n1")["key"] == k
        # the bridge takes a device whose key only the keystore holds
        cfg = bridge_config.parse(
            {"bridge": {"keys": str(keys)}, "mqtt": {"devices": [{"node": "n1"}]}}
        )
        assert cfg.mqtt.keys == {"n1": None}
        with pytest.raises(bridge_config.ConfigError, match="or a key in the keystore"):
            bridge_config.parse(
                {"bridge": {"keys": str(keys)}, "mqtt": {"devices": [{"node": "n2"}]}}
            )
        # as the README goes: the node listed first, keyless; then `keys new --config`
        toml = tmp_path / "bridge.toml"
        toml.write_text('[bridge]\nstate_dir = "st"\n[mqtt]\ndevices = [{node = "n2"}]\n')
        rc, out, err = await run_edgebus("", "keys", "new", "n2", "--config", str(toml))
        assert rc == 0, err
        assert bridge_config.load(str(toml)).mqtt.keys == {"n2": None}
        assert KeyStore(str(tmp_path / "st" / "keys")).read("n2") is not None

    asyncio.run(main())
