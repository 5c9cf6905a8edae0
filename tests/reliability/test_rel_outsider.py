"""The outsider trial (issue 24), with real parts: someone who holds no key
and knows only the public protocol (``edgebus.link.frame`` and ``wire``,
docs/protocol.md sections 1, 2, 14 and 17) sits on the broker of an MQTT
device link, or in the middle of a ``[[peer]]`` link's TCP connection. It
reads every frame and sends its own, framed as the real peer frames them:
CALLs, PUBs with the next sequence numbers, an ACK and a SKIP for a high
number, RESEND, BYE and ERROR, each bare and with a random 12-byte seal, and
one genuine frame it captured, replayed byte for byte.

Sealed (section 17), nothing of it is acted on: no call served, no reading
taken as the peer's, nothing freed, skipped or rewound, the session stays up
and every genuine reading arrives once, in order; each frame is counted
(``forged``, ``replayed``) by the side it reached.

One run per transport (module fixtures ``mqtt`` and ``peer``); the tests read
what it saw. With ``SEAL = "off"`` the same trial runs unsealed, and fails.
Over MQTT and TCP the sessions are encrypted (the bridge's and the
firmware's default there), so the outsider also reads nothing."""
import asyncio
import os
from collections import Counter

import pytest

from bridge import config as bridge_config
from bridge import status
from bridge.daemon import Bridge
from bridge.peers import PEER_MAX_LEN
from dev.broker import Mosquitto, free_port
from dev.presence import Watcher
from edgebus.link import frame, wire
from tests.conftest import until
from tools.fleet import Fleet

SEAL = "offer"          # [bridge] seal of every bridge here; "off": the trial unsealed
SEAL_LEN = 12           # counter (4) and tag (8) after a sealed body (section 17)
KEY = "outsider-trial-key"
MARK = "outsider"       # a key in every payload the outsider makes up
CALL_ID = 0x7FFF0000    # the outsider's call ids, from here up
HIGH = 60000            # the sequence number its ACK and SKIP name
SETTLE = 20             # genuine readings waited for after the attack
REAL_DEVICE = [pytest.mark.mosquitto, pytest.mark.micropython]


def read(body):
    """What anyone reads of a frame body: (type, seq, value, blob), past a
    seal if there is one; None if it does not decode."""
    for b in (body, body[:-SEAL_LEN]):
        try:
            return wire.decode(b)
        except wire.WireError:
            pass
    return None


def of_type(bodies, t):
    return [b for b in bodies if (read(b) or (None,))[0] == t]


def forgeries(seen, calls=()):
    """The bodies an outsider makes from the genuine bodies ``seen`` one way
    that would be acted on: CALLs shaped as the last genuine CALL (to its
    topic, then to each of ``calls``), three PUBs shaped as the last genuine
    PUB with the next numbers, an ACK and a SKIP for HIGH, a RESEND of 1."""
    out = []
    for b in of_type(seen, wire.CALL)[-1:]:
        c = read(b)[2]
        out += [wire.encode(wire.CALL, [CALL_ID + i, t] + c[2:])
                for i, t in enumerate([c[1]] + list(calls))]
    for b in of_type(seen, wire.PUB)[-1:]:
        _, s, p, _ = read(b)
        out += [wire.encode(wire.PUB, [p[0], {"n": -k, MARK: True}] + p[2:], (s + k) & 0xFFFF)
                for k in (1, 2, 3)]
    return out + [wire.encode(wire.ACK, HIGH), wire.encode(wire.SKIP, HIGH),
                  wire.encode(wire.RESEND, 1)]


# Sent after the others are counted: acted on, they would end the session
# before the others had their effect.
ENDS = (wire.encode(wire.BYE, {"reason": MARK}),
        wire.encode(wire.ERROR, {"code": "protocol", "msg": MARK}))


def attack(seen, replay, calls=(), lead=False):
    """The outsider's frames one way in two rounds, and the (forged,
    replayed) each round should count: the forgeries of ``seen``, each bare
    and with a random seal tail, and the genuine body ``replay`` again as it
    was framed; then BYE and ERROR, bare and with a random seal tail."""
    def framed(bodies):
        return [frame.encode(b, lead=lead, tail=t) for b in bodies
                for t in (None, os.urandom(SEAL_LEN))]
    acts = framed(forgeries(seen, calls))
    return (acts + [frame.encode(replay, lead=lead)], framed(ENDS)), ((len(acts), 1),
                                                                    (2 * len(ENDS), 0))


async def strike(links, plan, send, done):
    """Carry out ``plan`` ({way: (link name or None, attack(...))}) round by
    round, each once every link counted the last (and done() holds); returns
    (all counted, links' counters before, each link's (forged, replayed))."""
    before = snapshot(links)
    want = {}
    ok = True
    for r in (0, 1):
        for way, (name, (frames, counts)) in plan.items():
            send(way, frames[r])
            if name is not None:
                f, n = want.get(name, (0, 0))
                want[name] = (f + counts[r][0], n + counts[r][1])
        ok = await settle(lambda: refused(links, before, want) and done()) and ok
    return ok, before, want


def after_handshake(bodies):
    """The bodies after the last handshake frame (HELLO, HELLO_ACK, AUTH)."""
    start = 0
    for i, b in enumerate(bodies):
        if b[0] & wire.TYPE_MASK <= wire.AUTH:
            start = i + 1
    return bodies[start:]


async def collect(sub, into):
    """Append every message of ``sub`` to ``into`` (a background task)."""
    while True:
        into.append(await sub.recv())


def numbers(msgs):
    """The "n" of each genuine reading (topic .../temp) in ``msgs``."""
    return [m.payload["n"] for m in msgs if m.topic[-1] == "temp"
            and type(m.payload) is dict and MARK not in m.payload]


def foreign(msgs):
    return [m for m in msgs if type(m.payload) is dict and MARK in m.payload]


def snapshot(links):
    """What each bridge's status (its answer on bridge/status) says of the
    link ``links`` names ({name: (bridge, link id)}): the counters, state and
    peer boot, and ``shown_errs``, the ERRS column `edgebus status` prints."""
    out = {}
    for k, (bridge, lid) in links.items():
        st = bridge.stats()
        s = st["links"][lid]
        row = [r for r in status.render(st).splitlines() if r.startswith(lid + " ")][0]
        out[k] = dict(s["counters"], status=s["state"], peer_sid=s["peer_sid"],
                      shown_errs=int(row.split()[8]))
    return out


def delta(after, before, k):
    return after.get(k, 0) - before.get(k, 0)


def refused(links, before, want):
    """True once each link counted what was sent to it."""
    now = snapshot(links)
    return all(delta(now[k], before[k], "forged") >= f and
               delta(now[k], before[k], "replayed") >= r for k, (f, r) in want.items())


async def settle(cond, timeout=20):
    """True once cond() holds, False if it never does: the trial still hands
    what it saw to the tests, which say what went wrong (unsealed, a lot)."""
    try:
        await until(cond, timeout)
        return True
    except AssertionError:
        return False


def answers(bodies, genuine):
    """(REPLY/FAIL values to the outsider's calls, REPLYs to the genuine call)."""
    res = [r[2] for r in map(read, bodies) if r is not None and r[0] in (wire.REPLY, wire.FAIL)]
    return [v for v in res if v[0] >= CALL_ID], sum(1 for v in res if v[0] == genuine)


def health(msgs):
    """The link part of the last sys/health in ``msgs``, or None."""
    h = [m.payload for m in msgs if m.topic[-2:] == ("sys", "health")]
    return h[-1]["link"] if h else None


# -- an outsider on the broker of an MQTT device link ---------------------------

def mqtt_trial(tmp):
    with Mosquitto() as broker, Fleet(tmp / "fleet", mqtt=1, period=0.1, health_period=0.5,
                                      broker=("127.0.0.1", broker.port)) as fleet:
        dev = fleet.devices[0]
        node = dev["node"]
        up, down = "edgebus/%s/up" % node, "edgebus/%s/down" % node
        spy = Watcher(broker.port, ["edgebus/#"], client_id="outsider")
        own = Counter()           # what the outsider published (the spy hears it too)

        def heard(topic):
            """The peers' frames on topic. A replay is a genuine frame again:
            its copies heard last are the outsider's."""
            ms = [m[2] for m in spy.messages(topic)]
            left = Counter(ms)
            left.subtract(own)
            got = []
            for m in ms:
                if left[m] > 0:
                    left[m] -= 1
                    got.append(frame.decode(m))
            return [b for b in got if b is not None]

        def echoed():
            heard = Counter(m[2] for m in spy.messages())
            return all(heard[f] >= k for f, k in own.items())

        def inject(topic, frames):
            for f in frames:
                own[f] += 1
                spy.c.publish(topic, f, 0)
        cfg = bridge_config.parse(dict(fleet.bridge_config(("127.0.0.1", broker.port)), bridge={
            "state_dir": str(tmp / "state"), "heartbeat": 1.0, "seal": SEAL}))
        fleet.start()

        async def main():
            b = Bridge(cfg)
            task = asyncio.create_task(b.run())
            c = b.bus.connect()
            seen = []
            pump = asyncio.create_task(collect(c.subscribe("dev/#", queue_len=64), seen))
            get = ("dev", node, "sys", "config", "get")
            await until(lambda: get in b.bus.endpoints(), 60)
            links = {"bridge": (b, "mqtt:" + node)}
            assert await c.call(get, "node", timeout=5) == node   # a genuine call, captured
            await until(lambda: of_type(heard(down), wire.CALL) and of_type(heard(up), wire.PUB)
                        and health(seen) is not None)
            mark = len(seen)
            call = of_type(heard(down), wire.CALL)[-1]
            to_dev = attack(heard(down), call, calls=["sys/reboot"])
            ok, before, want = await strike(links, {
                up: ("bridge", attack(heard(up), of_type(heard(up), wire.PUB)[-1])),
                down: (None, to_dev)}, inject, echoed)
            n0 = max(numbers(seen))
            ok = await settle(lambda: max(numbers(seen)) >= n0 + SETTLE) and ok
            late = len(seen)
            ok = await settle(lambda: health(seen[late:]) is not None) and ok
            after = snapshot(links)
            b.stop()
            await task
            pump.cancel()
            return {"settled": ok, "links": {k: (before[k], after[k], want[k]) for k in links},
                    "readings": {"device": numbers(seen)}, "foreign": foreign(seen),
                    "answers": answers(heard(up), read(call)[2][0]),
                    "device": {"health": (health(seen[:mark]), health(seen[late:])),
                               "sent": tuple(map(sum, zip(*to_dev[1])))}}
        try:
            res = asyncio.run(main())
        finally:
            spy.close()
        res["device"]["restarts"] = dev["restarts"]
        res["frames"] = {"up": after_handshake(heard(up)), "down": after_handshake(heard(down))}
        res["plain"] = [b"sensor/temp", b'"simulated"', b"sys/config/get"]
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


def peer_trial(tmp):
    async def main():
        site_port = free_port()
        relay = await Relay(site_port).start()
        site = Bridge(bridge_config.parse({
            "bridge": {"node": "site", "state_dir": str(tmp / "site"), "heartbeat": 0.5,
                       "seal": SEAL},
            "peer": [{"node": "gw", "key": KEY, "listen": "127.0.0.1:%d" % site_port,
                      "imports": ["dev/#"], "import_calls": ["dev/#"], "exports": ["site/#"]}]}))
        gw = Bridge(bridge_config.parse({
            "bridge": {"node": "gw", "state_dir": str(tmp / "gw"), "heartbeat": 0.5,
                       "seal": SEAL},
            "peer": [{"node": "site", "key": KEY, "connect": "127.0.0.1:%d" % relay.port,
                      "backoff_max": 0.5, "exports": ["dev/#"], "export_calls": ["dev/+/sys/#"],
                      "imports": ["site/#"]}]}))
        tasks = [asyncio.create_task(x.run()) for x in (site, gw)]
        sc, gc = site.bus.connect(), gw.bus.connect()
        at_site, at_gw = [], []
        ep = gc.bind("dev/probe/sys/config/get", queue_len=8)
        tasks += [asyncio.create_task(collect(sc.subscribe("dev/#", queue_len=256), at_site)),
                  asyncio.create_task(collect(gc.subscribe("site/#", queue_len=256), at_gw)),
                  asyncio.create_task(_serve(ep)),
                  asyncio.create_task(_readings(gc, "dev/probe/sensor/temp")),
                  asyncio.create_task(_readings(sc, "site/probe/sensor/temp"))]
        get = ("dev", "probe", "sys", "config", "get")
        await until(lambda: get in site.bus.endpoints() and at_site and at_gw, 30)
        links = {"site": (site, "peer:gw"), "gw": (gw, "peer:site")}
        assert await sc.call(get, "node", timeout=5) == "probe"   # a genuine call, captured
        fs = relay.frames
        await until(lambda: of_type(fs["down"], wire.CALL) and of_type(fs["down"], wire.PUB))
        call = of_type(fs["down"], wire.CALL)[-1]
        ok, before, want = await strike(links, {
            "up": ("site", attack(fs["up"], of_type(fs["up"], wire.PUB)[-1], lead=True)),
            "down": ("gw", attack(fs["down"], call, lead=True))}, relay.inject, lambda: True)
        n0 = (max(numbers(at_site)), max(numbers(at_gw)))
        ok = await settle(lambda: max(numbers(at_site)) >= n0[0] + SETTLE
                          and max(numbers(at_gw)) >= n0[1] + SETTLE) and ok
        after = snapshot(links)
        for x in (gw, site):
            x.stop()
        await asyncio.gather(*tasks[:2])
        for t in tasks[2:]:
            t.cancel()
        relay.close()
        return {"settled": ok, "links": {k: (before[k], after[k], want[k]) for k in links},
                "readings": {"to site": numbers(at_site), "to gw": numbers(at_gw)},
                "foreign": foreign(at_site + at_gw),
                "answers": answers(fs["up"], read(call)[2][0]),
                "frames": {k: after_handshake(v) for k, v in fs.items()},
                "plain": [b"sensor/temp", b"sys/config/get", b'"n":']}
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
    return mqtt_trial(tmp_path_factory.mktemp("mqtt"))


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    return peer_trial(tmp_path_factory.mktemp("peer"))


@pytest.fixture(params=[pytest.param("mqtt", marks=REAL_DEVICE), "peer"])
def trial(request):
    return request.getfixturevalue(request.param)


# -- what the trials saw ---------------------------------------------------------

def test_each_frame_is_refused_counted_and_the_session_stays_up(trial):
    assert trial["settled"], trial["links"]
    for name, (before, after, (forged, replayed)) in trial["links"].items():
        assert delta(after, before, "forged") == forged, (name, after)
        assert delta(after, before, "replayed") == replayed, (name, after)
        for k in ("sessions", "peer_sid", "duplicates", "gaps", "resends"):
            assert after.get(k) == before.get(k), (name, k, before, after)
        assert after["status"] == "up", (name, after)


def test_no_call_of_the_outsiders_is_served(trial):
    theirs, genuine = trial["answers"]
    assert theirs == [] and genuine == 1     # the replayed genuine call served once


def test_every_genuine_reading_arrives_once_in_order_and_none_of_the_outsiders(trial):
    assert trial["foreign"] == []
    for name, ns in trial["readings"].items():
        assert len(ns) > SETTLE and ns == list(range(ns[0], ns[0] + len(ns))), (name, ns)


def test_every_frame_after_the_handshake_is_tagged(trial):
    for way, bodies in trial["frames"].items():
        assert len(bodies) > SETTLE, way
        ctrs = [int.from_bytes(b[-SEAL_LEN:-8], "big") for b in bodies]
        assert ctrs == list(range(1, len(bodies) + 1)), (way, ctrs[:20])
        for b in bodies:
            wire.decode(b[:-SEAL_LEN])        # what is left is a body


def test_an_outsider_reads_nothing(trial):
    for way, bodies in trial["frames"].items():
        for b in bodies:
            assert not any(p in b for p in trial["plain"]), (way, b)


@pytest.mark.mosquitto
@pytest.mark.micropython
def test_the_fleet_device_did_not_reboot_and_says_what_it_refused(mqtt):
    d = mqtt["device"]
    before, after = d["health"]
    assert d["restarts"] == 0
    assert after["state"] == "up" and after["sid"] == before["sid"]
    for k in ("sessions", "session_ends", "retransmitted", "gaps"):
        assert after[k] == before[k], (k, before, after)
    assert "frame refused" in (after["last_error"] or ""), after


@pytest.mark.mosquitto
@pytest.mark.micropython
def test_the_fleet_device_counts_each_frame_it_refused(mqtt):
    before, after = mqtt["device"]["health"]
    forged, replayed = mqtt["device"]["sent"]
    assert delta(after, before, "forged") == forged
    assert delta(after, before, "replayed") == replayed


def test_edgebus_status_counts_the_refused_frames_among_the_errors(trial):
    for name, (before, after, (forged, replayed)) in trial["links"].items():
        assert delta(after, before, "shown_errs") >= forged + replayed, (name, after)
