"""The bridge's broker connection for device link frames: MQTT 3.1.1 at QoS 0
as an asyncio Protocol of our own.

Why not paho-mqtt or aiomqtt on this path: every device frame crosses it,
and both clients spend more per message than the rest of the bridge can
afford. paho reads a packet with three or more ``recv`` calls (its first
byte, each byte of its length, its body) and builds an ``MQTTMessage`` and
its topic matching for each; aiomqtt adds a task, an ``asyncio.wait`` and an
event-loop turn per message on top (BENCHMARKS.md section 4 measures paho's
Client beside this one in one run). Here the event loop hands whole socket reads (up to
256 KiB) to :meth:`Connection.data_received`, which splits them into packets
in one loop and gives each PUBLISH straight to ``on_message(topic,
payload)``; publishes made in one loop turn leave in one write. The bridge
needs only what a QoS 0 subscriber needs: CONNECT (with a retained will),
SUBSCRIBE/UNSUBSCRIBE in batches, PUBLISH, PINGREQ and DISCONNECT, whose
packets the device's transport already builds (edgebus/link/mqtt.py). The
mirror, which needs MQTT 5 user properties, keeps aiomqtt on a connection of
its own.

Under backpressure reading pauses at once, mid-read if need be (the rest of
that read waits here, the rest of the stream in TCP and the broker) and
resumes when the links' queues drain. A hostile broker or publisher gets
nowhere: a packet longer than MAX_PACKET is skipped unread (``on_oversize``
names its topic), and a malformed one ends the connection with the reason.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Iterable

from edgebus.compat import wait_for
from edgebus.link.mqtt import CONNACK_CODES, connect_packet, packet, string

if TYPE_CHECKING:
    from ssl import SSLContext

    OnMessage = Callable[[str, bytes], Any]  # (topic, payload)
    OnOversize = Callable[[str, int], Any]  # (topic, packet length)

# Topics per SUBSCRIBE or UNSUBSCRIBE packet: a shard's thousands of device
# topics go in a few packets of ~15 KB each, acknowledged one by one.
SUB_BATCH = 500
# PUBLISH packets handed on per event-loop turn at most: past it the rest of
# the read waits for the next turn, so the links (and everything else on the
# loop) run between the parts of a large read.
READ_BATCH = 1024
# The longest packet read: a device frame is ~1 KiB (frame.MAX_LEN); longer
# PUBLISHes are skipped unread, so no party can make the bridge buffer the
# 256 MiB an MQTT length allows.
MAX_PACKET = 256 * 1024
PINGREQ = b"\xc0\x00"
DISCONNECT = b"\xe0\x00"

# What the connection says when the broker closes it (MqttLinks adds a hint
# when that happens before the broker answered).
LOST = "connection to the broker lost"


class MqttError(OSError):
    """The broker refused or broke the connection."""


class _Acks:
    """The packets of one (un)subscription: ``done(refused topics)`` is called
    once the broker acknowledged them all."""

    def __init__(self, done: Callable[[list[str]], Any]) -> None:
        self.pids: set[int] = set()
        self.refused: list[str] = []
        self.done = done


class Connection(asyncio.Protocol):
    """One broker connection; open it with :func:`connect`. It subscribes on
    CONNACK, so a connection is only handed out subscribed; :meth:`subscribe`
    and :meth:`unsubscribe` change that while it runs."""

    def __init__(
        self,
        client_id: str,
        on_message: OnMessage,
        topics: Iterable[str],
        keepalive: int,
        will: tuple[str, bytes] | None = None,
        user: str | None = None,
        password: str | None = None,
        on_oversize: OnOversize | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.on_message = on_message
        self.on_oversize = on_oversize
        self.topics = set(topics)  # subscribed (or being subscribed) now
        self.keepalive = keepalive
        self._hello = connect_packet(client_id, keepalive, will, user, password)
        self._acks: dict[int, tuple[_Acks, list[str]]] = {}  # packet id -> _Acks, topics
        self._pid = 0
        self.closed = self.loop.create_future()  # result: why it ended (None: by us)
        self.ready = self.loop.create_future()  # CONNACK and SUBACK both accepted
        self.connected = False  # CONNACK accepted
        self.received = 0  # PUBLISH packets handed to on_message
        self.transport: asyncio.Transport | None = None
        self.reading = True  # the transport reads (paused: under backpressure)
        self.writing = False  # the transport's buffer is full: publish() waits
        self._drained = asyncio.Event()
        self._drained.set()
        # Bytes read and not yet handed on: a packet's first part, or what
        # followed when reading paused mid-read.
        self._rest = b""
        self._skip = 0  # bytes of an oversized packet still to pass over
        self._later = False  # the rest of a read is handed on next turn (READ_BATCH)
        self._out: list[bytes] = []  # packets of this loop turn, written together
        self._last_in = self._last_out = self.loop.time()
        self._ping = 0.0  # when the unanswered PINGREQ went, else 0
        self._misc: asyncio.Task[None] | None = None

    # -- asyncio.Protocol ------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self._hello)
        self._misc = self.loop.create_task(self._keepalive())

    def data_received(self, data: bytes) -> None:
        self._last_in = self.loop.time()
        if self._skip:
            n = min(self._skip, len(data))
            self._skip -= n
            data = data[n:]
        if self._rest:
            data = self._rest + data
            self._rest = b""
        if data:
            self._take(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._drained.set()
        self._end(MqttError(LOST + (" (%s)" % exc if exc else "")))

    def pause_writing(self) -> None:
        self.writing = True
        self._drained.clear()

    def resume_writing(self) -> None:
        self.writing = False
        self._drained.set()

    # -- reading ---------------------------------------------------------------
    def _take(self, data: bytes) -> None:
        """Hand on every whole packet of ``data``; keep the rest for later.
        The hot loop of the bridge's intake: a PUBLISH costs one slice for its
        topic, one decode and one for its payload."""
        n = len(data)
        i = 0
        on_message = self.on_message
        batch = READ_BATCH
        while i < n and self.reading and batch:
            h = data[i]
            j = i + 1
            length = shift = 0
            while j < n:
                b = data[j]
                j += 1
                length |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 21:
                    self._fail("a packet length of more than 4 bytes")
                    return
            else:
                break  # the length is not all here yet
            end = j + length
            if length > MAX_PACKET:
                if not self._oversized(h, data, j, end):
                    break  # its topic is not all here yet
                i = min(end, n)
                continue
            if end > n:
                break
            if h >> 4 == 3:  # PUBLISH
                if h & 0x06:
                    self._fail("a PUBLISH at QoS %d on QoS 0 subscriptions" % ((h >> 1) & 3))
                    return
                t = j + 2 + ((data[j] << 8) | data[j + 1])
                try:
                    topic = data[j + 2 : t].decode()
                except UnicodeDecodeError:
                    self._fail("a topic that is not UTF-8")
                    return
                self.received += 1
                batch -= 1
                on_message(topic, data[t:end])
            elif not self._control(h, data[j:end]):
                return
            i = end
        if i < n:
            self._rest = data[i:]
            if not batch and self.reading and not self._later and self.transport is not None:
                self._later = True
                self.transport.pause_reading()  # the rest of this read comes first
                self.loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._later = False
        if self.reading and self.transport is not None:
            self.transport.resume_reading()
            self._resume()

    def _oversized(self, h: int, data: bytes, j: int, end: int) -> bool:
        """A packet longer than MAX_PACKET: a PUBLISH is passed over unread
        once its topic is here (False until then), anything else ends the
        connection."""
        if h >> 4 != 3:
            self._fail("a packet of %d bytes (type %d)" % (end - j, h >> 4))
            return True
        if len(data) < j + 2 or len(data) < j + 2 + ((data[j] << 8) | data[j + 1]):
            return False
        self._skip = max(0, end - len(data))
        if self.on_oversize is not None:
            topic = data[j + 2 : j + 2 + ((data[j] << 8) | data[j + 1])]
            self.on_oversize(topic.decode(errors="replace"), end - j)
        return True

    def _control(self, h: int, body: bytes) -> bool:
        """A packet other than PUBLISH; False if it ended the connection."""
        kind = h >> 4
        if kind == 2:  # CONNACK
            if len(body) < 2:
                return self._fail("a CONNACK of %d bytes" % len(body))
            if body[1]:
                self._end(
                    MqttError(
                        "broker refused the connection: %s" % CONNACK_CODES.get(body[1], body[1])
                    )
                )
                self._abort()
                return False
            self.connected = True
            # (Re)subscribe on every CONNACK: with a clean session the broker
            # keeps no subscriptions of ours across connections.
            self._send(False, sorted(self.topics), self._subscribed)
        elif kind in (9, 11):  # SUBACK, UNSUBACK
            if len(body) < 2:
                return self._fail(
                    "a %s of %d bytes" % ("SUBACK" if kind == 9 else "UNSUBACK", len(body))
                )
            self._acked((body[0] << 8) | body[1], body[2:] if kind == 9 else b"")
        elif kind == 13:  # PINGRESP
            self._ping = 0.0
        else:
            return self._fail("an unexpected packet (type %d)" % kind)
        return True

    def _fail(self, what: str) -> bool:
        """The broker sent something no MQTT 3.1.1 broker sends: end here."""
        self._end(MqttError("protocol error: the broker sent %s" % what))
        self._abort()
        return False

    # -- subscriptions ---------------------------------------------------------
    def _subscribed(self, refused: list[str]) -> None:
        if refused:
            self._end(MqttError("broker refused a subscription to %s" % ", ".join(refused)))
            self._abort()
        elif not self.ready.done():
            # Hold the frames until the caller has somewhere to put them.
            self.pause_reading()
            self.ready.set_result(None)

    def _send(self, unsub: bool, topics: list[str], done: Callable[[list[str]], Any]) -> None:
        """(UN)SUBSCRIBE topics (QoS 0) in packets of SUB_BATCH; done(refused)
        once every packet is acknowledged."""
        if not topics:
            done([])
            return
        acks = _Acks(done)
        for i in range(0, len(topics), SUB_BATCH):
            batch = topics[i : i + SUB_BATCH]
            self._pid = self._pid % 0xFFFF + 1
            body = self._pid.to_bytes(2, "big")
            if unsub:
                body += b"".join(string(t) for t in batch)
            else:
                body += b"".join(string(t) + b"\x00" for t in batch)
            self._write(packet(0xA2 if unsub else 0x82, body))
            acks.pids.add(self._pid)
            self._acks[self._pid] = (acks, batch)

    def _acked(self, pid: int, codes: bytes) -> None:
        entry = self._acks.pop(pid, None)
        if entry is None:
            return
        acks, batch = entry
        acks.refused += [t for t, c in zip(batch, codes) if c & 0x80]
        acks.pids.discard(pid)
        if not acks.pids:
            acks.done(acks.refused)

    # -- writing and keepalive -------------------------------------------------
    def _write(self, data: bytes) -> None:
        if not self._out:
            self.loop.call_soon(self._flush)
        self._out.append(data)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and out:
            self.transport.write(b"".join(out))
            self._last_out = self.loop.time()

    async def _keepalive(self) -> None:
        """A PINGREQ after keepalive/2 s without a packet in one direction (the
        broker must hear from us, and we must know it is there); a broker
        that leaves it unanswered keepalive/2 s more is gone (overloaded, or
        a half-open connection)."""
        half = self.keepalive / 2
        while not self.closed.done():
            await asyncio.sleep(min(1.0, half))
            now = self.loop.time()
            if self._ping:
                if now - self._ping >= half:
                    self._end(MqttError(LOST + " (no answer to a PINGREQ in %g s)" % half))
                    self._abort()
            elif now - min(self._last_in, self._last_out) >= half and self.connected:
                self._ping = now
                self._write(PINGREQ)

    def _end(self, why: MqttError | None) -> None:
        if not self.closed.done():
            self.closed.set_result(why)
        if not self.ready.done():
            self.ready.set_exception(why or MqttError("connection closed"))
            self.ready.exception()  # retrieved: connect() may be gone already
        if self._misc is not None and self._misc is not asyncio.current_task():
            self._misc.cancel()

    def _abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # -- using it --------------------------------------------------------------
    async def publish(self, topic: str, payload: bytes, retain: bool = False) -> None:
        """Publish at QoS 0; waits only while the socket's buffer is full."""
        if self.closed.done() or self.transport is None:
            raise MqttError("MQTT connection closed")
        self._write(packet(0x31 if retain else 0x30, string(topic) + payload))
        if self.writing:
            await self._drained.wait()

    def publish_nowait(self, topic: str, payload: bytes) -> bool:
        """Publish at QoS 0 now, unless the socket's buffer is full: False."""
        if self.closed.done() or self.transport is None:
            raise MqttError("MQTT connection closed")
        if self.writing:
            return False
        self._write(packet(0x30, string(topic) + payload))
        return True

    def pause_reading(self) -> None:
        if self.reading:
            self.reading = False
            if self.transport is not None:
                self.transport.pause_reading()

    def resume_reading(self) -> None:
        if not self.reading and self.transport is not None and not self.closed.done():
            self.reading = True
            self.transport.resume_reading()
            if self._rest:  # what was read before the pause comes first
                self.loop.call_soon(self._resume)

    def _resume(self) -> None:
        if self.reading and self._rest:
            data, self._rest = self._rest, b""
            self._take(data)

    async def subscribe(self, topics: list[str]) -> list[str]:
        """Subscribe to more topics now; the ones the broker refused."""
        self.topics.update(topics)
        return await self._change(False, topics)

    async def unsubscribe(self, topics: list[str]) -> None:
        """Drop subscriptions; returns once the broker acknowledged it."""
        self.topics.difference_update(topics)
        await self._change(True, topics)

    async def _change(self, unsub: bool, topics: list[str]) -> list[str]:
        if self.closed.done():
            raise MqttError("MQTT connection closed")
        fut = self.loop.create_future()

        def done(refused: list[str]) -> None:
            if not fut.done():
                fut.set_result(refused)

        self._send(unsub, sorted(topics), done)
        # The connection may end first: then the next one subscribes afresh.
        await asyncio.wait([fut, self.closed], return_when=asyncio.FIRST_COMPLETED)
        if not fut.done():
            raise MqttError("MQTT connection closed")
        return fut.result()

    def close(self, goodbye: tuple[str, bytes] | None = None) -> None:
        """DISCONNECT and close (the broker then drops our last will).
        ``goodbye`` (topic, payload): published retained just before, if the
        connection is still up, to say what the will would have said."""
        self._end(None)
        t = self.transport
        if t is None:
            return
        if self.connected:
            if goodbye is not None:
                self._out.append(packet(0x31, string(goodbye[0]) + goodbye[1]))
            self._out.append(DISCONNECT)
        self._flush()
        t.close()  # after the buffer is written


async def connect(
    host: str,
    port: int,
    client_id: str,
    on_message: OnMessage,
    topics: Iterable[str],
    username: str | None = None,
    password: str | None = None,
    ssl: SSLContext | None = None,
    keepalive: int = 30,
    timeout: float = 10,
    will: tuple[str, bytes] | None = None,
    on_oversize: OnOversize | None = None,
) -> Connection:
    """A Connection subscribed to ``topics`` (QoS 0), its reading paused:
    call ``resume_reading()`` once ``on_message`` can take messages.
    ``will`` (topic, payload): the last will, retained, QoS 0;
    ``on_oversize(topic, length)``: a PUBLISH longer than MAX_PACKET, skipped.
    MqttError or OSError if the broker cannot be reached, refuses the client
    or a subscription."""
    conn = Connection(
        client_id, on_message, topics, keepalive, will, username, password, on_oversize
    )
    loop = conn.loop
    try:
        await wait_for(
            loop.create_connection(
                lambda: conn, host, port, ssl=ssl, server_hostname=host if ssl else None
            ),
            timeout,
        )
    except asyncio.TimeoutError:
        raise MqttError("no connection to %s:%d within %g s" % (host, port, timeout)) from None
    try:
        await wait_for(asyncio.shield(conn.ready), timeout)
    except asyncio.TimeoutError:
        conn.close()
        raise MqttError("no CONNACK/SUBACK from the broker within %g s" % timeout) from None
    except BaseException:
        conn.close()
        raise
    return conn
