"""ACKs while readings keep coming (docs/protocol.md section 14): one ACK at
most every ``ack_gap`` seconds covers what came meanwhile, unless half the
window waits for it; a reading after a quiet spell is acknowledged at once;
``ack_gap=0`` acknowledges each as soon as it can. Nothing goes unacknowledged."""

import asyncio

from edgebus.link import tx
from tests.portable.linkkit import Joined, until, up
from tests.portable.support import run

MPY_HEAP = "224K"


async def _acks_for_ten(host_kw, window=None):
    """ACK frames the device took for ten readings 20 ms apart, every one
    acknowledged in the end; and whether the first came at once."""
    seen = []
    orig = tx.on_ack

    def counting(link, n):
        orig(link, n)
        if link is j.dl:
            seen.append(n)

    tx.on_ack = counting  # rx calls it through the module
    j = Joined(host_kw=host_kw).start()
    try:
        await until(lambda: up(j), 5)
        if window is not None:
            j.hl.window(window)
            await until(lambda: j.dl._tx_window == window, 5)
        await asyncio.sleep(0.6)  # past a gap since the session's own frames
        c = j.dev.connect()
        first = j.dl.tx_seq
        del seen[:]
        c.publish("sensor/temp", 0)
        await until(lambda: j.dl.tx_acked > first, 5)
        at_once = len(seen)
        for k in range(1, 10):
            await asyncio.sleep(0.02)
            c.publish("sensor/temp", k)
        last = first + 9
        await until(lambda: j.dl.tx_acked > last, 5)
        return len(seen), at_once
    finally:
        tx.on_ack = orig
        await j.stop()


def test_readings_faster_than_the_gap_share_their_acks():
    async def main():
        acks, at_once = await _acks_for_ten({})
        assert at_once == 1  # the first after a quiet spell: at once
        assert acks <= 4, acks  # 20 ms apart, the rest within one or two gaps

    run(main())


def test_a_gap_the_sender_would_take_for_a_loss_is_refused():
    from edgebus.link.options import Options

    for bad in (-0.1, 1.5, "0.5"):
        try:
            Options(ack_gap=bad)
        except (TypeError, ValueError) as e:
            assert "ack_gap" in str(e)
        else:
            raise AssertionError("ack_gap=%r was taken" % (bad,))


def test_no_gap_acknowledges_each_reading():
    async def main():
        acks, _ = await _acks_for_ten({"ack_gap": 0})
        assert acks >= 5, acks  # each, but for readings that came in one batch

    run(main())


def test_half_the_window_waiting_is_acknowledged_without_the_gap():
    async def main():
        acks, _ = await _acks_for_ten({"ack_gap": 1.0}, window=4)
        # ten readings in 0.2 s, a window of 4: an ACK at least every 2, not
        # one at once and one a second later
        assert acks >= 4, acks

    run(main())


def test_a_held_ack_is_said_before_the_bye():
    async def main():
        j = Joined(host_kw={"ack_gap": 1.0}).start()
        try:
            await until(lambda: up(j), 5)
            await asyncio.sleep(1.1)  # past a gap since the session's own frames
            c = j.dev.connect()
            first = j.dl.tx_seq
            c.publish("sensor/temp", 0)
            await until(lambda: j.dl.tx_acked > first, 5)  # at once
            for k in range(1, 4):
                c.publish("sensor/temp", k)
            last = first + 3
            await until(lambda: (j.hl.state.get("rx_next") or 0) > last, 5)
            assert j.dl.tx_acked <= last  # held: within the gap, under 16
            await j.hl.close("bye")
            await until(lambda: j.dl.tx_acked > last, 5)
        finally:
            await j.stop()

    run(main())
