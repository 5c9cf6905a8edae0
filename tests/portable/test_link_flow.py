"""Flow control (docs/protocol.md section 11, capability "flow"): a receiver
paces its sender with a window, the numbered frames it may have sent and not
acknowledged; what the window does not admit waits in the sender's spool,
nothing is sent to be thrown away, nothing is lost."""

import asyncio

from tests.portable.linkkit import Joined, synced, until
from tests.portable.support import run
from tests.portable.test_link_spool import _recv_all

MPY_HEAP = "288K"


async def _durable(window):
    """Joined links whose host is durable (acknowledges only when told) and
    gives the device ``window`` before the session starts."""
    j = Joined(host_kw={"durable": True})
    j.hl.window(window)
    j.start()
    sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=64)
    c = j.dev.connect()
    await until(lambda: synced(j))
    return j, sub, c


def test_the_window_from_the_handshake_bounds_what_is_sent_ahead_of_the_acks():
    async def main():
        j, sub, c = await _durable(3)
        assert j.dl.stats()["acking"] and j.dl._tx_window == 3  # told in HELLO_ACK
        for n in range(10):
            c.publish("sensor/n", n)
        await until(lambda: len(_recv_all(sub)) == 0 and j.hl.counters.get("imported") == 3)
        await asyncio.sleep(0.2)
        assert j.hl.counters["imported"] == 3  # three, and no more
        assert j.dl.spool_stats()["depth"] == 10  # all kept, 7 not yet sent
        assert j.dl.counters.get("retransmitted", 0) == 0
        j.hl.acknowledge(j.hl.rx_mark())  # durable: three more may go
        await until(lambda: j.hl.counters["imported"] == 6)
        await asyncio.sleep(0.2)
        assert j.hl.counters["imported"] == 6
        j.hl.acknowledge(j.hl.rx_mark())
        await until(lambda: j.hl.counters["imported"] == 9)
        await j.stop()

    run(main(), virtual=True)


def test_a_window_change_mid_session_stops_and_restarts_the_sender():
    async def main():
        j, sub, c = await _durable(None)
        assert j.dl._tx_window is None  # no limit unless told
        j.hl.window(0)  # the owner is behind: stop
        await until(lambda: j.dl._tx_window == 0)
        for n in range(5):
            c.publish("sensor/n", n)
        await asyncio.sleep(0.3)
        assert j.hl.counters.get("imported", 0) == 0 and j.dl.spool_stats()["depth"] == 5
        j.hl.window(None)  # caught up: everything
        await until(lambda: j.hl.counters.get("imported", 0) == 5)
        assert [m.payload for m in _recv_all(sub)] == [0, 1, 2, 3, 4]
        assert j.hl.counters.get("gaps", 0) == 0 and j.dl.counters.get("retransmitted", 0) == 0
        j.hl.window(None)  # unchanged: no frame
        assert not j.hl._ctl
        await j.stop()

    run(main(), virtual=True)


def test_the_window_holds_across_a_reconnect_and_a_peer_that_ignores_it_is_not_told():
    async def main():
        j, sub, c = await _durable(2)
        await j.stop()
        for n in range(6):
            c.publish("sensor/n", n)  # spooled while down
        j.start()
        await until(lambda: synced(j) and j.hl.counters.get("imported", 0) == 2)
        await asyncio.sleep(0.2)
        assert j.hl.counters["imported"] == 2  # the new session's window too
        j.hl.acknowledge(j.hl.rx_mark())
        await until(lambda: j.hl.counters["imported"] == 4)
        await j.stop()
        # a device that does not offer "flow" (the first releases) is never told
        k = Joined(host_kw={"durable": True}, dev_kw={"ack": False})
        k.hl.window(1)
        k.start()
        await until(lambda: synced(k))
        assert not k.hl._flow and k.dl._tx_window is None
        await k.stop()

    run(main(), virtual=True)


def test_a_sender_that_claims_flow_and_ignores_the_window_gets_no_more_than_it():
    """The window is kept by the receiver: frames past it are not taken
    (over_window) and asked for again, so a sender whose code ignores the
    window gets no further ahead of the acknowledgements than an honest one,
    and nothing of it is lost."""

    async def main():
        j, sub, c = await _durable(3)
        c.publish("sensor/n", -1)  # the session's first ACK: from it on the window is kept
        await until(lambda: j.hl.counters.get("imported") == 1)
        j.hl.acknowledge(j.hl.rx_mark())
        assert [m.payload for m in _recv_all(sub)] == [-1]
        j.dl._tx_window = None  # the sender's code ignores what it was told
        for n in range(10):
            c.publish("sensor/n", n)
        await until(lambda: j.hl.counters.get("over_window", 0) >= 1)
        await asyncio.sleep(0.2)
        assert j.hl.counters["imported"] == 1 + 3  # the window's three, and no more
        got = [m.payload for m in _recv_all(sub)]
        for _ in range(20):  # the owner acknowledges what it made durable, window by window
            j.hl.acknowledge(j.hl.rx_mark())
            await asyncio.sleep(0.2)
            # never more taken than acknowledged plus the window
            assert j.hl.counters["imported"] <= j.hl._rx_acked - 1 + 3
            got += [m.payload for m in _recv_all(sub)]
            if len(got) == 10:
                break
        assert got == list(range(10))  # every reading, once, in order
        assert j.hl.counters.get("gaps", 0) == 0
        await j.stop()

    run(main(), virtual=True)


def test_a_paced_receiver_refuses_a_sender_without_a_window():
    async def main():
        # paced: the bridge's default for device links
        j = Joined(dev_kw={"ack": False}, host_kw={"paced": True})
        j.start()
        # the refusal reaches the device one hop after the host counts it
        await until(
            lambda: (
                j.hl.counters.get("unpaced_refused", 0) >= 1
                and "pace_required" in (j.dl.last_error or "")
            )
        )
        assert j.hl.status != "up" and j.dl.status != "up"
        await j.stop()
        j = Joined(host_kw={"paced": True})  # a sender that offers ack and flow links as before
        j.start()
        await until(lambda: synced(j))
        assert j.hl.counters.get("unpaced_refused", 0) == 0
        await j.stop()

    run(main(), virtual=True)


def test_the_owner_holds_frames_by_their_size_and_takes_them_later():
    """Link.hold(link, size) hears each numbered frame's bytes (0: may any
    pass now, behind a held frame and at the timer's look): a frame it holds
    stays in the sender's spool, and so do the ones behind it, until the hold
    is off; then all come, once and in order (protocol section 11)."""

    async def main():
        j = Joined(dev_kw={"status": False})
        sizes = []
        shut = [True]  # frames over 200 bytes wait while shut

        def hold(link, size):
            sizes.append(size)
            return shut[0] and (size == 0 or size > 200)

        j.hl.hold = hold
        j.start()
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=16)
        c = j.dev.connect()
        await until(lambda: synced(j))
        c.publish("sensor/n", 1)
        c.publish("sensor/big", "x" * 400)
        c.publish("sensor/n", 2)  # small, but behind the held one
        await until(lambda: j.hl.counters.get("held", 0) >= 1 and 0 in sizes)
        await until(lambda: j.dl.spool_stats()["depth"] == 2)  # 1 acknowledged, the rest kept
        assert [m.payload for m in _recv_all(sub)] == [1]
        small = [s for s in sizes if 0 < s <= 200]
        assert small and max(sizes) > 400, sizes
        shut[0] = False
        await until(lambda: j.hl.counters.get("imported", 0) == 3)
        assert [m.payload for m in _recv_all(sub)] == ["x" * 400, 2]
        assert j.hl.counters.get("gaps", 0) == 0
        await j.stop()

    run(main(), virtual=True)
