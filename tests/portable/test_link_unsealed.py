"""Nothing unsealed acts (docs/protocol.md section 17): in a live sealed
session a frame without that session's seal (unsealed, or with a tag no one
computed), of every type, flags and body, changes nothing on either side: no
number spent, no RESEND or SKIP, no sign of life, no reply, no state; it is
counted ``forged``. A new handshake runs beside the session and ends it only
once it proves the key. The state machine under Hypothesis is
tests/host/link/test_link_unsealed_property.py."""

import asyncio

from edgebus.compat import now
from edgebus.link import wire
from edgebus.link.link import Link
from tests.portable import sealkit
from tests.portable.linkkit import KEY, Joined, sealed, synced, until, up
from tests.portable.support import run

# Two links, their pipes and route tables and the sweep's frames: as
# test_link_seal (the link's code sits in the unix port's heap).
MPY_HEAP = "288K"


async def _flowing(hb=1.0):
    j = Joined(hb=hb).start()
    sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=64)
    await until(lambda: synced(j))
    j.dev.connect().publish("sensor/t", 0)
    assert (await asyncio.wait_for(sub.recv(), 3)).payload == 0
    return j, sub


def test_no_unsealed_frame_of_any_kind_moves_either_side():
    async def main():
        j, sub = await _flowing()
        c = None
        for link in (j.hl, j.dl):
            c = link.counters
            for t in sealkit.TYPES:
                for flags in sealkit.FLAGS:
                    for shape in ("empty", "undecodable", "valid"):
                        for b in sealkit.frames(link, t, flags, shape):
                            what = "%r to the %s" % (b, link.role)
                            before = sealkit.snapshot(link)
                            t_rx = link._t_rx
                            n0 = c.get("forged", 0) + c.get("hellos_beside", 0)
                            link.feed(b)  # synchronous: nothing else runs between
                            sealkit.unchanged(link, before, t_rx, what)
                            # counted once: forged, or (a well-formed HELLO) answered beside
                            n = c.get("forged", 0) + c.get("hellos_beside", 0)
                            assert n == n0 + 1, what
                            assert c.get("stale_acks", 0) == 0, what  # no HELLO of its
                # let the writers send what was queued (a HELLO_ACK beside, a PING)
                await asyncio.sleep(0)
        assert j.hl.counters["hellos_beside"] >= 1 and j.dl.counters.get("hellos_beside", 0) == 0
        assert up(j) and j.hl.counters.get("session_ends", 0) == 0
        j.dev.connect().publish("sensor/t", 1)  # the session goes on, its numbers intact
        m = await asyncio.wait_for(sub.recv(), 3)
        assert m.payload == 1 and sub.recv_nowait() is None
        assert j.hl.counters.get("gaps", 0) == 0 and j.hl.counters.get("duplicates", 0) == 0
        await j.stop()

    run(main(), virtual=True)


def test_an_outsider_cannot_delete_a_chosen_reading():
    """The outsider's deletion: a numbered AUTH that does not decode, twice,
    with the number of the reading to delete. It used to make the bridge ask
    for a resend, then spend the number as a gap, and take the genuine
    reading as a duplicate."""

    async def main():
        j, sub = await _flowing()
        hl = j.hl
        n = hl.state["rx_next"]
        attack = bytes((wire.AUTH | wire.F_SEQ, (n >> 8) & 0xFF, n & 0xFF, 0x21))
        f0 = hl.counters.get("forged", 0)
        hl.feed(attack)
        hl.feed(attack)
        assert hl.counters["forged"] == f0 + 2 and hl.state["rx_next"] == n
        j.dev.connect().publish("sensor/t", "chosen")
        m = await asyncio.wait_for(sub.recv(), 3)
        assert m.payload == "chosen" and m.origin.extra["seq"] == n
        c = hl.counters
        assert c.get("gaps", 0) == c.get("duplicates", 0) == c.get("resends_asked", 0) == 0
        await j.stop()

    run(main(), virtual=True)


def test_an_outsider_cannot_keep_a_dead_session_up():
    """The device goes silent; frames without its seal every 0.1 s (the
    unsealed types, a valid HELLO) do not keep the host's session alive past
    its liveness timeout."""

    async def main():
        j, sub = await _flowing(hb=0.3)
        hl = j.hl
        j.ta.writer.filter = lambda data: b""  # the device says nothing more
        t0 = now()
        kinds = [(wire.HELLO, 0, "valid"), (wire.AUTH, 0, "valid"), (0, wire.F_SEQ, "empty")]
        i = 0
        while hl.status == "up" and now() - t0 < 10:
            t, flags, shape = kinds[i % len(kinds)]
            hl.feed(sealkit.frames(hl, t, flags, shape)[0])
            i += 1
            await asyncio.sleep(0.1)
        assert hl.status != "up", "kept up for %.1f s" % (now() - t0)
        assert now() - t0 < 3 * 0.3 + 2  # by liveness, as without the outsider
        assert hl.counters["liveness_timeouts"] >= 1 and hl.counters.get("forged", 0) >= 1
        await j.stop()

    run(main(), virtual=True)


def test_a_restarted_device_replaces_the_session_once_its_handshake_proves_the_key():
    """A HELLO beside a live sealed session is answered there; an AUTH with a
    wrong proof is forged and the session stays; the new boot's handshake
    with the key replaces the session at once (not after the liveness
    timeout)."""

    async def main():
        j, sub = await _flowing(hb=5.0)
        hl = j.hl
        sid0 = hl.peer_sid
        # an outsider's HELLO, then an AUTH that cannot prove the key
        hl.feed(wire.encode(wire.HELLO, sealkit.hello()))
        assert hl.counters["hellos_beside"] == 1 and hl.status == "up"
        f0 = hl.counters.get("forged", 0)
        hl.feed(wire.encode(wire.AUTH, {"proof": "0" * 64}))
        assert hl.counters["forged"] == f0 + 1 and hl.status == "up" and hl.peer_sid == sid0
        # the device restarts: a new Link (a new boot) on the same line
        j.tasks[0].cancel()
        await asyncio.sleep(0)
        j.dl = Link(
            j.dev,
            "dev1",
            key=KEY,
            role="initiator",
            exports=[("sensor/#", "")],
            heartbeat=5.0,
        )
        j.tasks[0] = asyncio.create_task(j.dl.run(j.ta))
        t0 = now()
        await until(lambda: up(j) and hl.peer_sid == j.dl.sid)
        assert now() - t0 < 5.0  # the handshake, not the 15 s liveness timeout
        assert hl.counters["session_ends"] == 1 and hl.counters.get("liveness_timeouts", 0) == 0
        j.dev.connect().publish("sensor/t", "after")
        await until(lambda: sub.recv_nowait() is not None)
        await j.stop()

    run(main(), virtual=True)


def test_a_late_answer_to_the_sessions_own_hello_is_only_counted():
    """A busy responder answers a retried HELLO after the session is up: the
    initiator counts that HELLO_ACK stale_acks (no error), and one naming no
    HELLO of its own forged; neither moves it."""

    async def main():
        j, sub = await _flowing()
        dl = j.dl
        late = dict(sealkit.hello("host"), to=dl._hs[-1][1]["nonce"][:8])
        before = sealkit.snapshot(dl)
        t_rx = dl._t_rx
        dl.feed(wire.encode(wire.HELLO_ACK, late))
        sealkit.unchanged(dl, before, t_rx, "a late HELLO_ACK")
        assert dl.counters["stale_acks"] == 1 and dl.counters.get("forged", 0) == 0
        dl.feed(wire.encode(wire.HELLO_ACK, dict(late, to="00000000")))
        assert dl.counters["forged"] == 1 and dl.status == "up"
        await j.stop()

    run(main(), virtual=True)


def test_a_replayed_auth_of_the_sessions_own_handshake_is_forged():
    """The AUTH that made the session, recorded and sent again, does not
    restart it (its counters would start over and every frame replay)."""

    async def main():
        seen = []
        j = Joined()

        def tap(data):
            from edgebus.link import frame

            b = frame.decode(data)
            if b is not None and b[0] & wire.TYPE_MASK == wire.AUTH:
                seen.append(bytes(b))
            return data

        j.start()
        j.ta.writer.filter = tap
        await until(lambda: synced(j))
        hl = j.hl
        s0 = hl.counters["sessions"]
        f0 = hl.counters.get("forged", 0)
        hl.feed(seen[0])
        assert hl.counters["forged"] == f0 + 1 and hl.counters["sessions"] == s0
        # and a sealed frame of the session still opens: its keys are kept
        hl.feed(sealed(j.dl, wire.encode(wire.PING, 1)))
        assert hl.counters["forged"] == f0 + 1
        await j.stop()

    run(main(), virtual=True)
