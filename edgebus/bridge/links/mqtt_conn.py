"""The bridge's broker connection for device link frames: paho-mqtt's Client
(MQTT 3.1.1, QoS 0) driven by the asyncio event loop, without paho's thread.

This is paho's documented external-loop integration (its
examples/loop_asyncio.py): ``loop.add_reader(sock)`` calls ``loop_read``,
``on_socket_register_write``/``unregister_write`` add and remove a writer
that calls ``loop_write``, and a task calls ``loop_misc`` every second for
the keepalive. The protocol is paho's; this module only adds what the
bridge's batching needs.

Why not aiomqtt on this path: profiling the bridge under a device's burst
(BENCHMARKS.md, section 4) showed aiomqtt spending most of the bridge's CPU
per frame on its own machinery: a task plus ``asyncio.wait`` created to hand
each message over, an event-loop turn per message, MQTT 5 properties parsed
and the message wrapped twice. Here a readable socket is drained in one
event-loop turn (``loop_read`` reads one packet per call, so the reader calls
it until a call brings no message) and every PUBLISH goes straight from
paho's ``on_message`` to ``on_message(topic, payload)``, which appends the
frame to its device's transport; the links take their frames in batches.
Under backpressure the reader is removed (the broker and TCP hold the rest)
and re-added when the queues drain. The mirror, which needs MQTT 5 user
properties, keeps aiomqtt on a connection of its own.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Iterable

import paho.mqtt.client as paho

from edgebus.compat import wait_for

if TYPE_CHECKING:
    from ssl import SSLContext

    from paho.mqtt.properties import Properties
    from paho.mqtt.reasoncodes import ReasonCode

    OnMessage = Callable[[str, bytes | bytearray], Any]  # (topic, payload)

# PUBLISH packets handled per event-loop turn at most, so that the links
# (and everything else on the loop) run between large reads.
READ_BATCH = 1024
# Topics per SUBSCRIBE or UNSUBSCRIBE packet: a shard's thousands of device
# topics go in a few packets of ~15 KB each, acknowledged one by one.
SUB_BATCH = 500


# What the connection says when the broker closes it (MqttLinks adds a hint
# when that happens before the broker answered).
LOST = "connection to the broker lost"


class MqttError(OSError):
    """The broker refused or broke the connection."""


class _Acks:
    """The packets of one (un)subscription: ``done(refused topics)`` is called
    once the broker acknowledged them all."""

    def __init__(self, done: Callable[[list[str]], Any]) -> None:
        self.mids: set[int | None] = set()
        self.refused: list[str] = []
        self.done = done


class Connection:
    """One broker connection; open it with :func:`connect`. Subscriptions are
    made in paho's on_connect, so a connection is only handed out subscribed;
    :meth:`subscribe` and :meth:`unsubscribe` change them while it runs."""

    def __init__(
        self,
        client_id: str,
        on_message: OnMessage,
        topics: Iterable[str],
        keepalive: int,
        will: tuple[str, bytes] | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.on_message = on_message
        self.topics = set(topics)  # subscribed (or being subscribed) now
        self._acks: dict[int | None, tuple[_Acks, list[str]]] = {}  # packet id -> _Acks, topics
        self.closed = self.loop.create_future()  # result: why it ended (None: by us)
        self.ready = self.loop.create_future()  # CONNACK and SUBACK both accepted
        self.received = 0  # PUBLISH packets handed to on_message
        self.sock: Any = None  # paho's socket while connected
        self.reading = False  # the socket is registered with add_reader
        self.writing = False  # ... with add_writer (its buffer was full)
        self._flush_soon = False
        self._drained = asyncio.Event()
        self._drained.set()
        self._misc: asyncio.Task[None] | None = None
        c = self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=paho.MQTTv311,
            clean_session=True,
        )
        c.suppress_exceptions = False  # a bug in a callback surfaces, not a log line
        self.keepalive = keepalive
        c.on_connect = self._on_connect
        c.on_subscribe = self._on_subscribe
        c.on_unsubscribe = self._on_subscribe  # UNSUBACK: the same bookkeeping
        c.on_message = self._on_message
        c.on_disconnect = self._on_disconnect
        if will is not None:  # (topic, payload): retained, QoS 0
            c.will_set(will[0], will[1], 0, retain=True)

    # -- paho callbacks (all run on the event loop) ----------------------------
    def _on_connect(
        self,
        client: paho.Client,
        userdata: Any,
        flags: paho.ConnectFlags,
        reason: ReasonCode,
        properties: Properties | None,
    ) -> None:
        if reason.is_failure:
            self._end(MqttError("broker refused the connection: %s" % reason))
            return
        # (Re)subscribe on every CONNACK: with a clean session the broker
        # keeps no subscriptions of ours across connections.
        try:
            self._send(False, sorted(self.topics), self._subscribed)
        except MqttError as e:
            self._end(e)

    def _subscribed(self, refused: list[str]) -> None:
        if refused:
            self._end(MqttError("broker refused a subscription to %s" % ", ".join(refused)))
        elif not self.ready.done():
            # Hold the frames until the caller has somewhere to put them.
            self.pause_reading()
            self.ready.set_result(None)

    def _send(self, unsub: bool, topics: list[str], done: Callable[[list[str]], Any]) -> None:
        """(UN)SUBSCRIBE topics (QoS 0) in packets of SUB_BATCH; done(refused)
        once every packet is acknowledged."""
        acks = _Acks(done)
        if not topics:
            done([])
            return
        c = self.client
        for i in range(0, len(topics), SUB_BATCH):
            batch = topics[i : i + SUB_BATCH]
            rc, mid = c.unsubscribe(batch) if unsub else c.subscribe([(t, 0) for t in batch])
            if rc != paho.MQTT_ERR_SUCCESS:
                raise MqttError(
                    "%s failed: %s"
                    % ("unsubscribe" if unsub else "subscribe", paho.error_string(rc))
                )
            acks.mids.add(mid)
            self._acks[mid] = (acks, batch)

    def _on_subscribe(
        self,
        client: paho.Client,
        userdata: Any,
        mid: int,
        reasons: list[ReasonCode],
        properties: Properties | None,
    ) -> None:
        entry = self._acks.pop(mid, None)
        if entry is None:
            return
        acks, batch = entry
        acks.refused += [t for t, r in zip(batch, reasons) if r.is_failure]
        acks.mids.discard(mid)
        if not acks.mids:
            acks.done(acks.refused)

    def _on_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        self.received += 1
        self.on_message(msg.topic, msg.payload)

    def _on_disconnect(
        self,
        client: paho.Client,
        userdata: Any,
        flags: paho.DisconnectFlags,
        reason: ReasonCode,
        properties: Properties | None,
    ) -> None:
        # After our own close() this changes nothing: closed is already set.
        # MQTT 3.1.1 brokers just close the socket; paho's reason code then
        # says nothing more than that.
        self._end(
            MqttError(LOST + (" (%s)" % reason if flags.is_disconnect_packet_from_server else ""))
        )

    def _on_socket_close(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        if self.reading:
            self.loop.remove_reader(sock)
            self.reading = False
        if self.writing:
            self.loop.remove_writer(sock)
            self.writing = False
        self._drained.set()
        self.sock = None

    def _on_register_write(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        # paho has packets to send: write them later in this loop turn, so
        # that publishes made in one turn go out together.
        if not self._flush_soon:
            self._flush_soon = True
            self.loop.call_soon(self._flush)

    def _on_unregister_write(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        if self.writing:
            self.loop.remove_writer(sock)
            self.writing = False
        self._drained.set()

    # -- the event loop's side -------------------------------------------------
    def _attach(self) -> None:
        """Register the connected socket with the event loop (after connect)."""
        c = self.client
        self.sock = c.socket()
        c.on_socket_close = self._on_socket_close
        c.on_socket_register_write = self._on_register_write
        c.on_socket_unregister_write = self._on_unregister_write
        self.resume_reading()
        if c.want_write():
            self._flush_soon = True
            self.loop.call_soon(self._flush)
        self._misc = self.loop.create_task(self._misc_loop())

    def _readable(self) -> None:
        if not self.reading:
            return  # paused (or closed) since it was scheduled
        c = self.client
        for _ in range(READ_BATCH):
            n = self.received
            # A call that brings no PUBLISH met EAGAIN, half a packet, or
            # another packet (SUBACK, PINGRESP): the selector calls again if
            # more is there. paho closes the socket itself on errors.
            if c.loop_read() or self.received == n or not self.reading:
                return
        # More may be waiting (a socket's or TLS's buffer): come back next turn.
        self.loop.call_soon(self._readable)

    def _flush(self) -> None:
        self._flush_soon = False
        c = self.client
        if self.sock is None or self.writing:
            return  # closed, or the writer will send it
        c.loop_write()
        if c.want_write() and self.sock is not None:
            # The socket's buffer is full: write when it drains.
            self.loop.add_writer(self.sock, c.loop_write)
            self.writing = True
            self._drained.clear()

    async def _misc_loop(self) -> None:
        while not self.closed.done():
            await asyncio.sleep(1)
            self.client.loop_misc()  # PINGREQ; drops a broker silent past the keepalive

    def _end(self, why: MqttError | None) -> None:
        if not self.closed.done():
            self.closed.set_result(why)
        if not self.ready.done():
            self.ready.set_exception(why or MqttError("connection closed"))
            self.ready.exception()  # retrieved: connect() may be gone already
        if self._misc is not None and self._misc is not asyncio.current_task():
            self._misc.cancel()

    # -- using it --------------------------------------------------------------
    async def publish(self, topic: str, payload: bytes, retain: bool = False) -> None:
        """Publish at QoS 0; waits only while the socket's buffer is full."""
        if self.closed.done():
            raise MqttError("MQTT connection closed")
        info = self.client.publish(topic, payload, 0, retain)
        if info.rc != paho.MQTT_ERR_SUCCESS:
            raise MqttError("publish failed: %s" % paho.error_string(info.rc))
        if self.writing:
            await self._drained.wait()

    def pause_reading(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.sock)
            self.reading = False

    def resume_reading(self) -> None:
        if not self.reading and self.sock is not None and not self.closed.done():
            self.loop.add_reader(self.sock, self._readable)
            self.reading = True
            # TLS may hold decrypted bytes the selector cannot see.
            self.loop.call_soon(self._readable)

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
        c = self.client
        if self.sock is not None:
            if goodbye is not None:
                c.publish(goodbye[0], goodbye[1], 0, True)
            c.disconnect()  # queued; written and closed right here
            if self.sock is not None:
                c.loop_write()
        s = c.socket()
        if s is not None:  # paho could not write the DISCONNECT
            self._on_socket_close(c, None, s)
            s.close()


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
) -> Connection:
    """A Connection subscribed to ``topics`` (QoS 0), its reading paused:
    call ``resume_reading()`` once ``on_message`` can take messages.
    ``will`` (topic, payload): the last will, retained, QoS 0.
    MqttError or OSError if the broker cannot be reached, refuses the client
    or a subscription."""
    conn = Connection(client_id, on_message, topics, keepalive, will)
    c = conn.client
    if username is not None:
        c.username_pw_set(username, password)
    if ssl is not None:
        c.tls_set_context(ssl)
    c.connect_timeout = timeout
    # paho's connect resolves, connects and (TLS) handshakes with blocking
    # calls: a worker thread does it so the loop keeps running. No socket
    # callbacks are set yet, so paho writes CONNECT from that thread itself.
    fut = conn.loop.run_in_executor(None, c.connect, host, port, keepalive)
    try:
        await asyncio.shield(fut)
    except asyncio.CancelledError:

        def close_if_connected(f: asyncio.Future[Any]) -> None:
            if not (f.cancelled() or f.exception()):
                conn.close()

        fut.add_done_callback(close_if_connected)
        raise
    try:
        conn._attach()
        await wait_for(asyncio.shield(conn.ready), timeout)
    except asyncio.TimeoutError:
        conn.close()
        raise MqttError("no CONNACK/SUBACK from the broker within %g s" % timeout) from None
    except BaseException:
        conn.close()
        raise
    return conn
