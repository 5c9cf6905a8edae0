"""Fuzz targets for the frame decoder and the link session, shared by the
Hypothesis tests (test_rel_fuzz.py) and the atheris runner:

    python -m tests.reliability.fuzz_main frame|session|line RUNS

Each target takes arbitrary bytes, must never raise, and checks its own
invariants (AssertionError otherwise):

- frame:   the stream FrameReader and frame.decode on arbitrary bytes in
           arbitrary chunks: bodies delivered only with a matching CRC (checked
           against binascii.crc_hqx) and within max_len; the reader's buffer
           never grows; every byte accounted for.
- session: arbitrary bodies into a host Link whose session with "dev1" is up:
           whatever reaches the host bus is under dev/dev1/, concrete, with the
           link's provenance (kind, link_id, peer_node, peer_sid, generation);
           the link's own state stays within its bounds.
- line:    a fixed stream of valid data frames damaged by the input (at most
           three bit flips per frame, so CRC-16 detects every damaged frame):
           every message delivered is exactly one that was sent, once, in order.
"""

import asyncio
import binascii
import json
import os

import edgebus
from edgebus.link import frame, handshake, rules, seal, tx, wire
from edgebus.link.link import Link
from tests.portable import sealkit
from tests.portable.linkkit import sealed

KEY = b"fuzz-key"
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
MAX_LEN = wire.MIN_LEN  # small (more bodies hit the limit), yet room for the handshake


# -- frame ---------------------------------------------------------------------


def frame_target(data):
    if not data:
        return
    max_len = (16, 64, MAX_LEN, 1024)[data[0] & 3]
    step = (data[0] >> 2) + 1
    stream = data[1:]
    r = frame.FrameReader(max_len)
    cap = len(r._buf)
    got = []
    for i in range(0, len(stream), step):
        got.extend(r.feed(stream[i : i + step]))
        assert r.pending <= frame.max_encoded_len(max_len)
    assert len(r._buf) == cap
    for b in got:
        assert len(b) <= max_len
        # Delivered only if this exact body was framed with its CRC.
        assert frame.decode(frame.encode(b, max_len), max_len) == b
    assert r.frames == len(got)
    delivered = sum(1 for _ in got)
    assert delivered <= stream.count(0) + 1
    one = frame.decode(stream, max_len)
    if one is not None:
        assert len(one) <= max_len
        c = binascii.crc_hqx(bytes(one), 0xFFFF)
        assert frame.encode(one, max_len)[:-1].count(0) == 0 and c == frame.crc16(one)


# -- session -------------------------------------------------------------------


class Session:
    """A host bus and its link to dev1 with a session up, reused across inputs;
    rebuilt every ``fresh`` inputs so a device filling the retained store with
    distinct topics (its right) does not read as a leak."""

    def __init__(self, fresh=2000):
        self.loop = asyncio.new_event_loop()
        self.fresh = fresh
        self.n = 0
        self.inputs = 0
        self.delivered = 0
        self.counters = {}
        self._build()

    def _build(self):
        if self.n:
            self.loop.run_until_complete(self._teardown())
        self.host = edgebus.Bus(q_length=64)
        self.dev = edgebus.Bus()
        self.hl = Link(
            self.host,
            "host",
            key=KEY,
            role="responder",
            link_id="serial:dev1",
            peer="dev1",
            imports=[("#", "dev/{node}")],
            import_calls=[("#", "dev/{node}")],
            exports=[("dev/{node}/cmd/#", "dev/{node}")],
            heartbeat=1.0,
            max_len=MAX_LEN,
        )
        self.dl = Link(
            self.dev,
            "dev1",
            key=KEY,
            role="initiator",
            exports=[("sensor/#", "")],
            heartbeat=1.0,
            max_len=MAX_LEN,
        )
        self.watch = self.host.connect().observe("#", queue_len=4096)
        # The handshake, frame by frame, without a transport.
        handshake.hello(self.dl)
        for _ in range(4):
            for a, b in ((self.dl, self.hl), (self.hl, self.dl)):
                while a._ctl:
                    b.feed(sealed(a, a._ctl.pop(0)))  # as the writer sends it
        assert self.hl.status == "up", self.hl.last_error
        self.n = 0

    async def _teardown(self):
        for t in self.hl._tasks:
            t.cancel()
        await asyncio.sleep(0)

    def close(self):
        """End every task of the session's event loop (the link's, and the
        call proxies its ROUTES spawned), then close the loop."""
        tasks = asyncio.all_tasks(self.loop)
        for t in tasks:
            t.cancel()
        if tasks:
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.close()

    def check(self):
        hl = self.hl
        while True:
            m = self.watch.recv_nowait()
            if m is None:
                break
            if m.topic[0] == "link":  # the link's own status
                continue
            self.delivered += 1
            assert m.topic[:2] == ("dev", "dev1"), m.topic
            for t in m.topic:
                assert t is not self.host.s_wild and t is not self.host.m_wild
            o = m.origin
            assert (o.kind, o.link_id, o.peer_node, o.peer_sid, o.generation) == (
                "link",
                "serial:dev1",
                "dev1",
                self.dl.sid,
                1,
            ), o
            if o.extra is not None and "seq" in o.extra:
                assert type(o.extra["seq"]) is int
        assert len(hl._pending) <= hl.opts.max_pending
        assert hl._rx_sync is None or len(hl._rx_sync) <= hl.opts.max_sync
        assert len(hl._recent) <= 16
        assert hl._served <= hl.opts.max_pending
        hl._ctl.clear()  # what the writer would have sent
        hl._calls.clear()

    def feed(self, data):
        """Bodies from the input: each a length byte and that many bytes."""
        self.inputs += 1
        self.n += 1
        if self.n > self.fresh:
            self._build()
        i = 0
        bodies = []
        while i < len(data):
            n = data[i] + 1
            bodies.append(data[i + 1 : i + 1 + n])
            i += 1 + n
        self.loop.run_until_complete(self._feed(bodies))
        if self.hl.status != "up":  # a HELLO, ERROR or BYE ended it: start again
            self._build()

    async def _feed(self, bodies):
        for b in bodies:
            # A prefix byte picks a real message type, so most inputs reach the
            # handlers instead of stopping at unknown_type.
            if b:
                b = bytes([(b[0] % 18) | (b[0] & 0xC0)]) + b[1:]
                # sealed as the device would: the handlers, not the seal, are fuzzed
                b = sealed(self.dl, b)
            self.hl.feed(b)  # never raises
        await asyncio.sleep(0)  # let proxies spawned by ROUTES run once
        self.check()


_session = None


def session_target(data):
    global _session
    if _session is None:
        _session = Session()
    _session.feed(data)


def close_session():
    """Close the session session_target keeps (at the end of a run)."""
    global _session
    if _session is not None:
        _session.close()
        _session = None


# -- sealed --------------------------------------------------------------------


class Sealed:
    """A device link and a host link in one sealed, encrypted session, made
    with fixed nonces so that the genuine frames it records (the corpus in
    tests/reliability/corpus/sealed) are this session's in every run. Every
    input is the outsider's: frames for the host or the device that no one
    with the key sealed (the genuine ones replayed, mutated, or anything
    else). None may move either side (tests/portable/sealkit.py), so the
    session is built once."""

    def __init__(self):
        nonces = iter("%024x" % i for i in range(1, 1 << 20))
        real = wire.nonce
        wire.nonce = lambda: next(nonces)
        try:
            self.host = edgebus.Bus(q_length=64)
            self.dev = edgebus.Bus()
            self.hl = Link(
                self.host,
                "host",
                key=KEY,
                role="responder",
                sid="host-sid",
                peer="dev1",
                imports=[("#", "dev/{node}")],
                exports=[("dev/{node}/cmd/#", "dev/{node}")],
                heartbeat=3600.0,
            )
            self.dl = Link(
                self.dev,
                "dev1",
                key=KEY,
                role="initiator",
                sid="dev-sid",
                exports=[("sensor/#", "")],
                imports=[("cmd/#", "")],
                heartbeat=3600.0,
            )
            tx.observe(self.dl, None)
            tx.observe(self.hl, "dev1")
            handshake.hello(self.dl)
            self.genuine = []  # every frame of the session, as sent
            for i in range(6):
                self.dev.connect().publish("sensor/t", i)
                self.host.connect().publish("dev/dev1/cmd/led", i)
                for a, b in ((self.dl, self.hl), (self.hl, self.dl)):
                    while True:
                        body = a.next_body()
                        if body is None:
                            break
                        x, tail = seal.out(a, body)
                        f = bytes(x) + (bytes(tail) if tail is not None else b"")
                        self.genuine.append(f)
                        b.feed(f)
        finally:
            wire.nonce = real
        assert self.hl.status == self.dl.status == "up", self.hl.last_error
        assert seal.encrypted(self.hl) and self.hl.state["rx_next"] > 6
        self.before = {id(k): sealkit.snapshot(k) for k in (self.hl, self.dl)}
        self.recent = list(self.hl._recent)
        self.inputs = self.refused = 0

    def feed(self, data):
        """The first byte picks the side (even: the host); then bodies, each
        a length byte and that many bytes."""
        if not data:
            return
        self.inputs += 1
        link = self.hl if data[0] % 2 == 0 else self.dl
        c = link.counters
        i = 1
        while i < len(data):
            n = data[i] + 1
            b = data[i + 1 : i + 1 + n]
            i += 1 + n
            t_rx = link._t_rx
            r0 = _refusals(c)
            link.feed(b)  # never raises
            sealkit.unchanged(link, self.before[id(link)], t_rx, repr(b))
            assert _refusals(c) == r0 + 1, repr(b)  # counted once
            self.refused += 1
        # what a HELLO beside the session queued (HELLO_ACKs), as the writer would send it
        link._ctl.clear()
        del link._hs[1:]
        link._recent[:] = self.recent if link is self.hl else []


def _refusals(c):
    return sum(c.get(k, 0) for k in sealkit.REFUSALS if k != "frames_in")


_sealed = None


def sealed_target(data):
    global _sealed
    if _sealed is None:
        _sealed = Sealed()
    _sealed.feed(data)


def sealed_seeds():
    """The session's genuine frames, alone and in pairs, to each side."""
    g = Sealed().genuine
    out = []
    for side in (0, 1):
        for i in range(len(g)):
            out.append(bytes((side,)) + session_input(g[i : i + 2]))
    return out


# -- line ----------------------------------------------------------------------

_LINE = None


def _line():
    global _LINE
    if _LINE is None:
        frames = []
        sent = {}
        for i in range(12):
            payload = {"i": i, "v": [i] * (i % 5), "s": "x" * (i * 7 % 40)}
            body = wire.encode(wire.PUB, ["sensor/v", payload], i + 1)
            frames.append(frame.encode(body, MAX_LEN, True))
            sent[i] = payload
        _LINE = (frames, sent)
    return _LINE


def line_target(data):
    """Up to three bit flips per frame, positions and bits from the input."""
    frames, sent = _line()
    out = []
    k = 0
    for f in frames:
        b = bytearray(f)
        flips = data[k] % 4 if k < len(data) else 0
        k += 1
        for _ in range(flips):
            if k + 1 >= len(data):
                break
            pos = (data[k] << 8 | data[k + 1]) % len(b)
            b[pos] ^= 1 << (data[k] % 8)
            k += 2
        out.append(bytes(b))
    stream = b"".join(out)
    host = edgebus.Bus(q_length=64)
    hl = Link(
        host,
        "host",
        key=None,
        role="responder",
        link_id="line",
        imports=[("#", "dev/{node}")],
        max_len=MAX_LEN,
    )
    hl.status = "up"  # data path only: the session is not under test here
    hl._imp = hl._conn.derive(origin_factory={"kind": "link", "link_id": "line"})
    hl._imports = rules.resolve([("#", "dev/d")], host, None)
    sub = host.connect().subscribe("dev/d/#", queue_len=64)
    r = frame.FrameReader(MAX_LEN)
    step = (data[0] % 64 + 1) if data else 64
    for i in range(0, len(stream), step):
        for body in r.feed(stream[i : i + step]):
            hl.feed(body)
    got = []
    while True:
        m = sub.recv_nowait()
        if m is None:
            break
        got.append(m)
    seqs = [m.origin.extra["seq"] for m in got]
    assert seqs == sorted(set(seqs)), seqs  # once each, in order
    for m in got:
        assert m.topic == ("dev", "d", "sensor", "v")
        assert m.payload == sent[m.payload["i"]], m.payload  # exactly what was sent
        assert m.origin.extra["seq"] == m.payload["i"] + 1
    damaged = sum(1 for a, b in zip(out, frames) if a != b)
    assert len(got) >= len(frames) - damaged  # an intact frame is never lost


FORGED = {
    "link_id": "serial:other",
    "peer_node": "other",
    "peer_sid": "x",
    "generation": 99,
    "kind": "local",
    "conn_id": "c1",
    "principal": "root",
    "seq": "s",
}


def session_bodies():
    """Valid bodies of every type (the seeds the fuzzer mutates from)."""
    E = wire.encode
    return [
        E(wire.PUB, ["sensor/a", 1], 1),
        E(wire.PUB, ["sensor/b", {"x": [1, 2]}, FORGED], 2),
        E(wire.RET, [["sys", 3, "x/y"], "v"], 3),
        E(wire.UNRET, ["sys/x"], 4),
        E(wire.PUB, ["a/#", 1], 5),
        E(wire.PUB, ["../../host/x", None], 6),
        E(wire.SYNCSTART, {"seq": 7, "n": 2}),
        E(wire.SYNC, ["sys/s", 1, FORGED]),
        E(wire.SYNC, ["sys/t", [1]]),
        E(wire.SYNCEND, {"seq": 7, "n": 2}),
        E(wire.CALL, [1, "sys/x", 1, 100, None]),
        E(wire.ROUTES, ["sys/echo", "sys/#"]),
        E(wire.REPLY, [1, 2]),
        E(wire.FAIL, [1, "failed", "r"]),
        E(wire.PING, 5),
        E(wire.PONG, 5),
        E(wire.PUB, ["sensor/raw", None], 8, b"\x00\xff"),
        E(wire.BYE, {"reason": "x"}),
    ]


def session_input(bodies):
    """Bodies in the session target's input form (a length byte each)."""
    out = bytearray()
    for b in bodies:
        b = bytes(b)[:256]
        if not b:
            continue
        out.append(len(b) - 1)
        out += b
    return bytes(out)


def seeds():
    b = session_bodies()
    return {
        "session": [session_input(b[i : i + 4]) for i in range(0, len(b), 2)],
        "frame": [b"\x05" + b"".join(frame.encode(x, 1024, True) for x in b[:6])],
        "line": [bytes(range(64))],
        "sealed": sealed_seeds(),
    }


TARGETS = {
    "frame": frame_target,
    "session": session_target,
    "line": line_target,
    "sealed": sealed_target,
}


def main(argv):
    """atheris, coverage guided (run through fuzz_main, which instruments
    edgebus): TARGET RUNS [--keep], a run from the kept corpus and the seeds
    that prints one JSON line of results at the end; with --keep what it
    found is added to the kept corpus,
    tests/reliability/corpus/TARGET (the soak keeps it so)."""
    import resource
    import time

    import atheris

    name, runs = argv[1], int(argv[2])
    keep = "--keep" in argv[3:]
    target = TARGETS[name]
    t0 = time.monotonic()
    rss0 = [None]
    count = [0]

    def one(data):
        count[0] += 1
        if count[0] == 1000:
            rss0[0] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        target(data)
        if count[0] == runs:  # atheris ends with os._exit: report now
            report()

    def report():
        out = {
            "target": name,
            "runs": count[0],
            "seconds": round(time.monotonic() - t0, 1),
            "maxrss_kb_after_1000": rss0[0],
            "maxrss_kb_end": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        }
        if _sealed is not None:
            out["refused"] = _sealed.refused
        if _session is not None:
            out["delivered"] = _session.delivered
            out["rebuilt"] = _session.inputs // _session.fresh
        print("FUZZ " + json.dumps(out), flush=True)
        if keep:
            _merge(name, corpus)

    import shutil
    import tempfile

    # The kept corpus (what earlier runs found, minimised) and the seeds,
    # copied: a run adds to its own copy, never to the repository.
    corpus = tempfile.mkdtemp(prefix="edgebus-fuzz-")
    kept = os.path.join(CORPUS, name)
    if os.path.isdir(kept):
        for f in os.listdir(kept):
            shutil.copy(os.path.join(kept, f), corpus)
    for i, x in enumerate(seeds()[name]):
        with open("%s/seed%d" % (corpus, i), "wb") as f:
            f.write(x)
    atheris.Setup(
        [
            argv[0],
            "-runs=%d" % runs,
            "-max_len=2048",
            "-rss_limit_mb=2048",
            "-print_final_stats=1",
            "-artifact_prefix=%s/" % corpus,
            corpus,
        ],
        one,
    )
    atheris.Fuzz()


def _merge(name, found):
    """What the run's corpus holds, added to the kept one: libFuzzer names a
    unit by the SHA-1 of its bytes, so a unit kept already is not added
    twice. (libFuzzer's own -merge re-runs argv[0], which is no program under
    atheris.)"""
    import shutil

    kept = os.path.join(CORPUS, name)
    os.makedirs(kept, exist_ok=True)
    n = 0
    for f in os.listdir(found):
        if len(f) == 40 and not os.path.exists(os.path.join(kept, f)):
            shutil.copy(os.path.join(found, f), kept)
            n += 1
    print("corpus: kept %d new units in %s" % (n, kept), flush=True)
