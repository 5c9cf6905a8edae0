"""The load generator's device (``python -m dev.swarm --lean``, and the
swarm benchmark's ``lean`` trials): a swarm device whose readings skip the
device's own bus, spool and writer, so that the simulator's cost per reading
is what it must be (a seal and a socket write) and the bridge's capacity is
what a trial measures."""

import asyncio
import collections
import time

from dev.swarm import TOPIC, Device
from edgebus import compat
from edgebus.compat import wait_for
from edgebus.link import seal, wire
from edgebus.link.frame import message
from edgebus.link.mqtt import packet, string


class Lean(Device):
    """A device of the load generator: the same session (handshake, seal,
    window, ACKs read by its real link), but once it is up its readings are
    sealed ahead, a few at a time (AHEAD), and each written as one MQTT
    packet to its socket when due: no bus, observer, spool or writer task per
    reading, so one core offers the bridge many times what full devices do.
    Each reading is what the link would send: numbered in turn, stamped
    with the link clock at its due time, sealed (and encrypted) with the
    session's keys, within the window the bridge gives. From the takeover on
    the link's own frames are not sent (Transport.lean; counted): the
    readings keep the seal's counter rising. A RESEND seals what follows
    again (a resealed frame takes a new counter). A session that ends stops
    the readings (``lean_stopped``): a lean device does not spool."""

    AHEAD = 4  # readings sealed ahead: their stamps are the due times

    def __init__(self, *a):
        super().__init__(*a)
        self.ready = collections.deque()  # (seq, packet) sealed, not sent
        self.bodies = {}  # seq -> (body, due ms): sent or ready, not acknowledged
        self.first = None  # the first lean number
        self.resends = 0
        self.lean_stopped = None  # why the readings stopped early
        self.acked_event = asyncio.Event()  # set by each ACK: the window may have moved

    def on_ack(self, n):
        super().on_ack(n)
        self.acked_event.set()

    def _body(self, seq, ms):
        obj = [wire.topic_out(TOPIC), {"n": seq, "temp": 20.0 + seq % 10}, None, ms]
        return wire.join(wire.parts(wire.PUB, obj, seq))

    def _seal(self, seq, body):
        t = self.transport
        b, tl = seal.out(self.link, bytearray(body), fresh=True)
        return packet(0x30, string(t.up) + message(b, t.max_len, tl, t.bare))

    def _ahead(self, due):
        """Seal the next readings, stamped with their due times (``due``: the next's, monotonic)."""
        link = self.link
        now_ms, now = compat.ms(), time.monotonic()
        for i in range(self.AHEAD):
            seq = link.tx_seq
            link.tx_seq = seq + 1
            body = self._body(seq, now_ms + int(1000 * (due + i * self.period - now)))
            self.bodies[seq] = body
            self.ready.append((seq, self._seal(seq, body)))

    def _reseal(self, n):
        """RESEND n: everything from n sealed again, with new counters."""
        self.resends += 1
        self.ready.clear()
        for seq in sorted(k for k in self.bodies if k >= n):
            self.ready.append((seq, self._seal(seq, self.bodies[seq])))

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
        session = link.counters.get("sessions")
        tr = self.transport
        tr.lean = True
        resends = link.counters.get("resends", 0)
        due = time.monotonic()
        while self.publishing:
            if link.status != "up" or link.counters.get("sessions") != session:
                self.lean_stopped = "session ended"
                break
            r = link.counters.get("resends", 0)
            if r != resends:
                resends = r
                self._reseal(max(link.tx_acked, self.first))
            if not self.ready:
                self._ahead(due)
            seq, pkt = self.ready[0]
            w = link._tx_window  # the bridge's pace (None: none)
            if w is not None and seq >= max(link.tx_acked, self.first) + w:
                self.acked_event.clear()  # the window is full: wait for an ACK
                try:
                    await wait_for(self.acked_event.wait(), 0.5)
                except asyncio.TimeoutError:
                    pass
                continue
            self.ready.popleft()
            tr.w.write(pkt)
            if seq > self.sent:
                self.sent = seq
                self.unacked.append((seq, due, True))
                due += self.period
            for k in [k for k in self.bodies if k < link.tx_acked]:
                del self.bodies[k]
            if not self.ready or self.ready[0][0] > self.sent:  # resent ones go at once
                await asyncio.sleep(max(0.0, due - time.monotonic()))
        # Numbers sealed and not sent are not spent: the summary's tx_seq follows the last sent.
        link.tx_seq = self.sent + 1
        self.ready.clear()
        tr.lean = False

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
