"""The link's state machine against an outsider (Hypothesis stateful testing;
docs/protocol.md section 17). A device link and a host link exchange their
genuine frames (some lost on the way), handshake, publish and tick in any
order, while an outsider without the key puts frames of every type, flags and
body, unsealed or with a tag no one computed, into either side in any state.

Whenever the side is in a live sealed session, such a frame must leave
everything an outsider must not touch as it was (tests/portable/sealkit.py:
numbers, spool, last-received time, window, session, every counter but the
refusals). In any state it never makes a session, spends a number or puts
anything on the bus; and what the host's bus gets is only what the device
published, each once. The portable sweep of the same frames, run under
MicroPython too, is tests/portable/test_link_unsealed.py."""

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import edgebus
from edgebus.link import handshake, seal, tx
from edgebus.link.link import Link
from tests.portable import sealkit

KEY = b"property-key"
SIDES = st.sampled_from(("dev", "host"))


class Outsider(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dev, self.host = edgebus.Bus(), edgebus.Bus()
        self.dl = Link(
            self.dev, "dev1", key=KEY, role="initiator", exports=[("sensor/#", "")], heartbeat=1.0
        )
        self.hl = Link(
            self.host,
            "host",
            key=KEY,
            role="responder",
            peer="dev1",
            imports=[("#", "dev/{node}")],
            heartbeat=1.0,
        )
        tx.observe(self.dl, None)  # what Link.start() does, without its pump task
        self.pub = self.dev.connect()
        self.sub = self.host.connect().subscribe("dev/dev1/#", queue_len=4096)
        self.published = 0
        self.got = set()
        self.sessions = 0

    def _pair(self, side):
        return (self.dl, self.hl) if side == "dev" else (self.hl, self.dl)

    @rule()
    def hello(self):
        handshake.hello(self.dl)

    @rule()
    def connect(self):
        """A whole handshake on a clean line: HELLO, then both sides' frames
        until neither has more (most steps then find a live session)."""
        handshake.hello(self.dl)
        for _ in range(4):
            self.line("dev", 16, -1)
            self.line("host", 16, -1)

    @rule(side=SIDES, n=st.integers(1, 8), lose=st.integers(-1, 7))
    def line(self, side, n, lose):
        """Up to n of side's frames, sealed as its writer seals them, to its
        peer; the one at index ``lose`` is lost on the way."""
        a, b = self._pair(side)
        for i in range(n):
            body = a.next_body()
            if body is None:
                return
            x, tail = seal.out(a, body)
            if i != lose:
                b.feed(bytes(x) + (bytes(tail) if tail is not None else b""))

    @rule()
    def publish(self):
        self.published += 1
        self.pub.publish("sensor/t", self.published)

    @rule(side=SIDES)
    def tick(self, side):
        self._pair(side)[0].tick()

    @rule(
        side=SIDES,
        t=st.sampled_from(sealkit.TYPES),
        flags=st.sampled_from(sealkit.FLAGS),
        shape=st.sampled_from(("empty", "undecodable", "valid")),
        tagged=st.booleans(),
    )
    def outsider(self, side, t, flags, shape, tagged):
        link = self._pair(side)[0]
        b = sealkit.frames(link, t, flags, shape)[tagged]
        what = "%r to the %s in state %s" % (b, link.role, link.status)
        live = link.status == "up" and link._seal is not None
        before = sealkit.snapshot(link)
        t_rx = link._t_rx
        c = link.counters
        s0, rx0, imp0 = c.get("sessions", 0), link.state.get("rx_next"), c.get("imported", 0)
        link.feed(b)
        if live:
            sealkit.unchanged(link, before, t_rx, what)
        assert c.get("sessions", 0) == s0, what  # no key: never a session
        assert link.state.get("rx_next") in (rx0, None), what  # no number spent
        assert c.get("imported", 0) == imp0, what

    @invariant()
    def only_what_the_device_published_once(self):
        while True:
            m = self.sub.recv_nowait()
            if m is None:
                break
            if m.topic[2:] == ("sensor", "t"):
                assert type(m.payload) is int and 1 <= m.payload <= self.published, m.payload
                assert m.payload not in self.got, m.payload
                self.got.add(m.payload)


Outsider.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_outsider_never_moves_a_sealed_session = Outsider.TestCase
