"""The outsider trial, with real parts: someone who holds no key
and knows only the public protocol (``edgebus.link.frame`` and ``wire``,
docs/protocol.md sections 1, 2, 10, 14 and 17) sits on the broker of an MQTT
device link (a real ``edgebus fleet`` device and the bridge), or in the middle
of a ``[[peer]]`` link's TCP connection, and sends its own frames, framed as
the transport frames them (on MQTT bare and COBS-framed, section 1).

The injection trial (fixtures ``mqtt``, ``peer``) faces the strongest
outsider, one who reads everything: both ends seal with ``"mac"`` (the
bridge's ``seal``, the device's ``link.seal``), so every body is readable and
the outsider shapes its forgeries from the genuine frames: CALLs like the
genuine one (and sys/reboot, sys/ota/op), PUBs with the next sequence numbers, an ACK and
a SKIP for a high number, RESEND, BYE and ERROR, each without a seal and with
a random 12-byte one, and a genuine frame replayed. Nothing of it is acted on:
no call served, no reading taken as the peer's, nothing freed, skipped or
rewound, the session stays up and every genuine reading arrives once, in
order; each frame is counted (``forged``, ``replayed``) by the side it
reached. With ``SEAL = "off"`` the same trial runs unsealed, and fails.

The blind trial (fixtures ``mqtt_enc``, ``peer_enc``) runs at the defaults
(no seal setting anywhere), which encrypt over MQTT and TCP: after the
handshake no captured frame shows a topic or payload, yet the genuine call
and readings go through; the outsider, who now reads only the type bytes,
forges a CALL from the documented shape and replays a captured frame, and
neither is acted on, each counted."""

import asyncio
import os
from collections import Counter

import pytest

from dev.broker import Mosquitto, free_port
from dev.harness.mqtt import Watcher
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.bridge.links.peers import PEER_MAX_LEN
from edgebus.link import frame, wire
from edgebus.tools.commands import status
from edgebus.tools.sim.fleet import Fleet, merge
from tests.conftest import until

SEAL = "mac"  # both ends of the injection trial; "off": the trial unsealed
SEAL_LEN = 12  # counter (4) and tag (8) after a sealed body (section 17)
KEY = "outsider-trial-key"
MARK = "outsider"  # a key in every payload the outsider makes up
CALL_ID = 0x7FFF0000  # the outsider's call ids, from here up
HIGH = 60000  # the sequence number its ACK and SKIP name
SETTLE = 20  # genuine readings waited for after the attack
WAYS = ("up", "down")  # up: from the device (MQTT) or the dialler (TCP)
# What a readable frame after the handshake would show.
PLAIN = (b"sensor/temp", b'"simulated"', b"sys/config/get", b'"n":')
REAL_DEVICE = [pytest.mark.mosquitto, pytest.mark.micropython]


def kind(body):
    """A body's type: its first byte stays clear even encrypted (section 17)."""
    return body[0] & wire.TYPE_MASK


def of_type(bodies, *types):
    return [b for b in bodies if kind(b) in types]


def read(body):
    """What anyone reads of a frame body: (type, seq, value, blob), past a
    seal if there is one; None if it does not decode."""
    for b in (body, body[:-SEAL_LEN]):
        try:
            return wire.decode(b)
        except wire.WireError:
            pass
    return None


def forgeries(seen, calls=()):
    """The bodies an outsider makes from the genuine bodies ``seen`` one way
    that would be acted on: CALLs shaped as the last genuine CALL (to its
    topic, then to each of ``calls``), three PUBs shaped as the last genuine
    PUB with the next numbers and undecodable handshake-type frames with the
    same numbers, an ACK and a SKIP for HIGH, a RESEND of 1."""
    out = []
    for b in of_type(seen, wire.CALL)[-1:]:
        c = read(b)[2]
        out += [
            wire.encode(wire.CALL, [CALL_ID + i, t] + c[2:])
            for i, t in enumerate([c[1]] + list(calls))
        ]
    for b in of_type(seen, wire.PUB)[-1:]:
        _, s, p, _ = read(b)
        out += [
            wire.encode(wire.PUB, [p[0], {"n": -k, MARK: True}] + p[2:], (s + k) & 0xFFFF)
            for k in (1, 2, 3)
        ]
        # Deleting chosen readings: a numbered frame of a type the seal
        # passes in a handshake, which does not decode, twice for each of the
        # next numbers (spent as a gap, the genuine one then a duplicate).
        out += [
            bytes((t | wire.F_SEQ, ((s + k) >> 8) & 0xFF, (s + k) & 0xFF, 0x21))
            for k in (1, 2, 3)
            for t in (0, wire.HELLO, wire.HELLO_ACK, wire.AUTH)
            for _ in (1, 2)
        ]
    return out + [
        wire.encode(wire.ACK, HIGH),
        wire.encode(wire.SKIP, HIGH),
        wire.encode(wire.RESEND, 1),
    ]


# Sent after the others are counted: acted on, they would end the session
# before the others had their effect.
ENDS = (
    wire.encode(wire.BYE, {"reason": MARK}),
    wire.encode(wire.ERROR, {"code": "protocol", "msg": MARK}),
)


def framed(bodies, forms):
    """Each body in each transport form, without a seal and with a random one."""
    return [f(b, t) for b in bodies for f in forms for t in (None, os.urandom(SEAL_LEN))]


def attack(seen, replay, forms, calls=()):
    """The reading outsider's rounds one way, each (frames, (forged,
    replayed) to count): the forgeries of ``seen`` and the genuine body
    ``replay`` again, framed as the genuine frames (``forms[0]``); then BYE
    and ERROR."""
    acts = framed(forgeries(seen, calls), forms)
    ends = framed(ENDS, forms)
    return [(acts + [forms[0](replay, None)], (len(acts), 1)), (ends, (len(ends), 0))]


def blind(topic, replay, forms):
    """The blind outsider's round one way: a CALL to ``topic`` made from the
    documented shape (section 10) and the captured body ``replay`` again."""
    acts = framed([wire.encode(wire.CALL, [CALL_ID, topic, None, 5000, None])], forms)
    return [(acts + [forms[0](replay, None)], (len(acts), 1))]


def after_handshake(bodies):
    """The bodies after the last handshake frame (HELLO, HELLO_ACK, AUTH)."""
    start = 0
    for i, b in enumerate(bodies):
        if kind(b) <= wire.AUTH:
            start = i + 1
    return bodies[start:]


async def collect(sub, into):
    """Append every message of ``sub`` to ``into`` (a background task)."""
    while True:
        into.append(await sub.recv())


def numbers(msgs):
    """The "n" of each genuine reading (topic .../temp) in ``msgs``."""
    return [
        m.payload["n"]
        for m in msgs
        if m.topic[-1] == "temp" and type(m.payload) is dict and MARK not in m.payload
    ]


def foreign(msgs):
    return [m for m in msgs if type(m.payload) is dict and MARK in m.payload]


def health(msgs, part="link"):
    """The ``part`` ("link", "uplink") of the last sys/health in ``msgs`` (not
    a forged one), or None."""
    h = [
        m.payload[part]
        for m in msgs
        if m.topic[-2:] == ("sys", "health") and type(m.payload) is dict and part in m.payload
    ]
    return h[-1] if h else None


def link_status(links):
    """What each bridge's status (its answer on bridge/status) says of the
    link ``links`` names ({name: (bridge, link id)}): the counters, state and
    peer boot, and ``shown_errs``, the ERRS column `edgebus status` prints."""
    out = {}
    for k, (bridge, lid) in links.items():
        st = bridge.stats()
        s = st["links"][lid]
        row = [r for r in status.render(st).splitlines() if r.startswith(lid + " ")][0]
        out[k] = dict(
            s["counters"], status=s["state"], peer_sid=s["peer_sid"], shown_errs=int(row.split()[8])
        )
    return out


def delta(after, before, k):
    return after.get(k, 0) - before.get(k, 0)


def refused(rig, before, want):
    """True once each party counted what was sent to it."""
    now = rig.snapshot()
    return all(
        delta(now[k], before[k], "forged") >= f and delta(now[k], before[k], "replayed") >= r
        for k, (f, r) in want.items()
    )


async def settle(cond, timeout=20):
    """True once cond() holds, False if it never does: the trial still hands
    what it saw to the tests, which say what went wrong (unsealed, a lot)."""
    try:
        await until(cond, timeout)
        return True
    except AssertionError:
        return False


async def strike(rig, plan):
    """Carry out ``plan`` ({way: rounds}, attack() or blind()) round by round,
    each once its receiver (``rig.receiver[way]``) counted the last and the
    rig saw every frame out; returns (all counted, parties' counters before,
    each party's (forged, replayed) sent)."""
    before = rig.snapshot()
    want = {}
    ok = True
    for r in range(max(map(len, plan.values()))):
        for way, rounds in plan.items():
            if r < len(rounds):
                frames, (f, n) = rounds[r]
                rig.inject(way, frames)
                k = rig.receiver[way]
                want[k] = tuple(map(sum, zip(want.get(k, (0, 0)), (f, n))))
        ok = await settle(lambda: refused(rig, before, want) and rig.done()) and ok
    return ok, before, want


async def more_readings(rig):
    """True once every genuine reading stream grew by SETTLE."""
    n0 = {k: max(v) for k, v in rig.readings().items()}
    return await settle(lambda: all(max(v) >= n0[k] + SETTLE for k, v in rig.readings().items()))


def answers(bodies, genuine):
    """(REPLY/FAIL values to the outsider's calls, REPLYs to the genuine call)."""
    res = [r[2] for r in map(read, of_type(bodies, wire.REPLY, wire.FAIL)) if r is not None]
    return [v for v in res if v[0] >= CALL_ID], sum(1 for v in res if v[0] == genuine)


def outcome(rig, ok, before, want):
    after = rig.snapshot()
    return {
        "settled": ok,
        "parties": {k: (before[k], after[k], want[k]) for k in want},
        "bridges": list(rig.links),
        "readings": rig.readings(),
        "foreign": rig.foreign(),
        "frames": {w: after_handshake(rig.bodies(w)) for w in WAYS},
    }


async def reading_trial(rig):
    """The injection trial: the outsider reads the genuine frames (seal
    "mac") and forges from them."""
    assert await rig.call() == rig.callee  # a genuine call, captured
    await until(
        lambda: (
            of_type(rig.bodies("down"), wire.CALL)
            and of_type(rig.bodies("up"), wire.PUB)
            and rig.ready()
        )
    )
    up, down = rig.bodies("up"), rig.bodies("down")
    call = of_type(down, wire.CALL)[-1]
    forms = rig.forms()
    ok, before, want = await strike(
        rig,
        {
            "up": attack(up, of_type(up, wire.PUB)[-1], forms),
            "down": attack(down, call, forms, rig.calls),
        },
    )
    rig.forge_presence()
    ok = await more_readings(rig) and ok
    return dict(outcome(rig, ok, before, want), answers=answers(rig.bodies("up"), read(call)[2][0]))


async def blind_trial(rig):
    """The outsider at the defaults (encrypted): it forges from the
    documented shapes and replays captured frames, picked by type byte."""
    got = await rig.call()
    await until(
        lambda: (
            of_type(rig.bodies("down"), wire.CALL)
            and of_type(rig.bodies("up"), wire.PUB)
            # the genuine call's answer, which the outsider may hear after
            # the caller did: counted before the baseline, not as an answer
            # to a forgery
            and of_type(rig.bodies("up"), wire.REPLY)
            and rig.ready()
        )
    )

    def replies():
        return sum(len(of_type(rig.bodies(w), wire.REPLY, wire.FAIL)) for w in WAYS)

    r0 = replies()
    up, down = rig.bodies("up"), rig.bodies("down")
    forms = rig.forms()
    ok, before, want = await strike(
        rig,
        {
            "up": blind(rig.call_topic, of_type(up, wire.PUB)[-1], forms),
            "down": blind(rig.call_topic, of_type(down, wire.CALL)[-1], forms),
        },
    )
    rig.forge_presence()
    ok = await more_readings(rig) and ok
    return dict(outcome(rig, ok, before, want), call=(got, rig.callee), replies=(r0, replies()))


# -- an outsider on the broker of an MQTT device link ---------------------------


class BrokerRig:
    """A fleet device and the bridge over mosquitto, and the outsider: a
    paho client on the broker that hears every message and publishes its own."""

    receiver = {"up": "bridge", "down": "device"}
    calls = ["sys/reboot", "sys/ota/op"]
    call_topic = "sys/config/get"

    def __init__(self, fleet, port):
        self.node = self.callee = fleet.devices[0]["node"]
        self.topic = {w: "edgebus/%s/%s" % (self.node, w) for w in WAYS}
        self.spy = Watcher(port, ["edgebus/#"], client_id="outsider")
        self.own = Counter()  # what the outsider published (the spy hears it too)
        self.seen = []  # the host bus's dev/# messages

    def messages(self, way):
        """The peers' messages one way. A replay is a genuine message again:
        its copies heard last are the outsider's."""
        ms = [m[2] for m in self.spy.messages(self.topic[way])]
        left = Counter(ms)
        left.subtract(self.own)
        got = []
        for m in ms:
            if left[m] > 0:
                left[m] -= 1
                got.append(m)
        return got

    def bodies(self, way):
        return [b for b in map(frame.unmessage, self.messages(way)) if b]

    def forms(self):
        """Framed as the genuine messages are (bare in a sealed session whose
        ends list "bare"), then the other way: a receiver takes both."""
        forms = [
            lambda b, t: frame.message(b, tail=t, bare=True),
            lambda b, t: frame.message(b, tail=t),
        ]
        return forms if self.messages("up")[-1][0] == 0 else forms[::-1]

    def inject(self, way, frames):
        for f in frames:
            self.own[f] += 1
            self.spy.c.publish(self.topic[way], f, 0)

    def forge_presence(self):
        """Says "offline" for the device (to the bridge) and for the bridge
        (to the device), as only their last wills should: each side checks
        its sealed peer still answers, and the sessions stay up."""
        self.spy.c.publish("edgebus/%s/state" % self.node, b"offline", 0)
        self.spy.c.publish("edgebus/_bridge", b"offline", 0)

    def done(self):
        heard = Counter(m[2] for m in self.spy.messages())
        return all(heard[f] >= k for f, k in self.own.items())

    def ready(self):
        return health(self.seen) is not None

    def snapshot(self):
        h = health(self.seen)
        return dict(link_status(self.links), device=dict(h, status=h["state"]))

    def readings(self):
        return {"device": numbers(self.seen)}

    def foreign(self):
        return foreign(self.seen)


def broker_run(tmp, trial, seal=None):
    """``trial(rig)`` on a BrokerRig; ``seal``: the bridge's seal and the
    device's link.seal (None: the defaults)."""
    device = {"link": {"seal": seal}} if seal else None
    with (
        Mosquitto() as broker,
        Fleet(
            tmp / "fleet",
            mqtt=1,
            period=0.1,
            health_period=0.5,
            broker=("127.0.0.1", broker.port),
            config=device,
        ) as fleet,
    ):
        rig = BrokerRig(fleet, broker.port)
        more = {"seal": seal} if seal else {}
        cfg = bridge_config.parse(
            merge(
                fleet.bridge_config(("127.0.0.1", broker.port)),
                {"bridge": dict(state_dir=str(tmp / "state"), heartbeat=1.0, **more)},
            )
        )
        fleet.start()

        async def main():
            b = Bridge(cfg)
            task = asyncio.create_task(b.run())
            c = b.bus.connect()
            pump = asyncio.create_task(collect(c.subscribe("dev/#", queue_len=64), rig.seen))
            get = ("dev", rig.node, "sys", "config", "get")
            rig.links = {"bridge": (b, "mqtt:" + rig.node)}
            rig.call = lambda: c.call(get, "node", timeout=5)
            try:
                # In session, and the last report made in it: a report spooled
                # before the session came in first is no baseline (sessions 0).
                await until(
                    lambda: (
                        get in b.bus.endpoints() and (health(rig.seen) or {}).get("state") == "up"
                    ),
                    60,
                )
                return await trial(rig)
            finally:
                b.stop()
                await task
                pump.cancel()

        try:
            res = asyncio.run(main())
        finally:
            rig.spy.close()
        res["restarts"] = fleet.devices[0]["restarts"]
        return res


# -- a man in the middle of a [[peer]] link -------------------------------------


class Relay:
    """The man in the middle of one TCP connection at a time: forwards both
    ways ("up": from the dialler), keeps each way's frames, and puts its own
    between them at a frame boundary, so it cuts no genuine frame."""

    def __init__(self, target):
        self.target = target
        self.frames = {"up": [], "down": []}
        self.out = {}
        self.clean = {}
        self.held = {"up": [], "down": []}

    async def start(self):
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _conn(self, r, w):
        tr, tw = await asyncio.open_connection("127.0.0.1", self.target)
        self.out = {"up": tw, "down": w}
        self.clean = {"up": True, "down": True}
        await asyncio.gather(self._pump(r, "up"), self._pump(tr, "down"))

    async def _pump(self, r, way):
        fr = frame.FrameReader(PEER_MAX_LEN)
        w = self.out[way]
        try:
            while data := await r.read(65536):
                self.frames[way] += fr.feed(data)
                w.write(data)
                self.clean[way] = data[-1] == 0
                if self.clean[way] and self.held[way]:
                    w.write(b"".join(self.held[way]))
                    self.held[way] = []
        except ConnectionError:
            pass
        finally:
            w.close()

    def inject(self, way, frames):
        if self.clean.get(way):
            self.out[way].write(b"".join(frames))
        else:
            self.held[way] += frames

    def close(self):
        self.server.close()
        for w in self.out.values():
            w.close()


class PathRig:
    """Two bridges, "gw" dialling "site" through the Relay: readings both
    ways, a gateway endpoint the site calls (frames "down" to gw)."""

    receiver = {"up": "site", "down": "gw"}
    calls = ()
    callee = "probe"
    call_topic = "dev/probe/sys/config/get"

    def forge_presence(self):
        """A [[peer]] link has no presence to forge."""

    def __init__(self, relay, site, gw):
        self.relay = relay
        self.links = {"site": (site, "peer:gw"), "gw": (gw, "peer:site")}
        self.at = {"to site": [], "to gw": []}

    def bodies(self, way):
        return self.relay.frames[way]

    def forms(self):
        return [lambda b, t: frame.encode(b, lead=True, tail=t)]

    def inject(self, way, frames):
        self.relay.inject(way, frames)

    def done(self):
        return True

    ready = done

    def snapshot(self):
        return link_status(self.links)

    def readings(self):
        return {k: numbers(v) for k, v in self.at.items()}

    def foreign(self):
        return foreign(self.at["to site"] + self.at["to gw"])


def path_run(tmp, trial, seal=None):
    """``trial(rig)`` on a PathRig; ``seal``: both bridges' (None: the default)."""
    more = {"seal": seal} if seal else {}

    async def main():
        site_port = free_port()
        relay = await Relay(site_port).start()
        site = Bridge(
            bridge_config.parse(
                {
                    "bridge": dict(node="site", state_dir=str(tmp / "site"), heartbeat=0.5, **more),
                    "peer": [
                        {
                            "node": "gw",
                            "key": KEY,
                            "listen": "127.0.0.1:%d" % site_port,
                            "imports": ["dev/#"],
                            "import_calls": ["dev/#"],
                            "exports": ["site/#"],
                        }
                    ],
                }
            )
        )
        gw = Bridge(
            bridge_config.parse(
                {
                    "bridge": dict(node="gw", state_dir=str(tmp / "gw"), heartbeat=0.5, **more),
                    "peer": [
                        {
                            "node": "site",
                            "key": KEY,
                            "connect": "127.0.0.1:%d" % relay.port,
                            "backoff_max": 0.5,
                            "exports": ["dev/#"],
                            "export_calls": ["dev/+/sys/#"],
                            "imports": ["site/#"],
                        }
                    ],
                }
            )
        )
        rig = PathRig(relay, site, gw)
        tasks = [asyncio.create_task(x.run()) for x in (site, gw)]
        sc, gc = site.bus.connect(), gw.bus.connect()
        ep = gc.bind(rig.call_topic, queue_len=8)
        tasks += [
            asyncio.create_task(collect(sc.subscribe("dev/#", queue_len=256), rig.at["to site"])),
            asyncio.create_task(collect(gc.subscribe("site/#", queue_len=256), rig.at["to gw"])),
            asyncio.create_task(_serve(ep)),
            asyncio.create_task(_readings(gc, "dev/probe/sensor/temp")),
            asyncio.create_task(_readings(sc, "site/probe/sensor/temp")),
        ]
        get = tuple(rig.call_topic.split("/"))
        rig.call = lambda: sc.call(get, "node", timeout=5)
        try:
            await until(lambda: get in site.bus.endpoints() and all(rig.at.values()), 30)
            return await trial(rig)
        finally:
            for x in (gw, site):
                x.stop()
            await asyncio.gather(*tasks[:2])
            for t in tasks[2:]:
                t.cancel()
            relay.close()

    return asyncio.run(main())


async def _serve(ep):
    async for req in ep:
        req.reply("probe")


async def _readings(c, topic):
    n = 0
    while True:
        c.publish(topic, {"n": n})
        n += 1
        await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
def mqtt(tmp_path_factory):
    return broker_run(tmp_path_factory.mktemp("mqtt"), reading_trial, SEAL)


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    return path_run(tmp_path_factory.mktemp("peer"), reading_trial, SEAL)


@pytest.fixture(scope="module")
def mqtt_enc(tmp_path_factory):
    return broker_run(tmp_path_factory.mktemp("mqtt_enc"), blind_trial)


@pytest.fixture(scope="module")
def peer_enc(tmp_path_factory):
    return path_run(tmp_path_factory.mktemp("peer_enc"), blind_trial)


@pytest.fixture(params=[pytest.param("mqtt", marks=REAL_DEVICE), "peer"])
def trial(request):
    return request.getfixturevalue(request.param)


@pytest.fixture(params=[pytest.param("mqtt_enc", marks=REAL_DEVICE), "peer_enc"])
def defaults(request):
    return request.getfixturevalue(request.param)


# -- what the injection trial saw -------------------------------------------------


def refusals_counted(trial):
    """Each party counted exactly what was sent to it and its session is up."""
    assert trial["settled"], trial["parties"]
    for name, (before, after, (forged, replayed)) in trial["parties"].items():
        assert delta(after, before, "forged") == forged, (name, before, after)
        assert delta(after, before, "replayed") == replayed, (name, before, after)
        assert after["sessions"] == before["sessions"], (name, before, after)
        assert after["status"] == "up", (name, after)


def readings_in_order(trial):
    assert trial["foreign"] == []
    for name, ns in trial["readings"].items():
        assert len(ns) > SETTLE and ns == list(range(ns[0], ns[0] + len(ns))), (name, ns)


def test_each_frame_is_refused_counted_and_the_session_stays_up(trial):
    refusals_counted(trial)
    for name in trial["bridges"]:
        before, after, _ = trial["parties"][name]
        for k in ("peer_sid", "duplicates", "gaps", "resends"):
            assert after.get(k) == before.get(k), (name, k, before, after)


def test_no_call_of_the_outsiders_is_served(trial):
    theirs, genuine = trial["answers"]
    assert theirs == [] and genuine == 1  # the replayed genuine call served once


def test_every_genuine_reading_arrives_once_in_order_and_none_of_the_outsiders(trial):
    readings_in_order(trial)


def enough(way, bodies):
    """Whether ``bodies`` are a sample worth checking: the readings' way has
    every reading since the handshake; the other way at least a few frames,
    ACKs among them (one covers half a second of readings: ack_gap)."""
    if way == "up":
        return len(bodies) > SETTLE
    return len(bodies) >= 5 and bool(of_type(bodies, wire.ACK))


def test_every_frame_after_the_handshake_is_tagged(trial):
    for way, bodies in trial["frames"].items():
        assert enough(way, bodies), (way, len(bodies))
        ctrs = [int.from_bytes(b[-SEAL_LEN:-8], "big") for b in bodies]
        assert ctrs == list(range(1, len(bodies) + 1)), (way, ctrs[:20])
        for b in bodies:
            wire.decode(b[:-SEAL_LEN])  # what is left is a readable body


@pytest.mark.mosquitto
@pytest.mark.micropython
def test_the_fleet_device_did_not_reboot_and_says_what_it_refused(mqtt):
    before, after, _ = mqtt["parties"]["device"]
    assert mqtt["restarts"] == 0
    assert after["state"] == "up" and after["sid"] == before["sid"]
    for k in ("sessions", "session_ends", "retransmitted", "gaps"):
        assert after[k] == before[k], (k, before, after)
    assert "frame refused" in (after["last_error"] or ""), after


@pytest.mark.mosquitto
@pytest.mark.micropython
def test_the_fleet_device_counts_each_frame_it_refused(mqtt):
    before, after, (forged, replayed) = mqtt["parties"]["device"]
    assert delta(after, before, "forged") == forged
    assert delta(after, before, "replayed") == replayed


def test_edgebus_status_counts_the_refused_frames_among_the_errors(trial):
    for name in trial["bridges"]:
        before, after, (forged, replayed) = trial["parties"][name]
        assert delta(after, before, "shown_errs") >= forged + replayed, (name, after)


# -- what the blind trial saw (the defaults) --------------------------------------


def test_at_the_defaults_no_frame_after_the_handshake_is_readable(defaults):
    for way, bodies in defaults["frames"].items():
        assert enough(way, bodies) and of_type(bodies, wire.PUB, wire.CALL), (way, len(bodies))
        ctrs = [int.from_bytes(b[-SEAL_LEN:-8], "big") for b in bodies]
        assert ctrs == list(range(1, len(bodies) + 1)), (way, ctrs[:20])
        for b in bodies:
            assert not any(p in b for p in PLAIN), (way, b)


def test_at_the_defaults_the_genuine_call_and_readings_go_through(defaults):
    got, want = defaults["call"]
    assert got == want
    readings_in_order(defaults)


def test_at_the_defaults_blind_forgeries_and_a_replay_are_refused_and_counted(defaults):
    refusals_counted(defaults)
    before, after = defaults["replies"]
    assert after == before, "an outsider's call was answered"


# -- a message larger than a device's heap ---------------------------------------

OVERSIZE = 200_000  # bytes: more than the fleet device's whole heap


async def oversize_trial(rig):
    """The outsider publishes a message longer than any frame on the device's
    down topic, where the device once held all that MQTT's header claimed
    (MemoryError out of its link): it is read through and dropped, counted;
    the session stays up and the readings go on."""
    before = health(rig.seen)
    rig.spy.c.publish(rig.topic["down"], b"\xff" * OVERSIZE, 0)
    ok = await settle(
        lambda: ((health(rig.seen, "uplink") or {}).get("transport") or {}).get("oversize")
    )
    ok = await more_readings(rig) and ok
    return {
        "settled": ok,
        "before": before,
        "after": health(rig.seen),
        "uplink": health(rig.seen, "uplink"),
        "readings": rig.readings(),
        "foreign": rig.foreign(),
    }


@pytest.fixture(scope="module")
def mqtt_oversize(tmp_path_factory):
    return broker_run(tmp_path_factory.mktemp("mqtt_oversize"), oversize_trial)


@pytest.mark.mosquitto
@pytest.mark.micropython
def test_an_outsiders_oversize_message_is_dropped_and_counted_by_the_device(mqtt_oversize):
    t = mqtt_oversize
    assert t["settled"], t["uplink"]
    assert t["uplink"]["transport"] == {"oversize": 1}, t["uplink"]
    assert t["restarts"] == 0
    assert t["after"]["sessions"] == t["before"]["sessions"] and t["after"]["state"] == "up"
    readings_in_order(t)


# -- keeping a dead session up ------------------------------------------------------

# Frames with no seal that used to count as a sign of life: the handshake types
# the seal lets through, numbered or not, and a type 0, each bare and framed.
ALIVE = [
    f(b)
    for b in (
        wire.encode(wire.HELLO_ACK, {"to": "x"}),
        wire.encode(wire.AUTH, {"proof": "0" * 64}),
        bytes((wire.AUTH | wire.F_SEQ, 0, 1, 0x21)),
        bytes((0, 0x21)),
    )
    for f in (lambda b: frame.message(b, bare=True), frame.message)
]


async def _flood(spy, topic, until_true, limit=20.0):
    """Publish ALIVE on ``topic`` every 0.3 s until ``until_true()`` or
    ``limit`` seconds: True if it came to hold while the flood went on."""
    t0 = asyncio.get_running_loop().time()
    while asyncio.get_running_loop().time() - t0 < limit:
        if until_true():
            return True
        for f in ALIVE:
            spy.c.publish(topic, f, 0)
        await asyncio.sleep(0.3)
    return until_true()


@pytest.mark.mosquitto
@pytest.mark.micropython
def test_an_outsider_keeps_no_dead_session_up(tmp_path):
    """Frames without a seal every 0.3 s (they once kept sessions up 42 s):
    the bridge's link to a frozen device goes down by liveness, and a device
    whose bridge restarted links to the new one, each while the flood goes
    on, and each side counts the flood as forged."""
    import signal

    with (
        Mosquitto() as broker,
        Fleet(
            tmp_path / "fleet",
            mqtt=1,
            period=0.2,
            health_period=0.5,
            broker=("127.0.0.1", broker.port),
        ) as fleet,
    ):
        node = fleet.devices[0]["node"]
        lid = "mqtt:" + node
        cfg = bridge_config.parse(
            merge(
                fleet.bridge_config(("127.0.0.1", broker.port)),
                {"bridge": dict(state_dir=str(tmp_path / "state"), heartbeat=1.0)},
            )
        )
        fleet.start()
        spy = Watcher(broker.port, ["edgebus/%s/state" % node], client_id="outsider")

        def state(b):
            return b.stats()["links"].get(lid, {}).get("state")

        async def main():
            b = Bridge(cfg)
            task = asyncio.create_task(b.run())
            try:
                await until(lambda: state(b) == "up", 60)
                proc = fleet.devices[0]["proc"]
                proc.send_signal(signal.SIGSTOP)  # the device says nothing more
                try:
                    down = await _flood(spy, "edgebus/%s/up" % node, lambda: state(b) != "up")
                finally:
                    proc.send_signal(signal.SIGCONT)
                c = b.stats()["links"][lid]["counters"]
                assert down and c.get("liveness_timeouts", 0) >= 1, c
                assert c.get("forged", 0) >= len(ALIVE), c
                await until(lambda: state(b) == "up", 60)
            finally:
                b.stop()
                await task
            # The bridge restarts while the outsider floods the device.
            b = Bridge(cfg)
            task = asyncio.create_task(b.run())
            try:
                relinked = await _flood(spy, "edgebus/%s/down" % node, lambda: state(b) == "up")
                assert relinked, b.stats()["links"].get(lid)
            finally:
                b.stop()
                await task

        try:
            asyncio.run(main())
        finally:
            spy.close()
