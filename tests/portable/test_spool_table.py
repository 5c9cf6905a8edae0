"""The spool's template table: a sequenced JSON body spooled as its numbers,
given back byte for byte (edgebus/link/spool.py)."""

from edgebus.link import spool, wire
from edgebus.link.spool import DEAD, LATEST, Spool
from tests.portable.test_spool import drain

MPY_HEAP = "144K"  # the spool and wire (hashlib, json) beside the core; 16 KB rings


def _temp(seq, n, ms, c=21.3):
    # firmware/services/temp.py's reading as the link encodes it (tx.encode_item)
    obj = ["sensor/temp", {"c": c, "n": n, "simulated": True}, None, ms]
    return wire.parts(wire.PUB, obj, seq)


def _spool(size):
    # templating from the first body (a spool does once it holds a backlog)
    sp = Spool(size)
    sp._pressed = 0
    return sp


def test_a_reading_spools_as_its_numbers_and_comes_back_as_sent():
    sp = _spool(4096)
    sent = {}
    for i in range(50):
        seq = 65530 + i  # the body's 16-bit number wraps; the spool's does not
        b = _temp(seq, 1728000 + i, 86400000 + 50 * i, round(20.0 + i / 7, 2))
        sent[seq] = wire.join(b)
        assert sp.put(seq, b)
        assert sp._size(sp.last) <= 36  # header 8, then "1728049,27.0,86402450"
    assert len([e for e in sp._tpl if e]) == 1 and sp._tpl[0][1] == 50
    assert sp.table_bytes() > 0 and sp.used < 50 * 36
    got = drain(sp)
    assert [s for s, _ in got] == sorted(sent)
    assert all(b == sent[s] for s, b in got)
    assert sp.ack(65530 + 50) == 50 and sp._tpl[0][1] == 0  # freed: no entry uses it


def test_bodies_go_in_as_sent_until_the_spool_holds_a_backlog():
    sp = Spool(16384)  # 2 KB: about 30 readings as sent, then as their numbers
    assert spool._press(len(sp.buf)) == 2048 and spool._press(4096) == 2048
    assert spool._press(65536) == 4096 and spool._press(1000) == 500
    kinds = []
    for seq in range(1, 61):
        before = sp.used
        assert sp.put(seq, _temp(seq, seq, 50 * seq))
        kinds.append((before >= 2048, sp.buf[sp.last + 4] & 0x1F))
    assert kinds == [(k, 1 if k else 0) for k, _ in kinds] and (True, 1) in kinds
    assert (False, 0) in kinds and sp.evicted == 0
    got = drain(sp)
    assert [b for _, b in got] == [wire.join(_temp(s, s, 50 * s)) for s in range(1, 61)]


def test_what_no_template_fits_is_stored_as_sent():
    sp = _spool(4096)
    bodies = [
        (1, wire.parts(wire.PUB, ["a/b", None, None, 5], 1, b"\x00\xff raw")),  # binary tail
        (2, wire.encode(wire.PUB, ["x", 1], 7)),  # its 16-bit number is not the entry's
        (3, b'\x4b\x00\x03["n\xc3\xa9",\xff2]'),  # 0xFF: no hole can stand for it
        (4, wire.encode(wire.SKIP, 4)),  # no sequence number in it
        (5, b"\x4b"),  # too short for a head
        (6, wire.parts(wire.PUB, ["big", "x" * 1500, None, 1], 6)),  # longer than _TMAX
    ]
    for seq, b in bodies:
        assert sp.put(seq, b)
        assert sp.buf[sp.last + 4] & 0x1F == 0  # table index 0: as sent
    assert not sp._tpl and sp.table_bytes() == 0
    got = drain(sp)
    assert [b for _, b in got] == [
        bytes(wire.join(b) if type(b) is tuple else b) for _, b in bodies
    ]


def test_a_body_with_no_numbers_and_one_past_127_bytes_round_trip():
    sp = _spool(16384)
    a = wire.parts(wire.RET, ["cfg/name", "dev-one", None, None], 9)  # no numbers... but 9 in head
    long = wire.parts(wire.PUB, ["t", {"k%d" % i: i for i in range(40)}, None, 12], 10)
    assert sp.put(9, a) and sp.put(10, long)
    o = sp.last
    assert sp.buf[o + 4] & 0x1F and sp.buf[o + 7] & 0x80  # templated, 3-byte length
    assert [b for _, b in drain(sp)] == [wire.join(a), wire.join(long)]


def test_a_full_table_stores_bodies_as_sent_until_entries_free_a_template():
    sp = _spool(1024)  # a table of 128 bytes: one template of this size
    first = wire.parts(wire.PUB, ["s/0", {"v": 1}, None, 5], 1)
    other = wire.parts(wire.PUB, ["s/x", {"w": 2}, None, 6], 2)
    assert sp.put(1, first) and sp.buf[sp.last + 4] & 0x1F == 1
    assert sp.put(2, other) and sp.buf[sp.last + 4] & 0x1F == 0  # no room: as sent
    assert [b for _, b in drain(sp)] == [wire.join(first), wire.join(other)]
    sp.ack(3)
    again = wire.parts(wire.PUB, ["s/x", {"w": 3}, None, 7], 3)
    assert sp.put(3, again) and sp.buf[sp.last + 4] & 0x1F == 1  # the unused one gave way
    assert len(sp._tix[wire.PUB | 0x40]) == 1 and bytes(sp.body(sp.last)) == wire.join(again)


def test_the_table_holds_31_templates_at_most():
    sp = _spool(12288)  # a table of 1,536 bytes: room for more than 31 of these
    for i in range(40):
        assert sp.put(i, wire.parts(wire.PUB, ["t%s" % chr(97 + i % 26) * (1 + i // 26), 0], i))
    kinds = [sp.buf[o + 4] & 0x1F for o in _offsets(sp)]
    assert len([k for k in kinds if k]) == 31 and kinds[31:] == [0] * 9
    assert [s for s, _ in drain(sp)] == list(range(40))


def _offsets(sp):
    out = []
    o = sp.head
    for _ in range(sp.n):
        out.append(o)
        o = sp._after(o)
    return out


def test_eviction_and_the_wrap_keep_templates_counted_and_flags_apart():
    sp = _spool(1024)  # ~20-byte entries: about 50 held, then the oldest go
    for seq in range(1, 400):
        assert sp.put(seq, _temp(seq, seq, 50 * seq), LATEST if seq % 3 == 0 else 0)
        if seq % 5 == 0:
            o = sp.peek()
            f = sp.flags_at(o)
            sp.advance(False, f & LATEST)
    live = sum(e[1] for e in sp._tpl if e)
    assert live == sp.n and sp.evicted > 300 and sp.dropped_unsent > 0
    for o in _offsets(sp):
        assert sp.buf[o + 4] & 0x1F == 1  # the flags never overwrite the index
        if sp.flags_at(o) & DEAD:
            assert sp.seq_at(o) % 3 == 0
    sp.rewind()
    got = drain(sp, True)
    assert got and all(b == wire.join(_temp(s, s, 50 * s)) for s, b in got)
    assert sp.n == 0 and sp.used == 0 and sp._tpl[0][1] == 0


def test_random_operations_match_a_plain_model():
    # A fixed LCG drives puts of templated and plain bodies, sends, acks and
    # rewinds through a small ring; every body sent is the one put.
    x = [12345]

    def rnd(k):
        x[0] = (x[0] * 1103515245 + 12345) & 0x7FFFFFFF
        return (x[0] >> 8) % k

    sp = _spool(1200)  # a table of 150 bytes: two of the three topics' templates
    model = {}  # seq -> body as sent
    seq = 0
    kinds = set()
    for _ in range(3000):
        r = rnd(10)
        if r < 5:
            seq += 1 + (rnd(4) == 0) * rnd(70000)  # numbers lost between puts too
            if rnd(4):
                b = wire.parts(
                    wire.PUB, ["s/" + "abc"[rnd(3)], {"v": rnd(10 ** rnd(9))}, None, seq], seq
                )
            else:
                b = bytes([rnd(256) for _ in range(rnd(40))])
            model[seq] = wire.join(b) if type(b) is tuple else b
            if sp.put(seq, b):
                kinds.add(sp.buf[sp.last + 4] & 0x1F)
        elif r < 8:
            o = sp.peek()
            if o >= 0:
                assert bytes(sp.body(o)) == model[sp.seq_at(o)]
                sp.advance()
        elif r < 9 and sp.n:
            sp.ack(sp.seq_at(sp.head) + rnd(3))
        else:
            sp.rewind()
        if sp.n and len(model) > 60:  # what the spool let go
            h = sp.seq_at(sp.head)
            for s in [s for s in model if s < h]:
                del model[s]
        held = [sp.seq_at(o) for o in _offsets(sp)]
        assert held == sorted(held) and len(held) == sp.n
        assert sum(e[1] for e in sp._tpl if e) == len(
            [o for o in _offsets(sp) if sp.buf[o + 4] & 0x1F]
        )
    assert sp.evicted > 0 and sp.table_bytes() <= 1200 // 8 and kinds == {0, 1, 2}
