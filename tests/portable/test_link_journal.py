"""The flash spool (docs/protocol.md 14): the journal on a real filesystem,
and earlier boots' readings delivered later under their own provenance."""

import asyncio
import gc
import os
from binascii import hexlify

import edgebus
from edgebus.link.journal import Journal
from tests.portable.linkkit import Joined, synced, until
from tests.portable.support import run

# Two buses and two links in one interpreter, as test_link_data, plus the
# links of the device's earlier boots and their journal buffers (64-bit unix port);
# ~240K passes, and at 256K a 2 KB spool once found no block (fragmentation).
MPY_HEAP = "288K"


def _tmpdir():
    try:
        os.mkdir("/tmp")
    except OSError:
        pass  # it exists; a board's filesystem starts without one
    d = "/tmp/edgebus-journal-" + hexlify(os.urandom(6)).decode()
    os.mkdir(d)
    return d


def _rmtree(d):
    for n in os.listdir(d):
        os.remove(d + "/" + n)
    os.rmdir(d)


def _copy(src, dst):
    for n in os.listdir(src):
        with open(src + "/" + n, "rb") as f:
            data = f.read()
        with open(dst + "/" + n, "wb") as f:
            f.write(data)


def _body(i):
    return bytes([11, 0, i & 0xFF]) + ('["sensor/x",%d,null,%d]' % (i, 1000 + i)).encode()


def test_journal_writes_blocks_only_when_unacknowledged_and_deletes_acknowledged():
    d = _tmpdir()
    try:
        j = Journal(d, "boot1", size=8192, block=256)
        for i in range(1, 6):
            j.append(i, _body(i))
        assert j.writes == 0 and os.listdir(d) == []  # all in the one block buffer
        j.ack(6)  # all acknowledged: never written
        j.flush()
        assert j.writes == 0 and os.listdir(d) == []
        for i in range(6, 40):  # more than a block: written whole
            j.append(i, _body(i))
        assert j.writes >= 1 and j.written >= 256 and len(os.listdir(d)) == 1
        j.flush()  # the rest (a session went down)
        j.ack(20)
        assert j.stats()["files"] >= 1
        j.ack(40)
        assert os.listdir(d) == [] and j.stats()["bytes"] == 0
    finally:
        _rmtree(d)


def test_journal_after_a_reboot_holds_the_unacknowledged_and_stays_bounded():
    d = _tmpdir()
    try:
        j = Journal(d, "boot1", size=4096, block=256)
        for i in range(1, 11):
            j.append(i, _body(i))
        j.ack(4)
        j.flush()
        j2 = Journal(d, "boot2", size=4096, block=256)  # a reboot: a new sid, same place
        st = j2.stats()
        assert st["old_boots"] == 1 and st["old_entries"] == 10  # the file's count
        o = j2.olds[0]
        assert o[0] == "boot1" and o[2] == 4  # acknowledged below 4
        seqs = []
        while True:
            e = j2._entry(o)
            if e is None:
                break
            seqs.append(e[0])
            assert bytes(e[1]) == _body(e[0])
            o[4], o[5] = e[2], e[3]
        assert seqs == list(range(4, 11))
        # Bounded: far more than fits drops the oldest files, counted.
        for i in range(1, 400):
            j2.append(i, _body(i))
        j2.flush()
        total = 0
        for n in os.listdir(d):
            total += os.stat(d + "/" + n)[6]
        assert total <= 4096 and j2.stats()["bytes"] == total
        assert j2.dropped > 0 and j2.stats()["old_boots"] == 0  # boot1's went first
    finally:
        _rmtree(d)


async def _end(j):
    """The device boot ends: its line, its link (the journal written)."""
    await j.stop()
    await j.dl.close()
    gc.collect()


async def _outage_boot(d, host, hl, n):
    """A device boot that comes up once, then publishes n readings while
    the line is down and is left (a reboot) once the journal wrote them."""
    j = Joined(dev_kw={"journal": d, "journal_block": 512}, host_bus=host, host_link=hl).start()
    await until(lambda: synced(j))
    sid = j.dl.sid
    c = j.dev.connect()
    n0 = hl.counters.get("imported", 0)
    c.publish("sensor/x", -1)
    await until(lambda: hl.counters.get("imported", 0) > n0)  # delivered live
    await j.stop()
    for i in range(n):
        c.publish("sensor/x", i, extra={"clk": "ntp"})  # a label only a receiver may set
    await until(lambda: j.dl.stats()["spool"]["unsent"] == n)
    await until(lambda: j.dl.stats()["journal"]["buffered"] == 0, 6)  # the flusher
    await j.dl.close()  # the boot ends (its journal written already)
    gc.collect()
    return sid


def test_earlier_boot_readings_arrive_under_their_own_sid_late_once():
    async def main():
        d = _tmpdir()
        saved = _tmpdir()
        try:
            host = edgebus.Bus()
            sub = host.connect().subscribe("dev/dev1/sensor/x", queue_len=32)
            j0 = Joined(host_bus=host)
            hl = j0.hl
            sid1 = await _outage_boot(d, host, hl, 6)
            m = await asyncio.wait_for(sub.recv(), 2)
            assert m.payload == -1 and m.origin.peer_sid == sid1
            _copy(d, saved)
            # The next boot: the earlier boot's six come, as HIST, under sid1.
            j = Joined(
                dev_kw={"journal": d, "journal_block": 512}, host_bus=host, host_link=hl
            ).start()
            got = []
            for _ in range(6):
                got.append(await asyncio.wait_for(sub.recv(), 3))
            assert [m.payload for m in got] == list(range(6))
            for m in got:
                o = m.origin
                assert o.peer_sid == sid1 and o.peer_sid != j.dl.sid
                assert o.generation == 1 and hl.generation == 2
                assert o.extra["late"] is True and o.extra["ts"] > 1.5e9
                assert "clk" not in o.extra  # the sender's label removed (docs/protocol.md 14)
            assert [m.origin.extra["seq"] for m in got] == list(range(2, 8))
            assert hl.counters.get("gaps", 0) == 0
            await until(lambda: j.dl.stats()["journal"]["old_boots"] == 0)  # acknowledged: gone
            await _end(j)
            j = None
            # A journal copied before: the receiver has it all already and
            # says so (ACK [8, sid1]); whatever HIST was on its way is dropped.
            j3 = Joined(
                dev_kw={"journal": saved, "journal_block": 512}, host_bus=host, host_link=hl
            ).start()
            await until(lambda: j3.dl.stats()["journal"]["old_boots"] == 0)
            assert sub.recv_nowait() is None and hl.counters.get("gaps", 0) == 0
            await _end(j3)
        finally:
            _rmtree(d)
            _rmtree(saved)

    run(main(), virtual=True)


def test_durable_receiver_acknowledges_earlier_boots_only_when_the_owner_does():
    async def main():
        d = _tmpdir()
        try:
            host = edgebus.Bus()
            sub = host.connect().subscribe("dev/dev1/sensor/x", queue_len=32)
            hl = Joined(host_bus=host, host_kw={"durable": True}).hl
            sid1 = await _outage_boot(d, host, hl, 3)
            j = Joined(
                dev_kw={"journal": d, "journal_block": 512}, host_bus=host, host_link=hl
            ).start()
            got = []
            for _ in range(4):
                got.append(await asyncio.wait_for(sub.recv(), 3))
            assert [m.payload for m in got] == [-1, 0, 1, 2]
            assert j.dl.stats()["journal"]["old_boots"] == 1  # nothing acknowledged
            await _end(j)
            # The next boot sends them all again: every one a duplicate, dropped.
            j = Joined(
                dev_kw={"journal": d, "journal_block": 512}, host_bus=host, host_link=hl
            ).start()
            await until(lambda: hl.counters.get("duplicates", 0) >= 4)
            assert sub.recv_nowait() is None and j.dl.stats()["journal"]["old_boots"] == 1
            mark = hl.rx_mark()
            assert (sid1, 5) in mark[2]
            hl.acknowledge(mark)  # the owner made them durable
            await until(lambda: j.dl.stats()["journal"]["old_boots"] == 0)
            assert sub.recv_nowait() is None and hl.counters.get("gaps", 0) == 0
            await _end(j)
        finally:
            _rmtree(d)

    run(main(), virtual=True)
