"""Which clock a reading's ts comes from (docs/protocol.md, Time): the HELLO's
"clk", marked by the receiver in each reading's extra, bound by the seal."""

import asyncio

from edgebus import compat
from edgebus.link import seal
from tests.portable.linkkit import Joined, synced, until
from tests.portable.support import run

MPY_HEAP = "224K"  # two sealed links, as test_link_data


def test_the_receiver_marks_the_senders_clock_and_only_its_own_mark_stands():
    async def main():
        compat.wall[0] = "ntp"  # both ends share this interpreter's clock
        try:
            j = Joined().start()
            await until(lambda: synced(j))
            sub = j.host.connect().subscribe("dev/dev1/sensor/#")
            c = j.dev.connect()
            c.publish("sensor/a", 1, extra={"clk": "forged"})
            c.publish("sensor/b", 2, extra={"ts": 5, "clk": "forged"})
            a = (await asyncio.wait_for(sub.recv(), 2)).origin.extra
            b = (await asyncio.wait_for(sub.recv(), 2)).origin.extra
            assert a["clk"] == "ntp" and abs(a["ts"] * 1000 - compat.wall_ms()) < 2000, a
            # the publisher's own ts: no link clock behind it, so no mark at all
            assert b["ts"] == 5 and "clk" not in b, b
            await j.stop()
        finally:
            compat.wall[0] = None

    run(main())


def test_a_clock_source_the_protocol_does_not_know_is_not_written_into_the_log():
    async def main():
        compat.wall[0] = "gps; DROP TABLE"  # a hostile peer's HELLO says anything
        try:
            j = Joined().start()
            await until(lambda: synced(j))
            sub = j.host.connect().subscribe("dev/dev1/sensor/#")
            j.dev.connect().publish("sensor/a", 1)
            x = (await asyncio.wait_for(sub.recv(), 2)).origin.extra
            assert "ts" in x and "clk" not in x, x
            await j.stop()
        finally:
            compat.wall[0] = None

    run(main())


def test_a_withheld_clock_reads_as_unset_and_comes_back_when_released():
    compat.wall[0] = "bridge"
    try:
        assert compat.wall_ms() is None
    finally:
        compat.wall[0] = None
    assert compat.wall_ms() is not None


def test_the_seal_binds_the_clock_source_and_a_side_without_one_binds_as_before():
    side = {"caps": [1], "hb": 1000, "ms": 5, "wall": 7, "win": 4}
    old = seal.bound(side)
    assert old == "1;1000;5;7;4"
    side["clk"] = "ntp"
    ntp = seal.bound(side)
    side["clk"] = "rtc"
    assert ntp != old and ntp != seal.bound(side)
