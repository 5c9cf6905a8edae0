"""The bridge's own MQTT client (bridge/links/mqtt_conn.py) against a real
mosquitto, and against a stand-in broker where the point is what no real
broker sends (a malformed packet, silence after CONNACK). Its packet reader
is also fed one byte stream split at every point Hypothesis finds: the split
never changes what comes out."""

import asyncio
import socket

import paho.mqtt.client as paho
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dev.broker import Mosquitto
from edgebus.bridge.links import mqtt_conn
from edgebus.link.mqtt import packet, string
from tests.conftest import until

TOPIC = "edgebus/d1/up"


def _publish(port, messages):
    """Publish (topic, payload) pairs with paho, in order, and wait for them."""
    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="conn-test-pub")
    c.connect("127.0.0.1", port)
    c.loop_start()
    try:
        for t, p in messages:
            info = c.publish(t, p, 0)
        info.wait_for_publish(10)
    finally:
        c.disconnect()
        c.loop_stop()


def test_an_oversized_message_is_skipped_unread_and_named_and_the_next_arrives(broker):
    big = b"x" * (mqtt_conn.MAX_PACKET + 100_000)

    async def main():
        got, skipped = [], []
        conn = await mqtt_conn.connect(
            "127.0.0.1",
            broker.port,
            "conn-test",
            lambda t, p: got.append((t, p)),
            [TOPIC],
            on_oversize=lambda t, n: skipped.append((t, n)),
        )
        conn.resume_reading()
        await asyncio.get_running_loop().run_in_executor(
            None, _publish, broker.port, [(TOPIC, b"before"), (TOPIC, big), (TOPIC, b"after")]
        )
        await until(lambda: len(got) == 2, 10)
        assert got == [(TOPIC, b"before"), (TOPIC, b"after")]
        assert skipped == [(TOPIC, 2 + len(TOPIC) + len(big))]
        assert not conn.closed.done()
        conn.close()

    asyncio.run(main())


def test_publishes_reach_the_broker_and_subscriptions_change_while_it_runs(broker):
    async def main():
        got = []
        conn = await mqtt_conn.connect(
            "127.0.0.1", broker.port, "conn-test", lambda t, p: got.append((t, p)), [TOPIC]
        )
        conn.resume_reading()
        assert await conn.subscribe(["edgebus/d2/up"]) == []
        for i in range(300):  # one loop turn: they leave in one write
            await conn.publish("edgebus/d2/up", b"%d" % i)
        await until(lambda: len(got) == 300, 10)
        assert got == [("edgebus/d2/up", b"%d" % i) for i in range(300)]
        await conn.unsubscribe(["edgebus/d2/up"])
        await conn.publish("edgebus/d2/up", b"unheard")
        await conn.publish(TOPIC, b"heard")
        await until(lambda: len(got) == 301, 10)
        assert got[-1] == (TOPIC, b"heard")
        conn.close()
        assert conn.closed.result() is None
        with pytest.raises(mqtt_conn.MqttError):
            await conn.publish(TOPIC, b"after close")

    asyncio.run(main())


def test_a_large_read_is_handed_on_a_batch_per_loop_turn():
    """Messages that piled up while reading was paused come in one large
    read; at most READ_BATCH of them go to on_message per event-loop turn,
    so the links run between the parts, and every one arrives in order."""
    n = 4 * mqtt_conn.READ_BATCH

    async def main(port):
        got, seen = [], []
        conn = await mqtt_conn.connect(
            "127.0.0.1", port, "conn-test", lambda t, p: got.append(p), [TOPIC]
        )
        await asyncio.get_running_loop().run_in_executor(
            None, _publish, port, [(TOPIC, b"%d" % i) for i in range(n)]
        )

        async def turns():
            while len(got) < n:
                seen.append(len(got))
                await asyncio.sleep(0)

        watch = asyncio.create_task(turns())
        conn.resume_reading()  # paused by connect() until now
        await until(lambda: len(got) == n, 10)
        await watch
        conn.close()
        return got, [b - a for a, b in zip(seen, seen[1:] + [n])]

    # A queue long enough for the whole burst while the reader is paused.
    with Mosquitto(options=["max_queued_messages 0"]) as broker:
        got, steps = asyncio.run(main(broker.port))
    assert got == [b"%d" % i for i in range(n)]
    assert max(steps) == mqtt_conn.READ_BATCH, steps  # a full batch, then a turn


class StandIn:
    """A stand-in broker on a free loopback port: it answers CONNECT and
    SUBSCRIBE as a broker would, then sends ``then`` and stays silent."""

    def __init__(self, then=b""):
        self.then = then
        self.packets = []

    async def serve(self, r, w):
        try:
            while True:
                h = (await r.readexactly(1))[0]
                n, shift = 0, 0
                while True:
                    b = (await r.readexactly(1))[0]
                    n |= (b & 0x7F) << shift
                    shift += 7
                    if b < 0x80:
                        break
                body = await r.readexactly(n)
                self.packets.append(h >> 4)
                if h >> 4 == 1:
                    w.write(b"\x20\x02\x00\x00")  # CONNACK: accepted
                elif h >> 4 == 8:
                    w.write(b"\x90\x03" + body[:2] + b"\x00" + self.then)  # SUBACK
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()

    async def __aenter__(self):
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()


@pytest.mark.parametrize(
    "then, said",
    [
        (packet(0x34, string(TOPIC) + b"\x00\x01x"), "a PUBLISH at QoS 2"),
        (b"\x30\xff\xff\xff\xff\x7f", "a packet length of more than 4 bytes"),
        (packet(0x30, b"\x00\x02\xff\xfe" + b"x"), "a topic that is not UTF-8"),
        (packet(0x50, b"\x00\x01"), "an unexpected packet (type 5)"),
        (b"\x90" + b"\xff\xff\x7f", "a packet of 2097151 bytes (type 9)"),
    ],
)
def test_a_broker_that_breaks_the_protocol_ends_the_connection_with_the_reason(then, said):
    async def main():
        got = []
        async with StandIn(then) as broker:
            conn = await mqtt_conn.connect(
                "127.0.0.1", broker.port, "conn-test", lambda t, p: got.append(p), [TOPIC]
            )
            conn.resume_reading()
            why = await asyncio.wait_for(conn.closed, 10)
        assert isinstance(why, mqtt_conn.MqttError) and said in str(why), why
        assert got == []  # nothing of it reached a device

    asyncio.run(main())


def test_a_broker_silent_after_connack_is_dropped_within_the_keepalive():
    async def main():
        async with StandIn() as broker:
            conn = await mqtt_conn.connect(
                "127.0.0.1", broker.port, "conn-test", lambda t, p: None, [TOPIC], keepalive=2
            )
            conn.resume_reading()
            why = await asyncio.wait_for(conn.closed, 10)
            assert broker.packets[:2] == [1, 8] and 12 in broker.packets  # PINGREQ sent
        assert str(why).startswith(mqtt_conn.LOST) and "PINGREQ" in str(why), why

    asyncio.run(main())


def test_an_unreachable_broker_is_an_oserror():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there

    async def main():
        with pytest.raises(OSError):
            await mqtt_conn.connect("127.0.0.1", port, "conn-test", lambda t, p: None, [TOPIC])

    asyncio.run(main())


# The reader alone: a stream of PUBLISHes (and a PINGRESP) split anywhere.
_messages = st.lists(
    st.tuples(
        st.sampled_from(["edgebus/a/up", "edgebus/bb/up", "é/ü"]),
        st.binary(max_size=300),
    ),
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(_messages, st.lists(st.integers(min_value=1, max_value=64), max_size=40))
def test_the_reader_gives_the_same_messages_however_the_stream_is_split(messages, cuts):
    # A PINGRESP, then a last PUBLISH: it arrives whole only if nothing of
    # the earlier packets was left over or taken from it.
    last = ("edgebus/last/up", b"last")
    stream = b"".join(packet(0x30, string(t) + p) for t, p in messages)
    stream += b"\xd0\x00" + packet(0x30, string(last[0]) + last[1])
    chunks, i = [], 0
    for c in cuts:
        chunks.append(stream[i : i + c])
        i += c
    chunks.append(stream[i:])

    async def main():
        got = []
        conn = mqtt_conn.Connection("reader", lambda t, p: got.append((t, p)), [], 30)
        for c in chunks:
            if c:
                conn.data_received(c)
        assert got == messages + [last] and not conn.closed.done()
        assert conn.received == len(messages) + 1

    asyncio.run(main())
