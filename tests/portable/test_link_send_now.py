"""A control frame (an ACK) sent at once while the link's writer waits for
work, through a transport that can send without waiting (send_nowait, the
bridge's MQTT devices'); the writer's path when the transport cannot take it
now; a failure counted as the writer counts it."""

import asyncio

from edgebus.link import wire
from edgebus.link.frame import encode
from edgebus.link.pipe import pair
from edgebus.link.stream import StreamTransport
from tests.portable.linkkit import Joined, until, up
from tests.portable.support import run

# Two sealed links and their pipes in one interpreter, as test_link_data.
MPY_HEAP = "224K"


class Nowait(StreamTransport):
    """A pipe end that also sends without waiting, and says which frames it
    sent so (their types); ``full`` makes it decline, ``fail`` raise."""

    def __init__(self, t):
        super().__init__(t.reader, t.writer, t.max_len)
        self.now = []
        self.full = False
        self.fail = None

    def send_nowait(self, body, tail=None):
        if self.fail is not None:
            raise self.fail
        if self.full:
            return False
        self.writer.write(encode(body, self.max_len, True, tail))
        self.now.append(body[0] & wire.TYPE_MASK)
        return True


def _joined():
    j = Joined()
    j.ta, tb = pair()
    j.tb = Nowait(tb)
    j.tasks = [
        asyncio.create_task(j.dl.run(j.ta)),
        asyncio.create_task(j.hl.run(j.tb)),
    ]
    return j


async def _three_acked(j):
    """Three readings from the device, each waited for until the host acknowledged it."""
    c = j.dev.connect()
    for k in range(3):
        n = j.dl.tx_seq
        c.publish("sensor/temp", k)
        await until(lambda: j.dl.tx_acked > n, 5)  # ACK n+1: n is durable there


def test_an_ack_goes_at_once_through_send_nowait_while_the_writer_waits():
    async def main():
        j = _joined()
        await until(lambda: up(j), 5)
        out = j.hl.counters.get("frames_out", 0)
        await _three_acked(j)
        assert wire.ACK in j.tb.now  # sealed as the writer seals: the device took them
        assert j.hl.counters["frames_out"] - out >= j.tb.now.count(wire.ACK)
        assert j.hl.counters.get("send_errors", 0) == 0
        await j.stop()

    run(main())


def test_a_transport_that_cannot_take_it_now_leaves_the_frame_to_the_writer():
    async def main():
        j = _joined()
        await until(lambda: up(j), 5)
        j.tb.full = True
        sent = len(j.tb.now)
        await _three_acked(j)
        assert len(j.tb.now) == sent  # every ACK went through the writer's send
        assert j.hl.counters.get("send_errors", 0) == 0
        await j.stop()

    run(main())


def test_a_failed_send_now_is_counted_and_closes_the_transport():
    async def main():
        j = _joined()
        await until(lambda: up(j), 5)
        j.tb.fail = OSError("the broker went away")
        j.dev.connect().publish("sensor/temp", 1)
        await until(lambda: j.hl.counters.get("send_errors", 0) >= 1, 5)
        assert "the broker went away" in j.hl.last_error
        await until(lambda: j.hl.status != "up", 5)
        await j.stop()

    run(main())
