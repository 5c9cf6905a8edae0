"""A bridge as one shard of several on a broker ([mqtt] shard = true), with a
real mosquitto and a real-micropython device: it subscribes to its own
devices' topics only, and a reload (bridge/devices/reload, as SIGHUP and
`edgebus devices reload` ask) links new devices, releases removed ones, and
changes nothing when the configuration does not load."""

import asyncio
import logging

import paho.mqtt.client as paho
import pytest

import edgebus
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.bridge.keystore import KeyStore
from edgebus.bridge.reload import RELOAD
from tests.conftest import until

DEVICE_HEAP = "192K"


def _toml(port, keys, devices):
    return (
        '[bridge]\nnode = "gw-a"\nstate_dir = "state"\nkeys = "%s"\nheartbeat = 0.5\n'
        '[mqtt]\nurl = "mqtt://127.0.0.1:%d"\nshard = true\nkeystore = true\n'
        "devices = [%s]\n"
        % (keys, port, ", ".join('{node = "%s", key = "%s"}' % d for d in devices))
    )


def _publish(port, topic, payload):
    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="shard-test-pub")
    c.connect("127.0.0.1", port)
    c.loop_start()
    c.publish(topic, payload).wait_for_publish(5)
    c.disconnect()
    c.loop_stop()


def test_a_shard_takes_only_its_devices_and_reloads_them_without_a_restart(
    tmp_path, broker, link_device, caplog
):
    keys = tmp_path / "keys"
    path = tmp_path / "bridge.toml"
    path.write_text(_toml(broker.port, keys, [("d1", "k1")]))
    cfg = bridge_config.load(str(path))
    assert cfg.mqtt.client_id == "edgebus-bridge-gw-a"  # shards' ids differ by default
    caplog.set_level(logging.INFO, "edgebus.bridge")

    async def main():
        b = Bridge(cfg, str(path))
        task = asyncio.create_task(b.run())
        c = b.bus.connect()
        try:
            await until(lambda: b.mqtt.connected, 10)
            assert b.mqtt.subscriptions() == ["edgebus/d1/up", "edgebus/d1/state"]
            # Another shard's device reaches no link here, not even as unknown:
            # its frame is not delivered. The state message published after it
            # on one connection arrives after it, so once it is counted the
            # stranger's frame would have been too.
            _publish(broker.port, "edgebus/stranger/up", b"\x00hello")
            _publish(broker.port, "edgebus/d1/state", b"offline")
            await until(lambda: b.links["mqtt:d1"].counters.get("presence_offline"), 10)
            assert b.mqtt.unknown == 0

            dev = link_device("mqtt:127.0.0.1:%d" % broker.port, "k1", 5, "d1", heap=DEVICE_HEAP)
            await until(lambda: b.links["mqtt:d1"].status == "up", 20)
            sessions = b.links["mqtt:d1"].counters["sessions"]

            # A configuration that does not load: refused, said once, nothing changed.
            path.write_text(_toml(broker.port, keys, [("d1", "k1")]) + "[mqtt\n")
            with pytest.raises(edgebus.Failed) as e:
                await c.call(RELOAD, None, timeout=10)
            assert "not valid TOML" in str(e.value.reason)
            said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("reload")]
            assert len(said) == 1 and "running on with the configuration loaded before" in said[0]
            assert b.links["mqtt:d1"].status == "up"
            assert b.links["mqtt:d1"].counters["sessions"] == sessions
            assert b.mqtt.subscriptions() == ["edgebus/d1/up", "edgebus/d1/state"]

            # A key file for d2 in the keystore: linked and subscribed.
            KeyStore(str(keys)).write("d2", {"key": "k2", "since": 0})
            path.write_text(_toml(broker.port, keys, [("d1", "k1")]))
            r = await c.call(RELOAD, None, timeout=10)
            assert r == {"added": ["d2"], "removed": [], "changed": [], "devices": 2}
            assert "mqtt:d2" in b.links
            assert sorted(b.mqtt.subscriptions()) == [
                "edgebus/d1/state",
                "edgebus/d1/up",
                "edgebus/d2/state",
                "edgebus/d2/up",
            ]
            assert b.mqtt.stats()["subscriptions"] == 4  # on the broker too
            # Its key can be rotated like a listed device's (it has no session yet).
            with pytest.raises(edgebus.Failed) as e:
                await c.call("bridge/keys/rotate", {"node": "d2"}, timeout=10)
            assert "device offline: d2 has no session" in str(e.value.reason)

            # d1 out of the configuration: BYE, no link, no subscription; the
            # device is told, so it is not waiting for a liveness timeout.
            path.write_text(_toml(broker.port, keys, []))
            r = await c.call(RELOAD, None, timeout=10)
            assert r == {"added": [], "removed": ["d1"], "changed": [], "devices": 1}
            assert "mqtt:d1" not in b.links and "d1" not in b.mqtt.links
            assert b.mqtt.subscriptions() == ["edgebus/d2/up", "edgebus/d2/state"]
            assert b.mqtt.stats()["subscriptions"] == 2
            assert any("d1 released" in r.getMessage() for r in caplog.records)

            # Back in: a new link over the same peer state, the session up again.
            path.write_text(_toml(broker.port, keys, [("d1", "k1")]))
            r = await c.call(RELOAD, None, timeout=10)
            assert r["added"] == ["d1"]
            await until(lambda: b.links["mqtt:d1"].status == "up", 20)
            dev.kill()
        finally:
            b.stop()
            await task

    asyncio.run(main())
