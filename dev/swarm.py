"""A swarm of simulated devices: thousands of CPython devices over MQTT, many
per process (``edgebus fleet`` runs the real firmware, one MicroPython
process a device, which two cores cannot take to thousands).

Each device is an ``edgebus.Bus``, a ``Link`` (initiator, ack on, the
default reliable class, ``sensor/#`` exported) and the ``edgebus.link.mqtt``
transport, reopened with backoff and jitter as the firmware's uplink does.
It publishes ``sensor/temp`` readings ({"n": k}: the k-th reading is the
link's number k) at ``rate`` per second from its start, spooled while no
session is up. Node ids and keys are deterministic (``<prefix>-<i>``,
``key-<prefix>-<i>``), so ``bridge_toml()`` gives the bridge's ``[mqtt]``
devices. The devices are spread over worker processes (one per core by
default), their starts staggered over ``ramp`` seconds.

Per device it records the readings sent, the highest number acknowledged
(the ACK frames the device receives: what frees its spool), what its spool
still holds and evicted, its sessions and when the first came up, and the
ACK latency of every reading (publish to the ACK that frees it, on the
device's clock), split into readings published while a session was up
(``live``: acknowledged before ``phase()``, e.g. the start of an outage;
``after``: acknowledged after it) and while none was (``spooled``). ``check()`` reads a bridge's
telemetry log (tlog's public reader) against that summary: for every device,
acknowledged but missing (must be 0), missing but still spooled or evicted,
duplicates and gaps.

usage: python -m dev.swarm --devices 3000 --rate 1 --mqtt HOST:PORT --seconds 60 --out DIR
       python -m dev.swarm --devices 3000 --mqtt HOST:PORT --print-toml
       python -m dev.swarm check LOG_DIR DIR/swarm.json
(run the bridge with the printed ``[mqtt]`` fragment and a ``[log]`` first.)
"""

import argparse
import asyncio
import collections
import heapq
import importlib
import json
import os
import sys
import time

import edgebus
from edgebus import compat
from edgebus.compat import wait_for
from edgebus.link import seal, wire
from edgebus.link.frame import message, unmessage
from edgebus.link.link import Link
from edgebus.link.mqtt import MqttTransport

# A baseline tree the bench measures beside this one may predate the one backoff,
# the shared ticker, the bridge's links/ package or the one installed name (host
# packages at the top level): each name from the first module that has it.


def _first(name, *modules):
    for m in modules:
        try:
            return getattr(importlib.import_module(m), name)
        except (ImportError, AttributeError):
            continue
    return None


Backoff = _first("Backoff", "edgebus.backoff", "edgebus.bridge.links", "bridge.links")
tick_links = _first(
    "tick_links", "edgebus.bridge.links.ticker", "edgebus.bridge.links", "bridge.links"
)

# The load generator's (Lean) MQTT packets; a baseline tree's mqtt module may lack them.
packet = _first("packet", "edgebus.link.mqtt")
string = _first("string", "edgebus.link.mqtt")

try:  # this tree: ticks is a link option; a baseline's: an attribute, or none
    from edgebus.link.options import Options
except ImportError:
    Options = None

TOPIC = ("sensor", "temp")
DEFAULT_SPOOL = 32768  # the unix board's spool (boards/unix.json), as `edgebus fleet`
BACKOFF = (0.5, 10.0)  # the firmware uplink's backoff_min / backoff_max


def node_name(prefix, i):
    """The i-th device's node id (1-based)."""
    return "%s-%d" % (prefix, i)


def node_key(node):
    return "key-" + node


def default_workers():
    return max(1, os.cpu_count() or 1)


def _pct(hist, q):
    """The q-quantile (0..1) of a histogram {ms: count}, or None when empty."""
    n = sum(hist.values())
    if not n:
        return None
    want = q * (n - 1)
    seen = 0
    for ms in sorted(hist):
        seen += hist[ms]
        if seen > want:
            return ms
    return max(hist)


# -- a device (in a worker process) ---------------------------------------


class Device:
    """One simulated device: bus, link, MQTT transport, readings."""

    def __init__(self, node, broker, rate, spool, heartbeat, start_at, hist):
        self.node = node
        self.broker = broker
        self.period = 1.0 / rate
        self.start_at = start_at  # wall clock
        self.bus = edgebus.Bus()
        self.conn = self.bus.connect()
        self.link = Link(
            self.bus,
            node,
            key=node_key(node).encode(),
            role="initiator",
            link_id="uplink",
            peer="host",
            exports=[("sensor/#", "")],
            imports=(),
            export_calls=(),
            import_calls=(),
            heartbeat=heartbeat,
            status=False,
            spool=spool,
            # the swarm's one ticker ticks it (Swarm.links)
            **({"ticks": False} if Options is not None and tick_links is not None else {}),
        )
        self.hist = hist  # {"live"|"after"|"spooled": {ms: count}}
        self.sent = 0  # readings published: numbers 1..sent
        self.acked = 0  # every number up to it acknowledged
        self.unacked = collections.deque()  # (n, monotonic publish time, live)
        self.t_up = None  # wall clock of the first session up
        self.opens = self.open_failures = 0
        self.target = None  # drain: the sent count at mark()
        self.t_drained = None
        self.after = False  # phase() came: live ACKs count as "after"
        self.publishing = True
        self.transport = None  # the open one (Transport)
        self.link_frames_dropped = 0  # Lean: the link's own frames not sent

    def on_ack(self, n):
        """An ACK N arrived: every number below N is durable at the bridge."""
        if n - 1 <= self.acked:
            return
        self.acked = n - 1
        now = time.monotonic()
        q = self.unacked
        while q and q[0][0] < n:
            _, t, live = q.popleft()
            h = self.hist["after" if live and self.after else "live" if live else "spooled"]
            ms = int(1000 * (now - t))
            h[ms] = h.get(ms, 0) + 1
        if self.target is not None and self.t_drained is None and self.acked >= self.target:
            self.t_drained = time.time()

    def publish(self):
        self.sent += 1
        self.unacked.append((self.sent, time.monotonic(), self.link.status == "up"))
        self.conn.publish(TOPIC, {"n": self.sent, "temp": 20.0 + self.sent % 10})

    async def readings(self):
        due = time.monotonic()
        while self.publishing:
            self.publish()
            due += self.period
            await asyncio.sleep(max(0.0, due - time.monotonic()))

    async def uplink(self):
        """Keep a transport open, as firmware/uplink.py does: backoff with
        jitter between attempts, back to the shortest after a session."""
        backoff = Backoff(*BACKOFF)
        self.link.start()
        while True:
            sessions = self.link.counters.get("sessions", 0)
            t = Transport(self, self.broker[0], self.broker[1], node=self.node)
            try:
                await wait_for(t.open(), 10)
            except Exception:  # refused, unreachable, no CONNACK: back off
                self.open_failures += 1
                if t.w is not None:  # connected, refused: not open, so close() skips it
                    t.w.close()
                t = None
            if t is not None:
                self.opens += 1
                t.on_peer = self.link.peer_presence
                await self.link.run(t)
                t.close()
            if self.link.counters.get("sessions", 0) > sessions:
                backoff.reset()
            await asyncio.sleep(backoff.next())

    def summary(self):
        sp = self.link.spool_stats()
        c = self.link.counters
        return {
            "node": self.node,
            "sid": self.link.sid,
            "sent": self.sent,
            "acked": self.acked,
            "tx_seq": self.link.tx_seq,
            "spooled": sp["depth"],
            "spool_evicted": sp["evicted"],
            "spool_refused": sp["refused"],
            "sessions": c.get("sessions", 0),
            "start": self.start_at,
            "up": self.t_up,
            "opens": self.opens,
            "open_failures": self.open_failures,
            "drain_target": self.target,
            "drained": self.t_drained,
            "state": self.link.status,
        }


class Transport(MqttTransport):
    """The device's MQTT transport, telling the device of each ACK its link
    took (its acknowledged mark and ACK latency, on the device)."""

    def __init__(self, dev, *a, **kw):
        super().__init__(*a, **kw)
        self.dev = dev
        dev.transport = self
        # A lean device's session (Lean): the link's own frames are not sent
        # (counted): the readings own the seal's counter from then on.
        self.lean = False

    async def send(self, body, tail=None):
        if self.lean:
            self.dev.link_frames_dropped += 1
            return
        await super().send(body, tail)

    async def recv(self):
        # The link takes this batch before the next recv(): ACKs read here are
        # opened (a sealed session's may be encrypted) and applied by then.
        link = self.dev.link
        # A baseline tree (the bench's) may predate the public mark.
        acked = getattr(link, "tx_acked", None)
        self.dev.on_ack(link._tx_acked if acked is None else acked)
        return await super().recv()


# -- the load generator's device (in the same file: a baseline tree gets this one file)


class Lean(Device):
    """A device of the load generator: the same session as a full device
    (its real link makes the handshake, holds the seal's keys and the window
    the bridge gives, and reads every frame the bridge sends), but once it is
    up its readings skip the device's bus, spool and writer: sealed ahead
    (AHEAD at a time), stamped with the link clock at their due times, and
    sent by its process's Hub within the window. From the takeover on the
    link's own frames are not sent (Transport.lean; counted): the readings
    keep the seal's counter rising, and the link is no longer ticked (Hub).
    A RESEND seals what follows again (a resealed frame takes a new
    counter). A session that ends stops the readings (``lean_stopped``): a
    lean device does not spool."""

    AHEAD = 8  # readings sealed ahead: their stamps are the due times

    def __init__(self, *a, hub=None):
        super().__init__(*a)
        self.hub = hub
        self.ready = collections.deque()  # (seq, packet) sealed, not sent
        self.bodies = {}  # seq -> body: sent or ready, not acknowledged
        self.first = None  # the first lean number
        self.session = None
        self.resends_seen = 0
        self.resends = 0
        self.due = 0.0  # when the next new reading is due (monotonic)
        self.blocked = False  # its window is full: the next ACK queues it again
        self.lean_stopped = None  # why the readings stopped early

    def on_ack(self, n):
        super().on_ack(n)
        if self.blocked:
            self.blocked = False
            self.hub.queue(self, time.monotonic())

    def _body(self, seq, ms):
        obj = [wire.topic_out(TOPIC), {"n": seq, "temp": 20.0 + seq % 10}, None, ms]
        return wire.join(wire.parts(wire.PUB, obj, seq))

    def _seal(self, body):
        t = self.transport
        b, tl = seal.out(self.link, bytearray(body), fresh=True)
        return packet(0x30, string(t.up) + message(b, t.max_len, tl, t.bare))

    def _ahead(self):
        """Seal the next readings, stamped with their due times."""
        link = self.link
        now_ms, now = compat.ms(), time.monotonic()
        for i in range(self.AHEAD):
            seq = link.tx_seq
            link.tx_seq = seq + 1
            body = self._body(seq, now_ms + int(1000 * (self.due + i * self.period - now)))
            self.bodies[seq] = body
            self.ready.append((seq, self._seal(body)))

    async def readings(self):
        link = self.link
        while link.status != "up":
            await asyncio.sleep(0.05)
            if not self.publishing:
                return
        await asyncio.sleep(0.5)  # the link's first frames (routes, window) go out
        if link.tx_seq != 1 or link.status != "up":
            self.lean_stopped = "the link numbered frames of its own, or lost its session"
            return
        self.first = link.tx_seq
        self.session = link.counters.get("sessions")
        self.resends_seen = link.counters.get("resends", 0)
        self.transport.lean = True
        self.due = time.monotonic()
        await self.hub.take(self)

    def step(self, now):
        """The Hub's turn for this device at ``now``: the packet to send, or
        None (not due, window full, or stopped); queues its next turn."""
        link = self.link
        if not self.publishing or self.lean_stopped:
            return None
        if self.hub.lost is not None:  # its frames from the bridge come no more
            self.lean_stopped = "the generator's downlink closed: %s" % (self.hub.lost,)
            return None
        if link.status != "up" or link.counters.get("sessions") != self.session:
            self.lean_stopped = "session ended"
            return None
        r = link.counters.get("resends", 0)
        if r != self.resends_seen:  # RESEND n: from n on, sealed again
            self.resends_seen = r
            self.resends += 1
            n = max(link.tx_acked, self.first)
            self.ready.clear()
            for seq in sorted(k for k in self.bodies if k >= n):
                self.ready.append((seq, self._seal(self.bodies[seq])))
        if not self.ready:
            self._ahead()
        seq, pkt = self.ready[0]
        if seq > self.sent and now < self.due:
            self.hub.queue(self, self.due)
            return None
        w = link._tx_window  # the bridge's pace (None: none)
        if w is not None and seq >= max(link.tx_acked, self.first) + w:
            self.blocked = True
            return None
        self.ready.popleft()
        if seq > self.sent:
            self.sent = seq
            self.unacked.append((seq, self.due, True))
            self.due += self.period
        for k in [k for k in self.bodies if k < link.tx_acked]:
            del self.bodies[k]
        self.hub.queue(self, now if self.ready and self.ready[0][0] <= self.sent else self.due)
        return pkt

    def summary(self):
        s = super().summary()
        if self.first is not None:  # numbers sealed ahead and never sent are not spent
            s["tx_seq"] = self.sent + 1
        s.update(
            {
                "lean_first": self.first,
                "lean_resends": self.resends,
                "lean_stopped": self.lean_stopped,
                "link_frames_dropped": self.link_frames_dropped,
            }
        )
        return s


class _Down(asyncio.Protocol):
    """The Hub's downlink connection: MQTT packets parsed as they come, each
    PUBLISH on a lean device's down topic fed to its link (no stream, no
    task per device)."""

    def __init__(self, hub):
        self.hub = hub
        self.buf = bytearray()
        self.connack = asyncio.get_running_loop().create_future()
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        buf = self.buf
        buf += data
        i, n = 0, len(buf)
        while i < n:
            j, size, shift = i + 1, 0, 0
            while j < n:
                b = buf[j]
                size |= (b & 0x7F) << shift
                j += 1
                if not b & 0x80:
                    break
                shift += 7
            else:
                break
            if j + size > n:
                break
            kind = buf[i] & 0xF0
            if kind == 0x30:
                t = (buf[j] << 8) | buf[j + 1]
                self.hub.frame(bytes(buf[j + 2 : j + 2 + t]), bytes(buf[j + 2 + t : j + size]))
            elif kind == 0x20 and not self.connack.done():
                self.connack.set_result(True)
            i = j + size
        del buf[:i]

    def connection_lost(self, exc):
        self.hub.lost = exc or "closed"


class Hub:
    """A worker's two MQTT connections for its lean devices: every reading
    goes out on ``up`` (the packets due in a turn in one write), every frame
    the bridge sends them arrives on ``down`` (subscribed per device as it
    is taken), fed to its device's link; one task sends what is due."""

    def __init__(self, broker, name):
        self.broker = broker
        self.name = name
        self.by_topic = {}  # down topic (bytes) -> Lean
        self.heap = []  # (when, tiebreak, device) turns
        self.n = 0
        self.up = self.down = None
        self.lost = None
        self.wake = asyncio.Event()
        self.pid = 1
        # The worker's ticked links (Worker.links): a device taken leaves it.
        # Its ticks would only send frames that are not sent (heartbeats) and
        # watch for a dead bridge, which the bridge's side watches too; at
        # 5,000 links they were a quarter of a worker's time.
        self.ticked = {}

    async def start(self):
        loop = asyncio.get_running_loop()
        host, port = self.broker
        _r, self.up = await asyncio.open_connection(host, port)
        self.up.write(_connect_packet(self.name + "-up"))
        proto = _Down(self)
        await loop.create_connection(lambda: proto, host, port)
        self.proto = proto
        proto.transport.write(_connect_packet(self.name + "-down"))
        await wait_for(proto.connack, 10)

    async def take(self, dev):
        """``dev``'s frames from the bridge come here from now on (its own
        connection stops taking them), and its readings go out from here."""
        t = dev.transport
        self.by_topic[t.down] = dev
        self.ticked.pop(dev.node, None)
        self.pid = self.pid % 65535 + 1
        self.proto.transport.write(
            packet(0x82, self.pid.to_bytes(2, "big") + string(t.down) + b"\x00")
        )
        t.w.write(packet(0xA2, b"\x00\x02" + string(t.down)))
        self.queue(dev, time.monotonic())

    def frame(self, topic, payload):
        dev = self.by_topic.get(topic)
        if dev is None:
            return
        body = unmessage(payload, dev.transport.max_len)
        if body is None:
            return
        dev.link.feed(body)
        dev.on_ack(dev.link.tx_acked)

    def queue(self, dev, when):
        self.n += 1
        heapq.heappush(self.heap, (when, self.n, dev))
        if when <= time.monotonic():
            self.wake.set()

    async def run(self):
        heap = self.heap
        keepalive = time.monotonic()
        while True:
            now = time.monotonic()
            out = []
            while heap and heap[0][0] <= now:
                dev = heapq.heappop(heap)[2]
                pkt = dev.step(now)
                if pkt is not None:
                    out.append(pkt)
            if out:
                self.up.write(b"".join(out))
            if now - keepalive > 20:  # PINGREQ: the broker keeps both
                keepalive = now
                self.up.write(b"\xc0\x00")
                self.proto.transport.write(b"\xc0\x00")
            self.wake.clear()
            delay = max(0.002, heap[0][0] - now) if heap else 0.5
            try:
                await wait_for(self.wake.wait(), min(delay, 0.5))
            except asyncio.TimeoutError:
                pass


def _connect_packet(client_id):
    from edgebus.link.mqtt import connect_packet

    return connect_packet(client_id, 60)


# -- a worker process ----------------------------------------------------------


def _say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Worker:
    """The devices first..first+count-1 of a swarm of total, in this process."""

    def __init__(self, a):
        host, _, port = a.mqtt.rpartition(":")
        self.hist = {"live": {}, "after": {}, "spooled": {}}
        self.devices = []
        if a.lean and packet is None:
            raise SystemExit("--lean: this tree's edgebus.link.mqtt has no packet()")
        self.hub = Hub((host, int(port)), "%s-lean-%d" % (a.prefix, a.first)) if a.lean else None
        for i in range(a.first, a.first + a.count):
            start = a.t0 + a.ramp * (i - 1) / max(1, a.total)
            args = (node_name(a.prefix, i), (host, int(port)), a.rate, a.spool, a.heartbeat)
            if a.lean:
                self.devices.append(Lean(*args, start, self.hist, hub=self.hub))
            else:
                self.devices.append(Device(*args, start, self.hist))
        self.tasks = []
        # One ticker for the process's links where the Link lets its owner
        # tick (a baseline tree's may not): the simulator's own cost, not a
        # device's, which has one link and its own ticker.
        self.links = {
            d.node: d.link
            for d in self.devices
            if tick_links is not None and (Options is not None or hasattr(d.link, "ticks"))
        }
        if Options is None:
            for link in self.links.values():
                link.ticks = False
        if self.hub is not None:
            self.hub.ticked = self.links
        self.heartbeat = a.heartbeat

    async def _start(self, d):
        await asyncio.sleep(max(0.0, d.start_at - time.time()))
        self.tasks.append(asyncio.create_task(d.uplink()))
        self.tasks.append(asyncio.create_task(d.readings()))

    async def _watch(self):
        while True:
            now = time.time()
            for d in self.devices:
                if d.t_up is None and d.link.status == "up":
                    d.t_up = now
            await asyncio.sleep(0.1)

    def progress(self):
        ds = self.devices
        return {
            "devices": len(ds),
            "started": sum(1 for d in ds if d.start_at <= time.time()),
            "up": sum(1 for d in ds if d.link.status == "up"),
            "ever_up": sum(1 for d in ds if d.t_up is not None),
            "sent": sum(d.sent for d in ds),
            "acked": sum(d.acked for d in ds),
            "behind": sum(1 for d in ds if d.acked < d.sent),
            "evicted": sum(d.link.spool_stats()["evicted"] for d in ds),
            "undrained": sum(1 for d in ds if d.target is not None and d.t_drained is None),
        }

    async def run(self):
        loop = asyncio.get_running_loop()
        hub = None
        if self.hub is not None:
            await self.hub.start()
            hub = asyncio.create_task(self.hub.run())
        starts = [asyncio.create_task(self._start(d)) for d in self.devices]
        watch = asyncio.create_task(self._watch())
        ticker = asyncio.create_task(
            tick_links(self.links, self.heartbeat) if self.links else asyncio.sleep(0)
        )
        sys.stdout.write("ready %d\n" % len(self.devices))
        sys.stdout.flush()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            cmd = line.split()
            if not cmd or cmd[0] == "quit":
                break
            if cmd[0] == "progress":
                _say(self.progress())
            elif cmd[0] == "mark":  # the drain target: what each device sent by now
                for d in self.devices:
                    d.target, d.t_drained = d.sent, None
                    if d.acked >= d.target:
                        d.t_drained = time.time()
                _say({"marked": len(self.devices)})
            elif cmd[0] == "phase":  # ACKs from now on are another phase's
                for d in self.devices:
                    d.after = True
                _say({"phase": len(self.devices)})
            elif cmd[0] == "stop":  # no more readings
                for d in self.devices:
                    d.publishing = False
                _say({"stopped": len(self.devices)})
            elif cmd[0] == "summary":
                _say({"devices": [d.summary() for d in self.devices], "ack_ms": self.hist})
            else:
                _say({"error": "unknown command %r" % cmd[0]})
        for t in starts + [watch, ticker] + ([hub] if hub else []):
            t.cancel()
        await asyncio.gather(
            *[d.link.close("swarm done") for d in self.devices], return_exceptions=True
        )
        for t in self.tasks:
            t.cancel()


def _worker_main(argv):
    ap = argparse.ArgumentParser(prog="python -m dev.swarm worker")
    for name, kind in (
        ("--first", int),
        ("--count", int),
        ("--total", int),
        ("--prefix", str),
        ("--mqtt", str),
        ("--rate", float),
        ("--ramp", float),
        ("--t0", float),
        ("--spool", int),
        ("--heartbeat", float),
    ):
        ap.add_argument(name, type=kind, required=True)
    ap.add_argument("--lean", action="store_true")
    asyncio.run(Worker(ap.parse_args(argv)).run())
    return 0


# -- the swarm (the controlling process) ---------------------------------------


class Swarm:
    """``devices`` simulated devices on the broker (host, port), over
    ``workers`` processes (default: one per core), started over ``ramp``
    seconds (default: 1 ms a device; 0: all at once). Worker errors go to
    ``log`` (a file path), if given. ``tree``: the checkout whose edgebus the
    workers run (it must hold this dev/swarm.py; default: this one).
    ``lean``: the load generator's devices (Lean) instead of full ones."""

    def __init__(
        self,
        devices,
        broker,
        rate=1.0,
        workers=None,
        ramp=None,
        prefix="swarm",
        spool=DEFAULT_SPOOL,
        heartbeat=5.0,
        log=None,
        tree=None,
        lean=False,
    ):
        if devices < 1 or rate <= 0:
            raise ValueError("a swarm needs at least one device and a rate above 0")
        self.n = devices
        self.broker = broker
        self.rate = rate
        self.k = max(1, min(workers or default_workers(), devices))
        self.ramp = devices / 1000.0 if ramp is None else ramp
        self.prefix = prefix
        self.spool = spool
        self.heartbeat = heartbeat
        self.log = log
        self.tree = tree
        self.lean = lean
        self.children = []
        self.t0 = None

    def nodes(self):
        return [node_name(self.prefix, i) for i in range(1, self.n + 1)]

    def bridge_config(self):
        """The bridge's [mqtt] part for this swarm (as tools/sim/fleet.py's)."""
        return {
            "mqtt": {
                "url": "mqtt://%s:%d" % self.broker,
                "devices": [{"node": n, "key": node_key(n)} for n in self.nodes()],
            }
        }

    def toml(self):
        """The bridge TOML fragment joining this swarm."""
        from edgebus.tools.sim.fleet import bridge_toml

        return bridge_toml(self.bridge_config())

    def start(self):
        from dev.bench.procs import Child
        from dev.harness.process import ROOT, python

        self.t0 = time.time() + 1.0  # the workers' imports come first
        per, extra = divmod(self.n, self.k)
        first = 1
        for w in range(self.k):
            count = per + (1 if w < extra else 0)
            self.children.append(
                Child(
                    python(
                        "dev.swarm",
                        "worker",
                        "--first",
                        first,
                        "--count",
                        count,
                        "--total",
                        self.n,
                        "--prefix",
                        self.prefix,
                        "--mqtt",
                        "%s:%d" % self.broker,
                        "--rate",
                        self.rate,
                        "--ramp",
                        self.ramp,
                        "--t0",
                        self.t0,
                        "--spool",
                        self.spool,
                        "--heartbeat",
                        self.heartbeat,
                        *(["--lean"] if self.lean else []),
                    ),
                    cwd=self.tree or ROOT,
                    log=self.log,
                )
            )
            first += count
        for c in self.children:
            c.expect("ready", 60)
        return self

    def _ask(self, cmd, timeout=60):
        for c in self.children:
            c.send(cmd)
        return [json.loads(c.line(timeout)) for c in self.children]

    def progress(self):
        """Totals over the workers: devices, started, up (now), ever_up, sent,
        acked, behind (devices with readings not acknowledged), evicted,
        undrained (devices short of their mark() target)."""
        tot = {}
        for r in self._ask("progress"):
            for k, v in r.items():
                tot[k] = tot.get(k, 0) + v
        tot["t"] = round(time.time() - self.t0, 1)
        return tot

    def wait(self, cond, timeout, show=False, every=1.0):
        """Poll progress() until cond(progress) holds; returns (ok, progress)."""
        deadline = time.monotonic() + timeout
        while True:
            p = self.progress()
            if show:
                print(progress_line(p), flush=True)
            if cond(p):
                return True, p
            if time.monotonic() >= deadline:
                return False, p
            time.sleep(every)

    def mark(self):
        """From now on, note when each device's acknowledged mark reaches what
        it has sent by now (the drain after an outage)."""
        self._ask("mark")

    def phase(self):
        """ACKs of live readings from now on count apart (``after``): the
        steady figures end here (call it as an outage starts)."""
        self._ask("phase")

    def stop_publishing(self):
        self._ask("stop")

    def drained(self, timeout=90):
        """Stop publishing and wait until every device is up with nothing left
        unacknowledged; its summary() (AssertionError with the progress if not)."""
        self.stop_publishing()
        ok, p = self.wait(lambda p: p["up"] == self.n and not p["behind"], timeout)
        assert ok, p
        return self.summary()

    def summary(self):
        """Every device's figures, and the ACK latency histograms merged."""
        out = {
            "devices": [],
            "ack_ms": {"live": {}, "after": {}, "spooled": {}},
            "rate": self.rate,
            "workers": self.k,
            "ramp_s": self.ramp,
            "t0": self.t0,
            "spool": self.spool,
        }
        for r in self._ask("summary", 120):
            out["devices"] += r["devices"]
            for kind, h in r["ack_ms"].items():
                m = out["ack_ms"][kind]
                for ms, n in h.items():
                    m[int(ms)] = m.get(int(ms), 0) + n
        return out

    def close(self):
        for c in self.children:
            c.close()
        self.children = []

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()


def progress_line(p):
    return "swarm: %5.1f s  up %d/%d (ever %d)  sent %d  acked %d  behind %d  evicted %d%s" % (
        p["t"],
        p["up"],
        p["devices"],
        p["ever_up"],
        p["sent"],
        p["acked"],
        p["behind"],
        p["evicted"],
        "  undrained %d" % p["undrained"] if p.get("undrained") else "",
    )


def figures(summary):
    """The summary's headline figures: sessions up (s from the first start),
    ACK p50/p99 (ms) of readings published with a session up, acknowledged
    before phase() (``ack_``) and after it (``ack_after_``), and with no session
    (``ack_spooled_``), sent, acknowledged, and when the last device drained
    (wall clock, when marked)."""
    ds = summary["devices"]
    ups = [d["up"] for d in ds if d["up"] is not None]
    drained = [d["drained"] for d in ds if d["drain_target"] is not None]
    h = summary["ack_ms"]
    return {
        "devices": len(ds),
        "ever_up": len(ups),
        "sessions_up_s": round(max(ups) - min(d["start"] for d in ds), 2)
        if len(ups) == len(ds)
        else None,
        "sent": sum(d["sent"] for d in ds),
        "acked": sum(d["acked"] for d in ds),
        "spool_evicted": sum(d["spool_evicted"] for d in ds),
        "sessions": sum(d["sessions"] for d in ds),
        "ack_p50_ms": _pct(h["live"], 0.5),
        "ack_p99_ms": _pct(h["live"], 0.99),
        "ack_after_p50_ms": _pct(h["after"], 0.5),
        "ack_after_p99_ms": _pct(h["after"], 0.99),
        "ack_spooled_p50_ms": _pct(h["spooled"], 0.5),
        "ack_spooled_p99_ms": _pct(h["spooled"], 0.99),
        "drained_at": max(drained) if drained and None not in drained else None,
    }


# -- the checker ---------------------------------------------------------------


def check(log_dir, summary):
    """Every device's readings in the bridge's log (``log_dir``, or each
    of a list of logs: a bridge's workers'; read with tlog.read_log: sealed
    segments) against what it sent and had acknowledged (``summary``:
    Swarm.summary() or its JSON). Per device:
    ``acked_missing`` (acknowledged, not in the log: must be 0),
    ``spooled_missing`` (not acknowledged, not in the log, still in the
    device's spool), ``evicted_missing`` (the rest: evicted from a full
    spool, counted there), ``duplicates`` (records of a number beyond its
    first), ``gaps`` (numbers below the highest logged one that are not
    logged) and ``unknown`` (logged numbers the device never sent). Returns
    {"devices": {node: counts}, "totals": counts, "ok": no acked_missing,
    duplicates nor unknown}."""
    from edgebus import tlog

    devs = {d["node"]: d for d in summary["devices"]}
    seen = {n: collections.Counter() for n in devs}
    for one in [log_dir] if isinstance(log_dir, str) else log_dir:
        for _pos, r in tlog.read_log(one, decode_payload=False):
            d = devs.get(r.get("peer_node"))
            if d is not None and r.get("peer_sid") == d["sid"] and r["topic"][2:] == TOPIC:
                seen[d["node"]][r["seq"]] += 1
    out = {}
    keys = (
        "logged",
        "acked_missing",
        "spooled_missing",
        "evicted_missing",
        "duplicates",
        "gaps",
        "unknown",
    )
    tot = dict.fromkeys(keys, 0)
    for node, d in devs.items():
        got = seen[node]
        spool_from = d["tx_seq"] - d["spooled"]  # the spool holds [spool_from, tx_seq)
        top = max(got) if got else 0
        c = {
            "logged": len(got),
            "acked_missing": sum(1 for k in range(1, d["acked"] + 1) if k not in got),
            "spooled_missing": sum(
                1 for k in range(max(d["acked"] + 1, spool_from), d["sent"] + 1) if k not in got
            ),
            "evicted_missing": sum(
                1 for k in range(d["acked"] + 1, min(spool_from, d["sent"] + 1)) if k not in got
            ),
            "duplicates": sum(v - 1 for v in got.values()),
            "gaps": sum(1 for k in range(1, top) if k not in got),
            "unknown": sum(1 for k in got if not 1 <= k <= d["sent"]),
        }
        out[node] = c
        for k in keys:
            tot[k] += c[k]
    return {
        "devices": out,
        "totals": tot,
        "ok": tot["acked_missing"] == 0 and tot["duplicates"] == 0 and tot["unknown"] == 0,
    }


# -- the command ---------------------------------------------------------------


def _check_main(argv):
    ap = argparse.ArgumentParser(
        prog="python -m dev.swarm check",
        description="check a bridge's log against a swarm's summary",
    )
    ap.add_argument("log_dir")
    ap.add_argument("summary", help="the swarm.json a run wrote")
    a = ap.parse_args(argv)
    with open(a.summary) as f:
        res = check(a.log_dir, json.load(f))
    bad = {
        n: c
        for n, c in res["devices"].items()
        if c["acked_missing"] or c["duplicates"] or c["unknown"]
    }
    print(
        json.dumps(
            {
                "totals": res["totals"],
                "ok": res["ok"],
                "bad_devices": dict(sorted(bad.items())[:20]),
            },
            indent=1,
        )
    )
    return 0 if res["ok"] else 1


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        return _worker_main(argv[1:])
    if argv[:1] == ["check"]:
        return _check_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m dev.swarm", description=__doc__.splitlines()[0])
    ap.add_argument("--devices", "-n", type=int, default=100)
    ap.add_argument("--mqtt", required=True, metavar="HOST:PORT", help="the broker")
    ap.add_argument("--rate", type=float, default=1.0, help="readings/s per device")
    ap.add_argument(
        "--seconds",
        type=float,
        default=60.0,
        help="how long the devices publish (then they wait for their ACKs)",
    )
    ap.add_argument("--workers", type=int, help="processes (default: one per core)")
    ap.add_argument(
        "--ramp",
        type=float,
        help="seconds over which the devices start (default: 1 ms a device; 0: all at once)",
    )
    ap.add_argument("--prefix", default="swarm", help="node ids are PREFIX-1..PREFIX-N")
    ap.add_argument("--spool", type=int, default=DEFAULT_SPOOL, help="spool bytes per device")
    ap.add_argument("--out", default="out/swarm", help="where swarm.json goes")
    ap.add_argument(
        "--lean",
        action="store_true",
        help="the load generator: readings sealed ahead and written straight to each"
        " device's socket (the same sessions, frames and windows; no spool)",
    )
    ap.add_argument(
        "--print-toml",
        action="store_true",
        help="print the bridge's [mqtt] fragment for these devices and exit",
    )
    a = ap.parse_args(argv)
    host, _, port = a.mqtt.rpartition(":")
    if not host or not port.isdigit():
        ap.error("--mqtt takes HOST:PORT")
    if a.devices < 1 or a.rate <= 0:
        ap.error("--devices must be at least 1 and --rate above 0")
    sw = Swarm(
        a.devices,
        (host, int(port)),
        a.rate,
        a.workers,
        a.ramp,
        a.prefix,
        a.spool,
        log=os.path.join(a.out, "workers.log"),
        lean=a.lean,
    )
    if a.print_toml:
        print(sw.toml())
        return 0
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "bridge-devices.toml"), "w") as f:
        f.write(sw.toml())
    with sw:
        print(
            "swarm: %d devices in %d processes on %s; bridge fragment in %s"
            % (a.devices, sw.k, a.mqtt, os.path.join(a.out, "bridge-devices.toml")),
            flush=True,
        )
        try:
            sw.wait(lambda p: p["t"] >= a.seconds, a.seconds + 5, show=True)
            sw.stop_publishing()
            sw.wait(lambda p: not p["behind"], 60, show=True)
        except KeyboardInterrupt:
            pass
        summary = sw.summary()
    path = os.path.join(a.out, "swarm.json")
    with open(path, "w") as f:
        json.dump(summary, f)
    print(json.dumps(figures(summary)))
    print("wrote %s; check a log with: python -m dev.swarm check LOG_DIR %s" % (path, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
