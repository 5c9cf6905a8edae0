"""Every wait of the device's MQTT transport on its broker has a deadline
(docs/protocol.md, MQTT presence): a stand-in broker on loopback that accepts
TCP and never answers, and one that answers the connect and then falls
silent, each end the connection in bounded time; a broker that answers its
PINGREQs keeps it. Runs on CPython and the real MicroPython."""

import asyncio
from os import urandom

from dev.harness.poll import until
from edgebus.compat import now
from edgebus.link.frame import message
from edgebus.link.mqtt import MqttError, MqttTransport, packet, string
from tests.portable.support import araises, run

CONNACK = b"\x20\x02\x00\x00"
SUBACK = b"\x90\x04\x00\x01\x00\x00"
PINGRESP = b"\xd0\x00"
MPY_HEAP = "256K"  # a server and a client transport in one interpreter
NETWORK = True  # needs sockets: not run on the emulated board, which has no network stack


async def stand_in(serve):
    """A TCP server on a free loopback port running serve(reader, writer) per
    connection: (server, port). MicroPython's sockets cannot say which port
    an ephemeral bind got, so a few random ones are tried."""
    for _ in range(20):
        port = 20000 + (urandom(2)[0] << 8 | urandom(2)[1]) % 40000
        try:
            return await asyncio.start_server(serve, "127.0.0.1", port), port
        except OSError:
            pass
    raise AssertionError("no free port")


async def _packet(r):
    """One MQTT packet (kind, body) from r, or None at the end."""
    try:
        h = (await r.readexactly(1))[0]
        n = (await r.readexactly(1))[0]  # the tests' packets are short
        return h & 0xF0, (await r.readexactly(n) if n else b"")
    except (OSError, EOFError):
        return None


def test_a_broker_that_never_answers_the_connect_is_given_up_in_the_deadline():
    async def main():
        seen = []

        async def mute(r, w):  # takes CONNECT, answers nothing
            seen.append(await _packet(r))
            seen.append(await _packet(r))  # None: the device closed the connection
            w.close()

        srv, port = await stand_in(mute)
        t = MqttTransport("127.0.0.1", port, node="d", connect_timeout=0.4)
        t0 = now()
        e = await araises(MqttError, t.open())
        took = now() - t0
        assert "no CONNACK from 127.0.0.1:%d within 0.4 s" % port in str(e), str(e)
        assert 0.3 < took < 5, took
        for _ in range(100):
            if len(seen) == 2:
                break
            await asyncio.sleep(0.02)
        assert seen[0][0] == 0x10 and seen[1] is None, seen  # CONNECT, then closed
        assert t.closed
        srv.close()

    run(main())


def _broker(answer_pings, log):
    async def serve(r, w):
        while True:
            p = await _packet(r)
            if p is None:
                break
            log.append(p[0])
            if p[0] == 0x10:
                w.write(CONNACK)
            elif p[0] == 0x80:
                w.write(SUBACK)
            elif p[0] == 0xC0 and answer_pings:
                w.write(PINGRESP)
            await w.drain()
        w.close()

    return serve


def test_a_broker_that_falls_silent_ends_the_connection_within_keepalive():
    async def main():
        log = []
        srv, port = await stand_in(_broker(False, log))
        t = await MqttTransport("127.0.0.1", port, node="d", keepalive=1).open()
        t0 = now()
        got = await asyncio.wait_for(t.recv(), 10)
        took = now() - t0
        assert got is None and t.closed and t.stats()["silent"] == 1
        assert 0.8 < took < 5, took  # keepalive/2 quiet, PINGREQ, keepalive/2 more
        assert 0xC0 in log  # it did ask before giving up
        srv.close()

    run(main())


def test_a_broker_that_answers_its_pings_keeps_the_connection():
    async def main():
        log = []
        srv, port = await stand_in(_broker(True, log))
        t = await MqttTransport("127.0.0.1", port, node="d", keepalive=1).open()
        task = asyncio.create_task(t.recv())
        await asyncio.sleep(2.5)  # two and a half keepalives, quiet but answered
        assert not task.done() and not t.closed
        assert log.count(0xC0) >= 3 and t.stats()["silent"] == 0
        t.close()
        assert await asyncio.wait_for(task, 5) is None
        srv.close()

    run(main())


def _publish(topic, payload):
    """A QoS 0 PUBLISH packet (mqtt.packet, so its length may take bytes)."""
    return packet(0x30, string(topic) + payload)


def _feeding(pieces, ended):
    """A stand-in broker that answers the connect and the subscribe, then
    writes ``pieces`` (bytes, or a float: seconds to wait) as they come, and
    answers PINGREQs once they are written; ``ended`` gets True when the
    client has gone."""

    async def serve(r, w):
        while True:
            p = await _packet(r)
            if p is None:
                break
            if p[0] == 0x10:
                w.write(CONNACK)
            elif p[0] == 0x80:
                w.write(SUBACK)
                await w.drain()
                for x in pieces:
                    if type(x) is float:
                        await asyncio.sleep(x)
                    else:
                        w.write(x)
                        await w.drain()
            elif p[0] == 0xC0:
                w.write(PINGRESP)
            await w.drain()
        w.close()
        ended.append(True)

    return serve


def test_packets_in_any_pieces_arrive_whole_and_an_oversized_one_is_dropped_and_counted():
    """Several packets in one write, one in single bytes, one longer than any
    frame (read through, never held), and one split across a keepalive's
    deadline (the wait cancelled mid-packet loses none of it)."""

    async def main():
        down = "edgebus/d/down"
        bodies = [b"\x41\x00\x01one", b"\x41\x00\x02two", b"\x41\x00\x03three", b"\x41\x00\x04four"]
        frames = [_publish(down, message(b)) for b in bodies]
        huge = _publish(down, b"x" * 5000)
        pieces = [frames[0] + frames[1] + huge[:100], huge[100:]]
        pieces += [frames[2][i : i + 1] for i in range(len(frames[2]))]
        pieces += [frames[3][:5], 0.9, frames[3][5:]]
        ended = []
        srv, port = await stand_in(_feeding(pieces, ended))
        t = await MqttTransport("127.0.0.1", port, node="d", keepalive=1, max_len=256).open()
        got = []
        for _ in bodies:
            got += await asyncio.wait_for(t.recv(), 10)
        assert got == bodies, got
        st = t.stats()
        assert st["oversize"] == 1 and st["frames"] == 4 and st["silent"] == 0, st
        t.close()
        await until(lambda: ended)
        srv.close()

    run(main())


def test_a_remaining_length_past_four_bytes_ends_the_connection():
    async def main():
        ended = []
        srv, port = await stand_in(_feeding([b"\x30\xff\xff\xff\xff\x01"], ended))
        t = await MqttTransport("127.0.0.1", port, node="d").open()
        assert await asyncio.wait_for(t.recv(), 10) is None and t.closed
        await until(lambda: ended)
        srv.close()

    run(main())
