"""MQTT links with a real mosquitto (started on a free loopback port): the
device side runs edgebus.link.mqtt under the real micropython binary, the
bridge side paho-mqtt on the event loop (bridge/links/mqtt_conn.py) for the frames
and aiomqtt for the mirror."""

import asyncio
import json
import logging
import os
import subprocess
import threading

import aiomqtt
import paho.mqtt.client as paho
import pytest

from dev.broker import Mosquitto
from dev.harness.bridge import mqtt_config
from dev.harness.process import python
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.bridge.links import mqtt_conn, mqtt_transport, quota
from edgebus.bridge.telemetry.flow import WINDOW_MAX
from edgebus.link import frame, seal
from tests.conftest import until

DEVICE_HEAP = "192K"  # core + link + MQTT transport on the 64-bit unix port


@pytest.fixture
def device(link_device):
    return lambda port, key, count, node="d1": link_device(
        "mqtt:127.0.0.1:%d" % port, key, count, node, heap=DEVICE_HEAP
    )


def _bridge_cfg(tmp_path, port, mirror=()):
    return mqtt_config(
        tmp_path / "state",
        port,
        {"d1": "k1"},
        {"node": "gw"},
        client_id="bridge-test",
        mirror=list(mirror),
    )


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
        # Sealed by default over MQTT: encrypted (the device's AES is cryptolib's
        # ECB on this port), and the messages carry bare bodies (no COBS, no CRC).
        assert seal.encrypted(link) and b.mqtt.transports["d1"].bare
        assert link.counters.get("frames_in", 0) > count and not link.counters.get("forged")
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
        broker.stop()  # a crash: no goodbye to anyone
        await asyncio.sleep(0.7)
        broker.start()
        got = []
        while True:
            m = await asyncio.wait_for(sub.recv(), 20)
            got.append(m)
            if m.payload == count - 1:
                break
        payloads = [m.payload for m in got]
        assert len(set(payloads)) == len(payloads)  # no duplicate
        assert payloads == sorted(payloads)  # in order
        seqs = [m.origin.extra["seq"] for m in got]
        assert len(got) + link.counters.get("gaps", 0) == count  # every loss is a counted gap
        assert link.counters.get("gaps", 0) > 0  # the outage did lose some
        assert link.generation == 1 and b.mqtt.connects >= 2  # same device boot, reconnected
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
        async with aiomqtt.Client(
            "127.0.0.1", broker.port, identifier="reader", protocol=aiomqtt.ProtocolVersion.V5
        ) as cl:
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


def _publish_all(port, topic, payloads):
    """Publish with a plain paho client (its own thread), QoS 0, then leave."""
    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="bp-pub")
    c.connect("127.0.0.1", port)
    c.loop_start()
    try:
        for p in payloads:
            info = c.publish(topic, p, 0)
        info.wait_for_publish(10)
    finally:
        c.disconnect()
        c.loop_stop()


def test_reading_pauses_under_backpressure_and_nothing_is_lost(broker, monkeypatch):
    monkeypatch.setattr(mqtt_transport, "HIGH", 50)
    n = 3000
    bodies = [b"frame %d" % i for i in range(n)]

    async def main():
        box = {}
        conn = await mqtt_conn.connect(
            "127.0.0.1",
            broker.port,
            "bp-test",
            lambda topic, payload: box["t"].deliver(payload),
            ("edgebus/d1/up",),
        )
        assert not conn.reading  # paused until there is a transport
        backlog = mqtt_transport.Backlog(conn)
        t = box["t"] = mqtt_transport.DeviceTransport(conn, "edgebus/d1/down", 256, backlog)
        conn.resume_reading()
        done = threading.Event()
        pub = asyncio.get_running_loop().run_in_executor(
            None,
            lambda: (
                _publish_all(broker.port, "edgebus/d1/up", [frame.encode(b, 256) for b in bodies]),
                done.set(),
            ),
        )
        # Nobody takes the frames: the connection stops reading at HIGH and
        # stays stopped while the rest waits in the broker and TCP buffers.
        await until(lambda: not conn.reading, 10)
        held = len(t.pending)
        assert backlog.paused and held >= mqtt_transport.HIGH
        await asyncio.sleep(0.3)
        assert len(t.pending) == held  # nothing more read
        got = []
        while len(got) < n:
            b = await asyncio.wait_for(t.recv(), 10)
            assert len(b) <= mqtt_transport.BATCH  # a turn, then the other links'
            got += b
        await pub
        assert done.is_set()
        assert got == bodies  # all of them, in order
        assert t.frames.oversize == 0 and t.frames.crc_errors == 0 and t.frames.dropped == 0
        assert conn.reading and not backlog.paused and backlog.queued == 0
        conn.close()
        assert conn.closed.done() and conn.closed.result() is None

    asyncio.run(main())


def test_without_a_log_a_fast_device_is_paced_and_nothing_is_sent_twice(tmp_path, broker):
    """A bridge without a log gives each device a window all the same (one
    with a log gives the log's): a device sending as fast as it can then
    never has more on its way than its share of the bridge's queue, where
    frames past the share would be dropped and sent again."""
    n = 2000

    async def main():
        b = Bridge(mqtt_config(tmp_path / "state", broker.port, {"fast": "k"}, {"node": "gw"}))
        task = asyncio.create_task(b.run())
        sub = b.bus.connect().subscribe("dev/fast/sensor/v", queue_len=n)
        dev = subprocess.Popen(
            python("dev.bench.bridge_device", "127.0.0.1", broker.port, "fast", "k", n, 0, n, 0),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            got = [(await asyncio.wait_for(sub.recv(), 30)).payload["i"] for _ in range(n)]
            loop = asyncio.get_running_loop()
            while not (line := await loop.run_in_executor(None, dev.stdout.readline)).startswith(
                "{"
            ):
                assert line, "the device ended without its report"
        finally:
            dev.kill()
            dev.wait()
            dev.stdout.close()
        c = b.links["mqtt:fast"].counters
        b.stop()
        await task
        return got, json.loads(line), c

    got, said, c = asyncio.run(main())
    assert got == list(range(n))
    assert said["window"] == WINDOW_MAX and said["retransmitted"] == 0, said
    assert c.get("over_share", 0) == 0 and mqtt_transport.SHARE >= WINDOW_MAX, c


def test_a_flooding_device_gets_its_share_and_never_stops_the_others(broker):
    """One device's frames past SHARE (nobody takes them) are dropped and
    counted on its link (over_share); reading goes on, and another device's
    frames arrive meanwhile."""
    n = mqtt_transport.SHARE + 500

    async def main():
        ts = {}
        counted = []
        conn = await mqtt_conn.connect(
            "127.0.0.1",
            broker.port,
            "share-test",
            lambda topic, payload: ts[topic].deliver(payload),
            ("edgebus/flood/up", "edgebus/calm/up"),
        )
        backlog = mqtt_transport.Backlog(conn)
        for node in ("flood", "calm"):
            ts["edgebus/%s/up" % node] = mqtt_transport.DeviceTransport(
                conn, "edgebus/%s/down" % node, 256, backlog, counted.append
            )
        flood, calm = ts["edgebus/flood/up"], ts["edgebus/calm/up"]
        conn.resume_reading()
        await asyncio.get_running_loop().run_in_executor(
            None,
            _publish_all,
            broker.port,
            "edgebus/flood/up",
            [frame.encode(b"f%d" % i, 256) for i in range(n)],
        )
        await until(lambda: len(flood.pending) + flood.frames.dropped == n, 10)
        assert len(flood.pending) == mqtt_transport.SHARE and flood.frames.dropped == 500
        assert counted == ["over_share"] * 500 and conn.reading
        await asyncio.get_running_loop().run_in_executor(
            None, _publish_all, broker.port, "edgebus/calm/up", [frame.encode(b"c", 256)]
        )
        assert await asyncio.wait_for(calm.recv(), 10) == [b"c"]
        conn.close()

    asyncio.run(main())


def test_a_device_that_floods_is_muted_for_a_while_then_heard_again(tmp_path, broker, monkeypatch):
    """A burst far past what an honest device sends unacknowledged (a
    window) mutes that device (bridge/links/quota.py Mutes): the bridge subscribes
    to each device but its frames, drops what was on its way unread
    (muted_dropped), and once the mute ends takes the wildcard again and
    hears the device."""
    monkeypatch.setattr(quota, "MUTE_FIRST", 3.0)
    flood = [frame.encode(b"\x00flood %d" % i, 1024) for i in range(6000)]

    async def main():
        b = Bridge(_bridge_cfg(tmp_path, broker.port))
        task = asyncio.create_task(b.run())
        await until(lambda: b.mqtt is not None and b.mqtt.stats()["connected"], 10)
        assert b.mqtt.stats()["subscriptions"] == 2  # <prefix>/+/up and /state
        link = b.links["mqtt:d1"]
        await asyncio.to_thread(_publish_all, broker.port, "edgebus/d1/up", flood)
        await until(lambda: link.counters.get("muted"), 10)
        # the switch from the wildcard to each device's topics follows the mute
        await until(lambda: "edgebus/+/up" not in b.mqtt.subscribed(), 3)
        muted = (b.mqtt.stats()["muted"], b.mqtt.subscribed())
        await until(lambda: b.mqtt.stats()["muted"] == [], 10)
        await until(lambda: b.mqtt.stats()["subscriptions"] == 2, 10)
        t = b.mqtt.transports["d1"]
        n = t.frames.frames
        await asyncio.to_thread(_publish_all, broker.port, "edgebus/d1/up", flood[:1])
        await until(lambda: t.frames.frames > n, 10)
        b.stop()
        await task
        return muted, dict(link.counters)

    (muted, topics), counters = asyncio.run(main())
    assert muted == ["d1"]
    assert "edgebus/d1/state" in topics and "edgebus/d1/up" not in topics
    assert "edgebus/+/up" not in topics
    assert counters["muted"] == 1
    # every message counted: taken, past its share, or dropped unread once muted
    assert counters.get("muted_dropped", 0) > 0, counters


def test_with_mute_off_a_flood_is_held_to_its_share_and_never_muted(tmp_path, broker):
    """[quota] mute = false (a benchmark's device sending without a window):
    the same flood is taken up to its share, the rest counted, and the
    bridge keeps its wildcard subscription; nothing is muted."""
    flood = [frame.encode(b"\x00flood %d" % i, 1024) for i in range(6000)]

    async def main():
        cfg = _bridge_cfg(tmp_path, broker.port)
        cfg.quota_mute = False
        b = Bridge(cfg)
        task = asyncio.create_task(b.run())
        await until(lambda: b.mqtt is not None and b.mqtt.stats()["connected"], 10)
        link = b.links["mqtt:d1"]
        t = b.mqtt.transports["d1"]
        await asyncio.to_thread(_publish_all, broker.port, "edgebus/d1/up", flood)
        await until(lambda: t.frames.frames + link.counters.get("over_share", 0) >= 6000, 20)
        await asyncio.sleep(2 * quota.MUTE_CHECK)  # checks that would have muted it
        state = (b.mqtt.stats()["muted"], b.mqtt.subscribed(), dict(link.counters))
        b.stop()
        await task
        return state

    muted, topics, counters = asyncio.run(main())
    assert muted == [] and "edgebus/+/up" in topics
    assert "muted" not in counters and "muted_dropped" not in counters, counters


def test_oversized_messages_count_as_oversize_and_damaged_ones_as_crc_errors(tmp_path, broker):
    """docs/protocol.md 1: a message holding a body past max_len (a frame
    too long, one that decodes too long, a bare body too long) is counted as
    ``oversize``, a damaged one as ``crc_errors``, as a stream's reader
    counts them; neither reaches the link."""
    damaged = bytearray(frame.encode(b"hello", 1024))
    damaged[2] ^= 0x01
    messages = [
        frame.encode(b"x" * 2000, 4096),  # longer than any frame of 1024
        frame.encode(bytes(1025), 2048),  # as short as one, decoding to 1025
        b"\x00" + b"x" * 1025,  # a bare body (sealed sessions) too long
        bytes(damaged),
    ]

    async def main():
        b = Bridge(_bridge_cfg(tmp_path, broker.port))
        task = asyncio.create_task(b.run())
        await until(lambda: b.mqtt is not None and "d1" in b.mqtt.transports, 10)
        await until(lambda: b.mqtt.stats()["connected"], 10)
        await asyncio.to_thread(_publish_all, broker.port, "edgebus/d1/up", messages)
        link = b.links["mqtt:d1"]

        def counted():
            t = b.stats([link.link_id])["links"][link.link_id].get("transport") or {}
            return t if t.get("oversize", 0) + t.get("crc_errors", 0) >= len(messages) else None

        t = await until(counted, 10)
        b.stop()
        await task
        return t, link.counters

    t, counters = asyncio.run(main())
    assert (t["oversize"], t["crc_errors"], t["frames"]) == (3, 1, 0), t
    assert counters.get("frames_in", 0) == 0, counters


@pytest.mark.mosquitto  # its own broker, with a password file
def test_refused_credentials_are_logged_and_retried_then_accepted(tmp_path, caplog):
    b = Mosquitto()
    # Readable by mosquitto once it drops root for its own user.
    os.chmod(b.dir, 0o755)
    pwfile = os.path.join(b.dir, "passwd")
    subprocess.run(["mosquitto_passwd", "-b", "-c", pwfile, "bridge", "right"], check=True)
    os.chmod(pwfile, 0o644)
    with open(b.conf) as f:
        conf = f.read().replace("allow_anonymous true", "allow_anonymous false")
    with open(b.conf, "w") as f:
        f.write(conf + "password_file %s\n" % pwfile)
    b.start()
    try:

        def cfg(password):
            return bridge_config.parse(
                {
                    "bridge": {"node": "gw", "state_dir": str(tmp_path / "state")},
                    "mqtt": {
                        "url": "mqtt://127.0.0.1:%d" % b.port,
                        "client_id": "bridge-auth",
                        "username": "bridge",
                        "password": password,
                        "devices": [{"node": "d1", "key": "k1"}],
                    },
                }
            )

        async def run(password, cond):
            br = Bridge(cfg(password))
            task = asyncio.create_task(br.run())
            try:
                await until(lambda: cond(br), 10)
            finally:
                br.stop()
                await task
            return br

        caplog.set_level(logging.DEBUG, "edgebus.bridge")

        def refused():
            return [r for r in caplog.records if "refused the connection" in r.getMessage()]

        br = asyncio.run(run("wrong", lambda br: len(refused()) >= 2))
        assert br.mqtt.connects == 0 and not br.mqtt.connected
        said = refused()[0].getMessage()
        assert "not authorised" in said or "bad user name or password" in said, said
        # Retried, and said once: the same words again only at debug (ticker.Outage).
        assert [r.levelname for r in refused()][:2] == ["WARNING", "DEBUG"]
        assert "refused the connection" in br.mqtt.stats()["last_error"]
        br = asyncio.run(run("right", lambda br: br.mqtt.connected))
        assert br.mqtt.connects == 1
    finally:
        b.close()


def test_a_device_provisioned_into_the_keystore_links_without_a_restart(tmp_path, broker, device):
    """[mqtt] keystore = true: a device the configuration does not list links
    from its first frame once `edgebus keys new` put its key in the keystore,
    the bridge running all along; one without a key file never does."""
    from edgebus.bridge.keystore import KeyStore

    keys = tmp_path / "keys"
    cfg = bridge_config.parse(
        {
            "bridge": {
                "node": "gw",
                "state_dir": str(tmp_path / "state"),
                "heartbeat": 0.5,
                "keys": str(keys),
            },
            "mqtt": {
                "url": "mqtt://127.0.0.1:%d" % broker.port,
                "client_id": "bridge-ks",
                "keystore": True,
            },
        }
    )

    async def main():
        b = Bridge(cfg)
        task = asyncio.create_task(b.run())
        sub = b.bus.connect().subscribe("dev/+/sensor/count", queue_len=64)
        await until(lambda: b.mqtt.connected, 10)
        stranger = device(broker.port, "k-stranger", 5, node="stranger")
        await until(lambda: b.mqtt.unknown >= 1, 15)  # its HELLO, refused
        assert "mqtt:stranger" not in b.links
        KeyStore(str(keys)).write("late1", {"key": "k-late", "since": 0})  # as keys new does
        dev = device(broker.port, "k-late", 5, node="late1")
        got = [await asyncio.wait_for(sub.recv(), 20) for _ in range(5)]
        assert {m.topic[1] for m in got} == {"late1"} and [m.payload for m in got] == list(range(5))
        assert b.links["mqtt:late1"].status == "up" and "mqtt:stranger" not in b.links
        stranger.kill()
        dev.kill()
        b.stop()
        await task

    asyncio.run(main())


def test_the_bridge_reports_messages_the_broker_dropped(tmp_path, caplog):
    """Mosquitto drops QoS 0 messages to a client that does not read past
    max_queued_messages; frames lost there cost the links retransmissions
    and handshakes, so the bridge reads the broker's count ($SYS) and says so:
    in its stats (status, /metrics) and in a warning naming the setting."""
    import socket

    from edgebus.tools.commands.status import render

    caplog.set_level("WARNING", "edgebus.bridge")
    with Mosquitto(options=["max_queued_messages 5", "sys_interval 1"]) as broker:
        # A subscriber that never reads: its socket fills, then the broker drops.
        sink = socket.create_connection(("127.0.0.1", broker.port))
        sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        cid = b"slow-sink"
        sink.sendall(
            b"\x10"
            + bytes([12 + len(cid)])
            + b"\x00\x04MQTT\x04\x02\x00\x3c"
            + len(cid).to_bytes(2, "big")
            + cid
        )  # CONNECT, clean session
        assert sink.recv(4)[:2] == b"\x20\x02"  # CONNACK
        sink.sendall(b"\x82\x08\x00\x01\x00\x03s/x\x00")  # SUBSCRIBE s/x QoS 0
        assert sink.recv(5)[:1] == b"\x90"  # SUBACK
        cfg = bridge_config.parse(
            {
                "bridge": {
                    "state_dir": str(tmp_path / "state"),
                    "socket": str(tmp_path / "b.sock"),
                },
                "mqtt": {"url": "mqtt://127.0.0.1:%d" % broker.port, "devices": []},
            }
        )

        async def main():
            b = Bridge(cfg)
            task = asyncio.create_task(b.run())
            try:
                await until(lambda: b.mqtt.connected and b.mqtt.drops.count is not None, 15)
                pub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="flood")
                pub.connect("127.0.0.1", broker.port)
                pub.loop_start()
                try:
                    for _ in range(400):
                        pub.publish("s/x", bytes(65536))
                    await until(lambda: (b.mqtt.drops.count or 0) > 0, 20)
                finally:
                    pub.disconnect()
                    pub.loop_stop()
                return b.stats()
            finally:
                b.stop()
                await task

        st = asyncio.run(main())
        sink.close()
    assert st["mqtt"]["broker_dropped"] > 0
    assert "broker dropped %d" % st["mqtt"]["broker_dropped"] in render(st)
    warned = [r.getMessage() for r in caplog.records if "broker dropped" in r.getMessage()]
    assert warned and "max_queued_messages" in warned[0], warned
