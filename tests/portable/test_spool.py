"""The link's spool: a byte ring of numbered bodies (edgebus/link/spool.py)."""

from edgebus.link.spool import DEAD, LATEST, SENT, Spool
from tests.portable.support import raises

# The spool's code (its template table and re) is link code in the heap beside
# the core's ~38 KB on the 64-bit unix port: 80K left this module a fragmented
# 20 KB, where a 1 KB list failed to allocate.
MPY_HEAP = "96K"


def drain(sp, free=False):
    """[(seq, body)] of what the spool sends next, in order (freed if free)."""
    out = []
    while True:
        o = sp.peek()
        if o < 0:
            return out
        out.append((sp.seq_at(o), bytes(sp.body(o))))
        sp.advance(free)


def test_put_send_ack_in_order_across_the_wrap():
    sp = Spool(100)
    seq = 1
    sent = []
    for _round in range(30):  # 30 x 3 bodies of 20 bytes through a 100-byte ring
        for _ in range(3):
            assert sp.put(seq, bytes([seq % 256]) * 20)
            seq += 1
        got = drain(sp)
        sent += [s for s, _ in got]
        for s, b in got:
            assert b == bytes([s % 256]) * 20
        assert sp.ack(seq) == 3 and sp.n == 0 and sp.used == 0
    assert sent == list(range(1, seq))
    assert sp.evicted == 0 and sp.refused == 0


def test_full_ring_drops_the_oldest_and_counts_it():
    sp = Spool(100)  # 30-byte entries: 3 fit
    for s in range(1, 6):
        assert sp.put(s, b"x" * 20)
    assert sp.n == 3 and sp.evicted == 2 and sp.dropped_unsent == 2
    assert [s for s, _ in drain(sp)] == [3, 4, 5]


def test_drop_newest_refuses_and_keeps_what_it_has():
    sp = Spool(100, "drop_newest")
    for s in range(1, 6):
        sp.put(s, b"x" * 20)
    assert sp.refused == 2 and [s for s, _ in drain(sp)] == [1, 2, 3]


def test_rewind_sends_again_from_a_number_and_ack_frees():
    sp = Spool(256)
    for s in range(1, 6):
        sp.put(s, b"%d" % s)
    assert [s for s, _ in drain(sp)] == [1, 2, 3, 4, 5]
    assert sp.ack(3) == 2  # 1 and 2 acknowledged
    assert sp.rewind(4) == 2  # 4 and 5 again
    o = sp.peek()
    assert sp.flags_at(o) & SENT  # a retransmission
    assert [s for s, _ in drain(sp)] == [4, 5]
    assert sp.rewind() == 3  # from the oldest held: 3, 4, 5
    assert [s for s, _ in drain(sp)] == [3, 4, 5]


def test_latest_entries_die_when_sent_and_unsent_ones_can_be_killed():
    sp = Spool(256)
    sp.put(1, b"a", LATEST)
    sp.put(2, b"b")
    sp.put(3, b"c", LATEST)
    o = sp.peek()
    sp.advance(False, sp.flags_at(o) & LATEST)  # 1 sent, gone
    assert sp.flags_at(sp.head) & DEAD
    assert sp.kill_unsent(LATEST) == 1  # 3 dropped, 2 kept
    assert sp.first_live() == 2
    assert sp.oldest_age() is not None and sp.stats()["depth"] == 3


def test_a_body_larger_than_the_ring_is_refused_and_bad_arguments_raise():
    sp = Spool(64)
    assert not sp.put(1, b"x" * 60) and sp.refused == 1 and sp.n == 0
    raises(ValueError, Spool, 32)
    raises(ValueError, Spool, 256, "block")
    assert len(Spool(bytearray(128)).buf) == 128  # a buffer allocated earlier
