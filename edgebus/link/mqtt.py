"""A link transport over MQTT, for devices (MicroPython and CPython).

Frames travel one per MQTT message: the device publishes on
``<prefix>/<node>/up`` and receives on ``<prefix>/<node>/down``; its presence
is the retained ``<prefix>/<node>/state`` ("online", and "offline" as its last
will, so the broker announces a device that vanishes). The bridge's presence
is the retained ``<prefix>/_bridge``, the same way: each message there is
handed to ``on_peer(online)`` if the owner set it (``Link.peer_presence``), so
the link learns at once that the bridge is gone or back.

Why a small client of ours rather than umqtt or a PyPI client: the link
already provides ordering, sequence numbers, gap detection, liveness and
re-sync, so MQTT 3.1.1 with QoS 0 is all it needs: CONNECT with a will, one
SUBSCRIBE of two topics (sent again on every connect, which umqtt.robust
forgets), PUBLISH and PINGREQ, in ~150 lines that never block the scheduler
(asyncio streams). umqtt.simple blocks; the asyncio clients on PyPI are 1,300+ lines, a heap
cost a board running the bus and the link cannot spare.
"""

import sys

from .. import compat
from .frame import MAX_LEN, message, unmessage

# Bytes asked of the socket while a packet's header is incomplete: an ACK's
# message is ~40, so one read takes it (and whatever came with it) whole.
READ_AHEAD = 256


class MqttError(OSError):
    """The broker refused or broke the connection."""


def _head(b):
    """(header bytes, body bytes) of the MQTT packet at ``b``'s start, or
    None while its header is incomplete."""
    n = shift = 0
    for h in range(1, min(len(b), 5)):
        c = b[h]
        n |= (c & 0x7F) << shift
        if not c & 0x80:
            return h + 1, n
        shift += 7
    if len(b) >= 5:
        raise MqttError("bad remaining length")
    return None


def string(s):
    """An MQTT string: its length (2 bytes) and its UTF-8 bytes."""
    b = s.encode() if type(s) is str else s
    return len(b).to_bytes(2, "big") + b


def packet(kind, body):
    """An MQTT packet: the first byte ``kind``, the remaining length, body."""
    n = len(body)
    head = bytearray([kind])
    while True:
        d = n & 0x7F
        n >>= 7
        head.append(d | (0x80 if n else 0))
        if not n:
            break
    return bytes(head) + body


def connect_packet(client_id, keepalive, will=None, user=None, password=None):
    """CONNECT (MQTT 3.1.1, clean session); ``will`` (topic, payload) is
    retained, QoS 0. The bridge's connection (bridge/links/mqtt_conn.py)
    sends the same packet."""
    flags = 0x02  # clean session
    payload = string(client_id)
    if will is not None:
        flags |= 0x04 | 0x20  # will, will retain (QoS 0)
        payload += string(will[0]) + string(will[1])
    if user is not None:
        flags |= 0x80
        payload += string(user)
        if password is not None:
            flags |= 0x40
            payload += string(password)
    return packet(
        0x10, string(b"MQTT") + bytes([4, flags]) + keepalive.to_bytes(2, "big") + payload
    )


def nodelay(w):
    """TCP_NODELAY on stream ``w``'s socket, as CPython's asyncio sets it on
    its own. MicroPython leaves Nagle on: a frame written while the previous
    one is unacknowledged waits for that TCP ACK, which the broker may delay
    (40 ms on Linux); paced at 200/s, ~10 % of a device's readings waited
    30-40 ms in its kernel."""
    s = getattr(w, "s", None)  # MicroPython's Stream; CPython's has none
    if s is None:
        return
    import socket

    # lwIP names its values; the unix port names none and Linux's are 6 and 1.
    opt = getattr(socket, "TCP_NODELAY", 1 if sys.platform == "linux" else None)
    if opt is not None:
        try:
            s.setsockopt(getattr(socket, "IPPROTO_TCP", 6), opt, 1)
        except (OSError, AttributeError):  # e.g. a TLS socket without setsockopt
            pass


CONNACK_CODES = {
    1: "unacceptable protocol version",
    2: "client id rejected",
    3: "server unavailable",
    4: "bad user name or password",
    5: "not authorised",
}


class MqttTransport:
    """A link transport over one MQTT connection (see the module doc)."""

    def __init__(
        self,
        host,
        port=1883,
        node="dev",
        prefix="edgebus",
        client_id=None,
        keepalive=30,
        user=None,
        password=None,
        max_len=MAX_LEN,
        presence=True,
        connect_timeout=10,
        ssl=None,
        server_hostname=None,
    ):
        self.host = host
        # TLS: an SSLContext of the runtime's ssl module (CPython's, or
        # MicroPython's mbedTLS one), and the name the broker's certificate
        # must carry (default: host).
        self.ssl = ssl
        self.server_hostname = server_hostname or host
        self.port = port
        self.up = "%s/%s/up" % (prefix, node)
        # Topics compared with a received one are bytes: one slice per
        # message to compare, no decode.
        self.down = ("%s/%s/down" % (prefix, node)).encode()
        self.bridge = ("%s/_bridge" % prefix).encode()
        # presence=False: no will and no "online" (a connection that only
        # looks, as a failover probe: it leaves nothing retained behind).
        self.state = "%s/%s/state" % (prefix, node) if presence else None
        # on_peer(online): called for each message on the bridge's presence
        # topic (retained, so once on every connect too); set after open(),
        # before recv(). None: presence is ignored.
        self.on_peer = None
        self.client_id = client_id or ("edgebus-" + node)
        self.keepalive = keepalive
        # Every wait on the broker has a deadline: the TCP connect and the
        # CONNACK within connect_timeout s; once open, a broker silent for
        # keepalive s (no answer to a PINGREQ sent after keepalive/2 s of
        # quiet: overloaded, or a half-open connection) ends the connection.
        self.connect_timeout = connect_timeout
        self.user = user
        self.password = password
        self.max_len = max_len
        # Bodies arrive whole, one per message: no reassembly buffers to hold
        # (a board reconnecting on a fragmented heap may not find 2 KB again).
        self.counters = {"frames": 0, "crc_errors": 0, "silent": 0, "oversize": 0}
        self.closed = True
        self.bare = False  # the link's to set: its sealed session's peer takes bare bodies
        self.r = self.w = None
        self._rb = b""  # read past the last packet (_read_packet)
        self._drop = 0  # bytes of an oversized packet still to read through
        self._burst = 0  # writes since the last drain (_write)

    async def open(self):
        """Connect, announce presence, subscribe to the down and the bridge's
        presence topics. MqttError when the broker does not answer within
        connect_timeout s (the connection is closed)."""
        try:
            await compat.wait_for(self._connect(), self.connect_timeout)
        except compat.TimeoutError:
            self._cut()
            raise MqttError(
                "no CONNACK from %s:%d within %s s" % (self.host, self.port, self.connect_timeout)
            )
        except (OSError, ValueError) as e:
            self._cut()
            if self.ssl is None or isinstance(e, MqttError):
                raise
            # A certificate the CA does not vouch for, or a name that does not
            # match (mbedTLS says so in a ValueError of several lines).
            raise MqttError(
                "TLS with %s:%d (as %s) failed: %s"
                % (self.host, self.port, self.server_hostname, " ".join(str(e).split()))
            )
        except BaseException:
            self._cut()
            raise
        self.closed = False
        await self._write(
            packet(0x82, b"\x00\x01" + string(self.down) + b"\x00" + string(self.bridge) + b"\x00")
        )
        if self.state is not None:
            await self._publish(self.state, b"online", retain=True)
        return self

    def _cut(self):
        if self.w is not None:
            try:
                compat.close_stream(self.w)
            except OSError:
                pass

    async def _connect(self):
        self._rb = b""
        self._drop = 0
        if self.ssl is None:
            self.r, self.w = await compat.asyncio.open_connection(self.host, self.port)
        else:
            self.r, self.w = await compat.asyncio.open_connection(
                self.host, self.port, ssl=self.ssl, server_hostname=self.server_hostname
            )
        nodelay(self.w)
        will = None if self.state is None else (self.state, b"offline")
        await self._write(
            connect_packet(self.client_id, self.keepalive, will, self.user, self.password)
        )
        kind, body = await self._read_packet()
        if kind != 0x20 or len(body) < 2:
            raise MqttError("no CONNACK from %s:%d" % (self.host, self.port))
        if body[1]:
            raise MqttError(
                "broker refused the connection: %s" % CONNACK_CODES.get(body[1], body[1])
            )

    async def _write(self, data):
        w = self.w
        w.write(data)
        # MicroPython's write() sends at once what the socket takes, and its
        # drain() then only yields a round of the event loop: a task wake-up
        # more per frame. Drained when something waits (out_buf) and every
        # 8th write, so a backlog still lets the other tasks run; CPython's
        # drain() (no out_buf) waits only for a full buffer: always called.
        k = self._burst + 1
        if k < 8 and not getattr(w, "out_buf", True):
            self._burst = k
            return
        self._burst = 0
        await w.drain()

    async def _read_packet(self):
        """The next MQTT packet, (kind, body). What a read brings past it
        waits in ``_rb`` for the next call: one read of the socket for a
        packet or several (MicroPython's readexactly yields to the event loop
        before each read: three a packet), and nothing is lost when the wait
        is cancelled (a keepalive's deadline), as each read is kept at once.
        A packet longer than any frame is read through and dropped, never
        held (counted: ``oversize``)."""
        while True:
            b = self._rb
            hd = _head(b)
            if hd is None:
                want = READ_AHEAD
            else:
                h, n = hd
                if n > self._most():
                    self._rb = b""
                    self._drop = h + n - len(b)
                    self.counters["oversize"] += 1
                    await self._skip()
                    continue
                if len(b) >= h + n:
                    self._rb = b[h + n :] if len(b) > h + n else b""
                    return b[0] & 0xF0, b[h : h + n]
                want = h + n - len(b)
            more = await self.r.read(want)
            if not more:
                raise EOFError
            self._rb = b + more if b else more

    def _most(self):
        """The longest packet that can hold a frame: the down topic, the
        frame at max_len with COBS's byte in 254, its CRC and a seal. A method,
        not an attribute: a 24th attribute grew the instance's table by 96
        bytes on MicroPython."""
        m = self.max_len
        return m + m // 254 + 64 + len(self.down)

    async def _skip(self):
        """Read ``_drop`` bytes through, READ_AHEAD at a time; what comes
        after them is kept."""
        while self._drop > 0:
            more = await self.r.read(READ_AHEAD)
            if not more:
                raise EOFError
            k = self._drop
            self._drop = k - len(more)
            if len(more) > k:
                self._rb = more[k:]

    async def _publish(self, topic, payload, retain=False):
        await self._write(packet(0x30 | (1 if retain else 0), string(topic) + payload))

    async def recv(self):
        """The next frame bodies from the down topic; None when the connection ends."""
        pinged = False
        while not self.closed:
            try:
                kind, body = await compat.wait_for(self._read_packet(), self.keepalive / 2)
            except compat.TimeoutError:
                if pinged:  # no PINGRESP, nothing at all: a dead broker
                    self.counters["silent"] += 1
                    break
                try:
                    await self._write(b"\xc0\x00")  # PINGREQ keeps the broker from dropping us
                except OSError:
                    break
                pinged = True
                continue
            except (OSError, EOFError, MqttError):
                break
            pinged = False
            if kind == 0x30:  # PUBLISH (QoS 0: no packet id)
                n = (body[0] << 8) | body[1]
                t = body[2 : 2 + n]
                if t != self.down:
                    if t == self.bridge and self.on_peer is not None:
                        self.on_peer(body[2 + n :] == b"online")
                    continue
                b = unmessage(body[2 + n :], self.max_len)
                if b is None:
                    self.counters["crc_errors"] += 1
                    continue
                self.counters["frames"] += 1
                return [b]
        self.close()
        return None

    async def send(self, body, tail=None):
        if self.closed:
            raise OSError("MQTT connection closed")
        await self._publish(self.up, message(body, self.max_len, tail, self.bare))

    def close(self):
        """Close without DISCONNECT: the broker then publishes our last will."""
        if not self.closed:
            self.closed = True
            self._cut()

    async def disconnect(self):
        """A clean goodbye: presence 'offline' published by us, then DISCONNECT."""
        if not self.closed:
            try:
                if self.state is not None:
                    await self._publish(self.state, b"offline", retain=True)
                await self._write(b"\xe0\x00")
            except OSError:
                pass
        self.close()

    def stats(self):
        return dict(self.counters)
