"""Property tests of the link session (CPython, Hypothesis): docs/protocol.md
sections 1-3 (bad input is counted, never delivered) and 9 (state re-sync)."""

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import edgebus
from edgebus.link.link import Link
from tests.host.link import vclock
from tests.portable.linkkit import Joined, synced, until

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.lists(st.binary(max_size=80), max_size=40))
def test_arbitrary_bodies_never_raise_and_are_counted(bodies):
    host = edgebus.Bus()
    hl = Link(host, "host", key=b"k", role="responder", imports=[("#", "dev")])
    for b in bodies:
        hl.feed(b)  # never raises
    c = hl.counters
    # nothing imported without a session; every body is accounted for
    assert host.stats()["retained"] == 0
    assert c.get("frames_in", 0) == len(bodies)
    assert c.get("imported", 0) == 0


def _damage(data, op, rng):
    if op == "flip" and data:
        b = bytearray(data)
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
        return bytes(b)
    if op == "cut" and len(data) > 1:
        return data[: rng.randrange(1, len(data))]
    if op == "dup":
        return data + data
    if op == "garbage":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12))) + data
    return data


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(["ok", "flip", "cut", "dup", "garbage", "hold"]), min_size=5, max_size=40
    ),
    st.randoms(use_true_random=False),
)
def test_damaged_line_never_delivers_corrupted_messages(ops, rng):
    async def main():
        j = Joined()
        j.start()
        await until(lambda: synced(j))
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=256)
        it = iter(ops)
        held = []

        def line(data):
            op = next(it, "ok")
            if op == "hold":  # reordering: this write goes out after the next
                held.append(data)
                return b""
            out = _damage(data, op, rng)
            while held:
                out += held.pop()
            return out

        j.ta.writer.filter = line
        c = j.dev.connect()
        sent = {}
        for i in range(len(ops)):
            payload = {"i": i, "pad": "x" * (i % 7)}
            sent[i] = payload
            c.publish(("sensor", "v"), payload)
            await asyncio.sleep(0.005)
        # Clean line again: release what was held back, then a last message,
        # whose sequence number reveals any loss before it.
        j.ta.writer.filter = None
        for d in held:
            j.ta.writer.write(d)
        await asyncio.sleep(0.05)
        c.publish(("sensor", "v"), "end")
        got = []
        while True:
            m = await asyncio.wait_for(sub.recv(), 3)
            if m.payload == "end":
                break
            got.append(m)
        seqs = [m.origin.extra["seq"] for m in got]
        for m in got:  # every delivered message is exactly one that was sent
            assert m.payload == sent[m.payload["i"]]
        assert len(set(seqs)) == len(seqs)  # duplicates never delivered twice
        assert seqs == sorted(seqs)  # never delivered out of order
        lost = len(ops) - len(got)
        assert j.hl.counters.get("gaps", 0) == lost  # every loss counted, nothing else
        await j.stop()

    vclock.run(main())


ACTIONS = st.one_of(
    st.tuples(st.just("retain"), st.sampled_from(["a", "b", "c", "d/e"]), st.integers(0, 3)),
    st.tuples(st.just("unretain"), st.sampled_from(["a", "b", "c", "d/e"]), st.just(0)),
    st.tuples(st.just("disconnect"), st.just(""), st.just(0)),
    st.tuples(st.just("reconnect"), st.just(""), st.just(0)),
    st.tuples(st.just("restart"), st.just(""), st.just(0)),
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ACTIONS, max_size=14))
def test_host_view_converges_to_device_exported_state(actions):
    async def main():
        j = Joined()
        host_view = j.host.connect().retained_view("dev/#")
        j.start()
        await until(lambda: synced(j))
        running = True
        for op, k, v in actions:
            if op == "retain":
                j.dev.connect().retain("sensor/" + k, v)
            elif op == "unretain":
                j.dev.connect().unretain("sensor/" + k)
            elif op == "disconnect" and running:
                await j.stop()
                running = False
            elif op == "reconnect" and not running:
                j.start()
                running = True
            elif op == "restart":  # the device reboots: new bus, new sid, empty state
                if running:
                    await j.stop()
                j = Joined(host_link=j.hl)
                j.start()
                running = True
            await asyncio.sleep(0.01)
        if not running:
            j.start()
        want = sorted(
            ("dev/dev1/" + "/".join(m.topic), m.payload)
            for m in j.dev.connect().retained_view("sensor/#").snapshot()
        )

        def have():
            return sorted(("/".join(m.topic), m.payload) for m in host_view.snapshot())

        await until(lambda: synced(j) and have() == want, timeout=5)
        await j.stop()

    vclock.run(main())
