"""MQTT links with a real mosquitto (started on a free loopback port): the
device side runs edgebus.link.mqtt under the real micropython binary, the
bridge side aiomqtt."""
import asyncio
import json
import aiomqtt
import pytest

from bridge import config as C
from bridge.daemon import Bridge
from tests.conftest import until
from tools.broker import Mosquitto

DEVICE_HEAP = "160K"   # core + link + MQTT transport on the 64-bit unix port


@pytest.fixture
def broker():
    with Mosquitto() as b:
        yield b


@pytest.fixture
def device(link_device):
    return lambda port, key, count, node="d1": link_device(
        "mqtt:127.0.0.1:%d" % port, key, count, node, heap=DEVICE_HEAP)


def _bridge_cfg(tmp_path, port, mirror=()):
    return C.parse({"bridge": {"node": "gw", "state_dir": str(tmp_path / "state"), "heartbeat": 0.5},
                    "mqtt": {"url": "mqtt://127.0.0.1:%d" % port, "client_id": "bridge-test",
                             "devices": [{"node": "d1", "key": "k1"}], "mirror": list(mirror)}})


def test_device_over_mqtt_with_provenance_calls_and_presence(tmp_path, broker, device):
    count = 50

    async def main():
        b = Bridge(_bridge_cfg(tmp_path, broker.port))
        task = asyncio.create_task(b.run())
        c = b.bus.connect()
        sub = c.subscribe("dev/d1/sensor/count", queue_len=count)
        dev = device(broker.port, "k1", count)
        got = [await asyncio.wait_for(sub.recv(), 15) for _ in range(count)]
        assert [m.payload for m in got] == list(range(count))
        o = got[0].origin
        assert o.kind == "link" and o.link_id == "mqtt:d1" and o.peer_node == "d1"
        assert o.generation == 1 and o.extra["seq"] >= 1
        assert await c.call("dev/d1/sys/echo", "x", timeout=3) == {"echo": "x"}
        link = b.links["mqtt:d1"]
        # The device dies without a goodbye: the broker's last will takes the
        # session down well before the liveness timeout would.
        dev.kill()
        await until(lambda: link.status != "up", 5)
        assert link.counters.get("presence_offline", 0) >= 1
        b.stop()
        await task
    asyncio.run(main())


def test_broker_restart_mid_stream_no_duplicates_losses_are_gaps(tmp_path, broker, device):
    count = 300

    async def main():
        b = Bridge(_bridge_cfg(tmp_path, broker.port))
        task = asyncio.create_task(b.run())
        sub = b.bus.connect().subscribe("dev/d1/sensor/count", queue_len=count)
        dev = device(broker.port, "k1", count)
        link = b.links["mqtt:d1"]
        await until(lambda: link.counters.get("imported", 0) >= 60, 15)
        broker.stop()                 # a crash: no goodbye to anyone
        await asyncio.sleep(0.7)
        broker.start()
        got = []
        while True:
            m = await asyncio.wait_for(sub.recv(), 20)
            got.append(m)
            if m.payload == count - 1:
                break
        payloads = [m.payload for m in got]
        assert len(set(payloads)) == len(payloads)            # no duplicate
        assert payloads == sorted(payloads)                   # in order
        seqs = [m.origin.extra["seq"] for m in got]
        assert len(got) + link.counters.get("gaps", 0) == count   # every loss is a counted gap
        assert link.counters.get("gaps", 0) > 0               # the outage did lose some
        assert link.generation == 1 and b.mqtt.connects >= 2   # same device boot, reconnected
        assert seqs == sorted(seqs)
        b.stop()
        await task
        dev.kill()
    asyncio.run(main())


def test_native_mirror_for_plain_mqtt_clients(tmp_path, broker, device):
    async def main():
        b = Bridge(_bridge_cfg(tmp_path, broker.port, mirror=["dev/+/sys/#"]))
        task = asyncio.create_task(b.run())
        dev = device(broker.port, "k1", 1)
        await until(lambda: b.links["mqtt:d1"].status == "up", 15)
        await asyncio.sleep(0.5)
        # Any MQTT client, subscribing late, gets the retained fact as JSON.
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier="reader",
                                  protocol=aiomqtt.ProtocolVersion.V5) as cl:
            await cl.subscribe("dev/d1/sys/info")
            m = await asyncio.wait_for(anext(aiter(cl.messages)), 5)
            assert m.retain and json.loads(m.payload) == {"fw": "test", "impl": "micropython"}
            props = dict(m.properties.UserProperty)
            assert props["peer_node"] == "d1" and props["link_id"] == "mqtt:d1"
            assert props["generation"] == "1" and props["origin_kind"] == "link"
        b.stop()
        await task
        dev.kill()
    asyncio.run(main())
