"""The bridge's MQTT 3.1.1 connection for device link frames (QoS 0 only).

Why not aiomqtt on this path: profiling the bridge under a device's burst
(BENCHMARKS.md, section 4) showed aiomqtt + paho spending ~75% of the
bridge's CPU per frame: three socket reads and an event-loop turn per
message, MQTT 5 properties parsed, the message wrapped twice, and a task plus
asyncio.wait created to hand each one over. This protocol takes whatever
the socket holds (asyncio reads up to 256 KB at once), splits every packet in
it in one pass and calls ``on_message(topic bytes, payload bytes)`` directly.
The mirror, which needs MQTT 5 user properties, keeps aiomqtt.
"""
import asyncio
import time


class MqttError(OSError):
    """The broker refused or broke the connection."""


CONNACK_CODES = {1: "unacceptable protocol version", 2: "client id rejected",
                 3: "server unavailable", 4: "bad user name or password", 5: "not authorised"}


def _str(s):
    b = s.encode() if isinstance(s, str) else bytes(s)
    return len(b).to_bytes(2, "big") + b


def _packet(kind, body):
    n = len(body)
    head = bytearray([kind])
    while True:
        d = n & 0x7F
        n >>= 7
        head.append(d | (0x80 if n else 0))
        if not n:
            return bytes(head) + body


class Connection(asyncio.Protocol):
    """One broker connection; open it with :func:`connect`."""

    def __init__(self, on_message, keepalive):
        loop = asyncio.get_running_loop()
        self.on_message = on_message
        self.keepalive = keepalive
        self.transport = None
        self.rest = b""                  # an unfinished packet from the last read
        self.closed = loop.create_future()   # result: why it ended (None: by us)
        self._acks = {}                  # packet id (0: CONNACK) -> future
        self._pid = 0
        self._writable = asyncio.Event()
        self._writable.set()
        self.t_rx = time.monotonic()
        self._pinger = None

    # -- asyncio.Protocol ------------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        err = exc or MqttError("connection closed by the broker")
        for f in self._acks.values():
            if not f.done():
                f.set_exception(err)
        if not self.closed.done():
            self.closed.set_result(err)
        if self._pinger is not None:
            self._pinger.cancel()
        self._writable.set()

    def pause_writing(self):
        self._writable.clear()

    def resume_writing(self):
        self._writable.set()

    def data_received(self, data):
        self.t_rx = time.monotonic()
        if self.rest:
            data = self.rest + data
        n = len(data)
        i = 0
        on_message = self.on_message
        while i + 1 < n:
            h = data[i]
            j = i + 1
            ln = shift = 0
            while True:                  # the remaining length, a varint
                if j >= n:
                    self.rest = data[i:]
                    return
                b = data[j]
                j += 1
                ln |= (b & 0x7F) << shift
                if not b & 0x80:
                    break
                shift += 7
                if shift > 21:
                    return self._fail("bad remaining length")
            end = j + ln
            if end > n:
                break
            kind = h & 0xF0
            if kind == 0x30:             # PUBLISH
                p = j + 2 + ((data[j] << 8) | data[j + 1])
                topic = data[j + 2:p]
                if h & 0x06:             # QoS > 0 (we never ask for it): skip its id
                    p += 2
                on_message(topic, data[p:end])
            elif kind == 0x20 or kind == 0x90:   # CONNACK, SUBACK
                pid = 0 if kind == 0x20 else (data[j] << 8) | data[j + 1]
                f = self._acks.pop(pid, None)
                if f is not None and not f.done():
                    f.set_result(data[j:end])
            i = end
        self.rest = data[i:] if i < n else b""

    # -- using it --------------------------------------------------------------
    def _fail(self, why):
        self.rest = b""
        if self.transport is not None:
            self.transport.abort()
        if not self.closed.done():
            self.closed.set_result(MqttError(why))

    def _ack(self, pid):
        f = asyncio.get_running_loop().create_future()
        self._acks[pid] = f
        return f

    async def _await(self, f, what, timeout=10):
        try:
            return await asyncio.wait_for(f, timeout)
        except asyncio.TimeoutError:
            self._fail("no %s from the broker" % what)
            raise MqttError("no %s from the broker" % what)

    async def _handshake(self, client_id, username, password):
        flags = 0x02                     # clean session
        payload = _str(client_id)
        if username is not None:
            flags |= 0x80
            payload += _str(username)
            if password is not None:
                flags |= 0x40
                payload += _str(password)
        var = _str(b"MQTT") + bytes([4, flags]) + self.keepalive.to_bytes(2, "big")
        f = self._ack(0)
        self.transport.write(_packet(0x10, var + payload))
        ack = await self._await(f, "CONNACK")
        if len(ack) < 2 or ack[1]:
            code = ack[1] if len(ack) > 1 else None
            raise MqttError("broker refused the connection: %s" % CONNACK_CODES.get(code, code))
        self._pinger = asyncio.get_running_loop().create_task(self._ping())

    async def _ping(self):
        # PINGREQ at half the keepalive; a broker silent for 1.5 keepalives is gone.
        while True:
            await asyncio.sleep(self.keepalive / 2)
            if time.monotonic() - self.t_rx > 1.5 * self.keepalive:
                return self._fail("broker silent for %.0f s" % (1.5 * self.keepalive))
            self.transport.write(b"\xc0\x00")

    async def subscribe(self, *topics):
        """Subscribe at QoS 0 and wait for the broker's SUBACK."""
        self._pid = pid = self._pid % 0xFFFF + 1
        body = pid.to_bytes(2, "big") + b"".join(_str(t) + b"\x00" for t in topics)
        f = self._ack(pid)
        self.transport.write(_packet(0x82, body))
        codes = await self._await(f, "SUBACK")
        if any(c == 0x80 for c in codes[2:]):
            raise MqttError("broker refused a subscription to %s" % ", ".join(topics))

    async def publish(self, topic, payload):
        """Publish at QoS 0; waits only while the socket's buffer is full."""
        if self.closed.done():
            raise MqttError("MQTT connection closed")
        self.transport.write(_packet(0x30, _str(topic) + payload))
        if not self._writable.is_set():
            await self._writable.wait()

    def pause_reading(self):
        if self.transport is not None and self.transport.is_reading():
            self.transport.pause_reading()

    def resume_reading(self):
        if self.transport is not None and not self.transport.is_closing() \
                and not self.transport.is_reading():
            self.transport.resume_reading()

    def close(self):
        """DISCONNECT and close (no last will of ours to suppress)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"\xe0\x00")
            self.transport.close()
        if not self.closed.done():
            self.closed.set_result(None)


async def connect(host, port, client_id, on_message, username=None, password=None,
                  ssl=None, keepalive=30, timeout=10):
    """An open Connection; MqttError or OSError if the broker cannot be reached
    or refuses."""
    loop = asyncio.get_running_loop()
    _, conn = await asyncio.wait_for(loop.create_connection(
        lambda: Connection(on_message, keepalive), host, port, ssl=ssl,
        server_hostname=host if ssl else None), timeout)
    try:
        await conn._handshake(client_id, username, password)
    except BaseException:
        conn.close()
        raise
    return conn
