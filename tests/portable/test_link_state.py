"""Link state re-sync (SYNCSTART/SYNC/SYNCEND), restarts and generations."""

import asyncio

import edgebus
from edgebus.link.link import Link
from tests.portable.linkkit import Joined, synced, until, up
from tests.portable.support import run

# Two buses and two links in one interpreter (64-bit unix port).
MPY_HEAP = "256K"  # two links, their pipes and the route table


def _facts(view):
    return sorted([("/".join([str(t) for t in m.topic]), m.payload) for m in view.snapshot()])


def test_retained_state_synced_then_kept_current():
    async def main():
        j = Joined()
        dc = j.dev.connect()
        dc.retain("sensor/a", 1)
        dc.retain("sensor/b", {"x": [1, 2]})
        dc.retain("other/c", 3)  # not exported
        view = j.host.connect().retained_view("dev/#")
        j.start()
        await until(lambda: synced(j) and len(view) == 2)
        assert _facts(view) == [("dev/dev1/sensor/a", 1), ("dev/dev1/sensor/b", {"x": [1, 2]})]
        dc.retain("sensor/a", 5)
        dc.unretain("sensor/b")
        await until(lambda: _facts(view) == [("dev/dev1/sensor/a", 5)])
        await j.stop()

    run(main(), virtual=True)


def test_reconnect_resyncs_without_flicker_and_counts_outage_gap():
    async def main():
        j = Joined()
        dc = j.dev.connect()
        dc.retain("sensor/a", 1)
        dc.retain("sensor/gone", 1)
        hv = j.host.connect().retained_view("dev/#")
        w = j.host.connect().watch_retained("dev/#", queue_len=64)
        j.start()
        await until(lambda: synced(j) and len(hv) == 2)
        while w.recv_nowait() is not None:
            pass
        await j.stop()
        # While the line is down the device changes state and publishes.
        dc.retain("sensor/a", 2)
        dc.unretain("sensor/gone")
        dc.retain("sensor/new", 3)
        sub = j.host.connect().subscribe("dev/dev1/sensor/event")
        dc.publish("sensor/event", 9)
        syncs = j.hl.counters.get("syncs", 0)
        j.start()
        await until(lambda: j.hl.counters.get("syncs", 0) > syncs)
        assert _facts(hv) == [("dev/dev1/sensor/a", 2), ("dev/dev1/sensor/new", 3)]
        ops = []
        while True:
            ev = w.recv_nowait()
            if ev is None:
                break
            ops.append((ev.op, "/".join(ev.topic)))
        # replaced in place (no unretain of sensor/a first), then the vanished one removed
        assert ops == [
            ("retain", "dev/dev1/sensor/a"),
            ("retain", "dev/dev1/sensor/new"),
            ("unretain", "dev/dev1/sensor/gone"),
        ] or ops == [
            ("retain", "dev/dev1/sensor/new"),
            ("retain", "dev/dev1/sensor/a"),
            ("unretain", "dev/dev1/sensor/gone"),
        ], ops
        # same device boot: same generation; the retained changes made while
        # down took no numbers (the snapshot carried their state), so no gap
        # and nothing dropped; the publish was spooled and arrives, flagged late
        assert j.hl.generation == 1
        assert j.hl.counters.get("gaps", 0) == 0
        assert j.dl.counters.get("dropped_down", 0) == 0
        ev = await asyncio.wait_for(sub.recv(), 2)
        assert ev.payload == 9 and ev.origin.extra["late"] is True
        await j.stop()

    run(main(), virtual=True)


def test_device_restart_bumps_generation_and_removes_stale_facts():
    async def main():
        j = Joined()
        j.dev.connect().retain("sensor/old", 1)
        hv = j.host.connect().retained_view("dev/#")
        j.start()
        await until(lambda: synced(j) and len(hv) == 1)
        sid1 = j.dl.sid
        await j.stop()
        # The device reboots: a new bus, a new link, a new sid.
        j2 = Joined(host_link=j.hl)
        j2.dev.connect().retain("sensor/fresh", 2)
        j2.start()
        await until(
            lambda: j.hl.peer_sid == j2.dl.sid and _facts(hv) == [("dev/dev1/sensor/fresh", 2)]
        )
        assert j2.dl.sid != sid1 and j.hl.generation == 2
        m = hv.get("dev/dev1/sensor/fresh")
        assert m.origin.generation == 2 and m.origin.peer_sid == j2.dl.sid
        await j2.stop()

    run(main(), virtual=True)


def test_wrong_key_gets_no_session_and_a_clear_error_on_both_ends():
    async def main():
        j = Joined(dev_key=b"wrong").start()
        j.dev.connect().retain("sensor/a", 1)
        await until(
            lambda: (
                j.hl.counters.get("auth_failures", 0) >= 1
                and j.dl.counters.get("auth_failures", 0) >= 1
            )
        )
        assert j.hl.status != "up" and j.dl.status != "up"
        assert "auth_failed" in j.hl.last_error and "auth_failed" in j.dl.last_error
        assert j.host.stats()["retained"] <= 1  # only the host link's status
        view = j.host.connect().retained_view("link/#")
        await until(lambda: view.snapshot()[0].payload["counters"].get("auth_failures", 0) >= 1)
        st = view.snapshot()[0].payload
        assert st["state"] != "up" and "auth_failed" in st["last_error"]
        await j.stop()

    run(main(), virtual=True)


def test_replayed_hello_is_refused():
    async def main():
        host = edgebus.Bus()
        hl = Link(host, "host", key=b"k", role="responder", seal="offer")  # an unsealed HELLO
        sent = []

        class Capture:
            async def recv(self):
                await asyncio.sleep(10)

            async def send(self, b):
                sent.append(bytes(b))

            def close(self):
                pass

        t = asyncio.create_task(hl.run(Capture()))
        await asyncio.sleep(0)
        from edgebus.link import wire

        hello = wire.encode(
            wire.HELLO, {"v": 1, "node": "d", "sid": "s1", "nonce": "n1", "auth": True}
        )
        hl.feed(hello)
        assert hl.status == "ack_sent"
        hl.feed(hello)  # the same hello again: a replay
        assert hl.counters.get("replays") == 1 and hl.status == "down"
        await asyncio.sleep(0.05)
        kinds = [wire.decode(b)[0] for b in sent]
        assert wire.HELLO_ACK in kinds and wire.ERROR in kinds
        t.cancel()
        await hl.close()

    run(main(), virtual=True)


def test_memory_error_in_a_tick_is_counted_and_the_timers_go_on():
    async def main():
        j = Joined(hb=0.2)
        j.start()
        await until(lambda: synced(j))
        fails = [3]
        real = j.dl.tick

        def tick():  # a board whose heap is briefly full, three ticks running
            if fails[0]:
                fails[0] -= 1
                raise MemoryError("memory allocation failed")
            real()

        j.dl.tick = tick
        await until(lambda: fails[0] == 0)
        pings = j.hl.counters.get("frames_in", 0)
        # heartbeats still go out: the host keeps receiving frames, the session stays up
        await until(lambda: j.hl.counters.get("frames_in", 0) >= pings + 2)
        assert j.dl.counters["memory_errors"] == 3
        assert up(j)
        await j.stop()

    run(main(), virtual=True)


def test_a_late_answer_to_an_earlier_hello_still_makes_the_session():
    """A busy responder answers HELLO 1 after the initiator has sent HELLO 2
    (a fleet storming a bridge): that answer is taken, not dropped as stale,
    and the responder takes the AUTH for it, so no handshake is wasted."""
    from edgebus.link import frame, wire

    async def main():
        j = Joined(hb=0.5)
        held, hellos = [], []

        def hold_acks(data):
            b = frame.decode(data)
            if b is not None and b[0] & wire.TYPE_MASK == wire.HELLO_ACK:
                held.append(data)
                return b""
            return data

        def count_hellos(data):
            b = frame.decode(data)
            if b is not None and b[0] & wire.TYPE_MASK == wire.HELLO:
                hellos.append(data)
            return data

        j.start()
        j.tb.writer.filter = hold_acks
        j.ta.writer.filter = count_hellos
        await until(lambda: len(held) >= 2)  # HELLO 1 and its retry both answered
        j.tb.writer.filter = None
        j.tb.writer.write(held[0])  # the answer to HELLO 1, late
        await until(lambda: up(j))
        assert j.dl.counters.get("earlier_acks") == 1
        assert j.dl.counters.get("stale_acks", 0) == 0 and j.dl.counters["sessions"] == 1
        assert j.hl.counters.get("auth_failures", 0) == 0 and j.hl.counters["sessions"] == 1
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=4)
        j.dev.connect().publish("sensor/late", 1)
        assert (await asyncio.wait_for(sub.recv(), 3)).payload == 1
        await j.stop()

    run(main(), virtual=True)


def test_a_retried_hello_arriving_after_the_session_does_not_end_it():
    """A HELLO the initiator sent before the one that made the session (a
    retry a busy broker delivers late) is ignored; a later one is answered
    beside the session."""
    from edgebus.link import seal, wire

    async def main():
        j = Joined(hb=0.5)
        j.start()
        await until(lambda: synced(j))
        hl = j.hl
        ms = hl._hs[-1][0]["ms"]  # the session's HELLO
        hello = {
            "v": 1,
            "node": "dev1",
            "sid": j.dl.sid,
            "nonce": wire.nonce(),
            "hb": 500,
            "auth": True,
            "ms": ms - 1,
        }
        hl.feed(wire.encode(wire.HELLO, hello))
        assert hl.counters.get("stale_hellos") == 1 and hl.status == "up"
        assert hl.counters["sessions"] == 1 and hl.counters.get("session_ends", 0) == 0
        later = dict(hello, nonce=seal.MARK + wire.nonce(), ms=ms + 1, caps=["seal"])
        hl.feed(wire.encode(wire.HELLO, later))
        # newer: answered, beside the sealed session, which only an AUTH that
        # proves the key would end
        assert hl.status == "up" and hl.counters.get("hellos_beside") == 1
        assert hl._ctl[-1][0] & wire.TYPE_MASK == wire.HELLO_ACK
        assert hl.counters.get("session_ends", 0) == 0
        await j.stop()

    run(main(), virtual=True)
