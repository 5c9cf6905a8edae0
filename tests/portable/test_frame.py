"""Framing of the federation link: COBS + CRC-16 frames on byte streams."""

from edgebus.link.frame import (
    BLOCK,
    DELIM,
    MAX_LEN,
    FrameReader,
    blocks,
    crc16,
    crc16_py,
    decode,
    encode,
    max_encoded_len,
)
from tests.portable.support import raises

# Importing edgebus.link imports the core package first (~38 KB on the 64-bit
# unix port, about half that on 32-bit boards); the reader's two 1 KB buffers
# and this module need the rest.
MPY_HEAP = "128K"  # MAX_LEN frames, whole and block by block, several 1 KB buffers live at once


def _body(n, seed=0):
    """n bytes with zeros sprinkled in (seed varies the pattern)."""
    b = bytearray(n)
    for i in range(n):
        b[i] = (i * 7 + seed) % 251
    return bytes(b)


def _bodies(n):
    """Three bodies of n bytes: all 0x00, all 0xFF and a mixed one."""
    yield bytes(n)
    yield b"\xff" * n
    yield _body(n, n)


def _errors(r):
    return r.crc_errors + r.cobs_errors + r.oversize


def _feed_all(r, data, step):
    """Feed data in chunks of step bytes; the bodies returned."""
    got = []
    for i in range(0, len(data), step):
        got.extend(r.feed(data[i : i + step]))
    return got


def test_crc_check_value():
    # crc16 may be CPython's C crc_hqx; crc16_py is what MicroPython runs.
    for crc in (crc16, crc16_py):
        assert crc(b"123456789") == 0x29B1
        assert crc(b"") == 0xFFFF
        # Incremental: continue from a previous value.
        assert crc(b"6789", crc(b"12345")) == 0x29B1
        assert crc(bytearray(b"123456789")) == 0x29B1
        assert crc(memoryview(b"123456789")) == 0x29B1
        # Not reflected, no xorout: body + CRC (big-endian) leaves zero.
        assert crc(b"123456789\x29\xb1") == 0
        assert crc(bytes(range(256))) == crc16_py(bytes(range(256)))


def _crc_bitwise(data, crc=0xFFFF):
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def test_crc_table_matches_the_polynomial():
    # crc16_py's table is two bytes literals: every entry is used by one of
    # these (from 0xFFFF the first lookup is at 0xFF ^ b), from two starts.
    for start in (0xFFFF, 0x1D0F):
        for b in range(256):
            assert crc16_py(bytes([b]), start) == _crc_bitwise(bytes([b]), start)
    data = bytes((i * 37 + 11) & 0xFF for i in range(300))
    assert crc16_py(data) == _crc_bitwise(data)


def test_known_frames():
    # Empty body: CRC 0xFFFF -> data FF FF -> COBS 03 FF FF, delimiter.
    assert encode(b"") == b"\x03\xff\xff\x00"
    assert encode(b"123456789") == b"\x0c123456789\x29\xb1\x00"
    # A zero in the body becomes a code byte.
    f = encode(b"\x00")
    assert f[0] == 1 and f[-1] == 0 and f.find(DELIM) == len(f) - 1
    assert encode(b"ab", lead=True) == DELIM + encode(b"ab")


def test_round_trip_lengths_0_to_600():
    for n in range(601):
        for body in _bodies(n):
            f = encode(body)
            # 0x00 only as the final delimiter.
            assert f.find(DELIM) == len(f) - 1, n
            assert decode(f) == body, n
            assert decode(f[:-1]) == body, n


def _pieces(body, lead, max_len=MAX_LEN):
    buf = bytearray(BLOCK)
    out = bytearray()
    for k in blocks(memoryview(body), buf, max_len, lead):
        assert 0 < k <= BLOCK
        out += buf[:k]
    return bytes(out)


def _cobs_ref(data):
    """COBS written plainly, byte by byte (no block after a final full one)."""
    out = bytearray(b"\x00")
    ci, code = 0, 1
    for i in range(len(data)):
        if data[i] == 0:
            out[ci] = code
            ci, code = len(out), 1
            out.append(0)
            continue
        out.append(data[i])
        code += 1
        if code == 0xFF and i + 1 < len(data):
            out[ci] = code
            ci, code = len(out), 1
            out.append(0)
    out[ci] = code
    return bytes(out)


def _ref(body, lead):
    c = crc16(body)
    return (DELIM if lead else b"") + _cobs_ref(bytes(body) + bytes([c >> 8, c & 0xFF])) + DELIM


def test_blocks_and_encode_give_the_bytes_of_plain_cobs():
    # The piecewise encoder (a board's UART writer) and encode() against a
    # plain COBS encoder, around each COBS block boundary and with a 0x00 at
    # each place near one.
    lengths = list(range(0, 12)) + list(range(248, 262)) + list(range(502, 516)) + [1024]
    for n in lengths:
        for body in _bodies(n):
            for lead in (False, True):
                want = _ref(body, lead)
                assert _pieces(body, lead) == want, (n, lead)
                assert encode(body, MAX_LEN, lead) == want, (n, lead)
    for n in (253, 254, 255, 508, 509):
        for z in (0, 251, 252, n - 2, n - 1):
            b = bytearray(b"\x05" * n)
            b[z] = 0
            assert _pieces(b, True) == encode(bytes(b), MAX_LEN, True) == _ref(b, True), (n, z)


def test_a_tail_is_framed_as_the_end_of_the_body():
    # A seal's counter and tag go to the encoders as a tail (no copy of the
    # body to append it): the bytes are those of body + tail, across blocks.
    tail = bytes([0, 1, 2, 0, 0xFF, 0, 7, 8, 9, 0, 11, 0])
    for n in list(range(0, 6)) + list(range(236, 246)) + list(range(490, 500)) + [MAX_LEN - 12]:
        for body in _bodies(n):
            want = encode(body + tail, MAX_LEN, True)
            assert encode(body, MAX_LEN, True, tail) == want, n
            buf = bytearray(BLOCK)
            out = bytearray()
            for k in blocks(memoryview(body), buf, MAX_LEN, True, tail):
                out += buf[:k]
            assert bytes(out) == want, n
    assert "exceeds" in str(raises(ValueError, encode, bytes(MAX_LEN - 11), MAX_LEN, False, tail))


def test_blocks_refuse_an_oversized_body():
    e = raises(ValueError, _pieces, bytes(MAX_LEN + 1), False)
    assert "exceeds the maximum" in str(e)


def test_round_trip_through_reader_around_block_boundary():
    # Frames of 0..7, 248..261 and 502..515 bytes, streamed in chunks of
    # step bytes that straddle frame boundaries (through one reused chunk
    # buffer, not a whole stream: the heap is 64 KB on MicroPython).
    lengths = list(range(0, 8)) + list(range(248, 262)) + list(range(502, 516))
    for step in (1, 3, 254, 255, 700):
        r = FrameReader(520)
        buf = bytearray(step)
        k = 0
        expect = []  # sent, not yet received
        for n in lengths:
            for body in _bodies(n):
                f = memoryview(encode(body, 520))
                expect.append(body)
                i = 0
                while i < len(f):
                    c = min(step - k, len(f) - i)
                    buf[k : k + c] = f[i : i + c]
                    k += c
                    i += c
                    if k == step:
                        for b in r.feed(buf):
                            assert b == expect.pop(0), (step, n)
                        k = 0
        for b in r.feed(buf[:k]):
            assert b == expect.pop(0)
        assert not expect and r.frames == 3 * len(lengths), step
        assert _errors(r) == 0 and r.garbage_bytes == 0 and r.pending == 0


def test_byte_by_byte_feeding():
    bodies = [b"", b"x", bytes(10), b"\xff" * 300, _body(600)]
    stream = b"".join(encode(b) for b in bodies)
    r = FrameReader()
    got = []
    for i in range(len(stream)):
        got.extend(r.feed(stream[i : i + 1]))
    assert got == bodies
    assert r.stats() == {
        "frames": 5,
        "crc_errors": 0,
        "cobs_errors": 0,
        "oversize": 0,
        "garbage_bytes": 0,
        "empty": 0,
    }


def test_feed_accepts_bytearray_and_memoryview():
    f = encode(b"hello") + encode(b"world")
    r = FrameReader(64)
    assert r.feed(bytearray(f[:4])) == []
    assert r.feed(memoryview(f)[4:]) == [b"hello", b"world"]
    assert r.feed(b"") == []


def test_empty_frames_are_ignored():
    r = FrameReader(64)
    # The start of the stream counts as a frame boundary, so a writer's
    # leading delimiter is one empty frame too.
    assert r.feed(DELIM * 3 + encode(b"a") + DELIM + DELIM) == [b"a"]
    assert r.empty == 5 and _errors(r) == 0 and r.garbage_bytes == 0


def test_overhead_is_4_bytes_for_64_byte_body():
    assert len(encode(_body(64))) == 64 + 4
    assert len(encode(bytes(64))) == 64 + 4
    assert len(encode(b"\xff" * 64)) == 64 + 4
    assert len(encode(b"\x01" * 251)) == 251 + 4


def test_garbage_before_and_between_frames_resyncs():
    g1 = b"\x13\x37 noise \xff\xfe"
    g2 = b"line noise\x01\x02"
    # Writers lead with a delimiter: the garbage before it is its own frame.
    stream = g1 + DELIM + encode(b"one") + g2 + DELIM + encode(b"two")
    for step in (1, 5, len(stream)):
        r = FrameReader(64)
        assert _feed_all(r, stream, step) == [b"one", b"two"], step
        assert _errors(r) == 2
        assert r.garbage_bytes == len(g1) + len(g2)
        assert r.frames == 2


def test_garbage_without_delimiter_costs_one_frame():
    # Garbage glued to a frame spoils that frame only; the next is fine.
    stream = b"junk" + encode(b"lost") + encode(b"kept")
    r = FrameReader(64)
    assert r.feed(stream) == [b"kept"]
    assert _errors(r) == 1 and r.garbage_bytes == 4 + len(encode(b"lost")) - 1


def test_cut_frame_loses_only_the_cut_one():
    a = encode(_body(40, 1))
    # Stream reopened mid-frame: the writer sends a leading delimiter again.
    stream = encode(b"before") + a[:17] + encode(_body(40, 2), lead=True)
    for step in (1, 7, len(stream)):
        r = FrameReader(64)
        assert _feed_all(r, stream, step) == [b"before", _body(40, 2)], step
        assert _errors(r) == 1 and r.garbage_bytes == 17


def test_crc_error_counted_and_body_not_returned():
    body = _body(50, 3)
    f = bytearray(encode(body))
    f[10] ^= 0x40  # stays non-zero: only the CRC sees it
    assert f[10] != 0
    r = FrameReader(64)
    assert r.feed(bytes(f) + encode(b"next")) == [b"next"]
    assert r.crc_errors == 1 and r.cobs_errors == 0 and r.oversize == 0
    assert r.garbage_bytes == len(f) - 1
    assert decode(bytes(f)) is None


def test_cobs_error_counted():
    r = FrameReader(64)
    # A code byte pointing past the end of the frame.
    assert r.feed(b"\x09\x01\x02" + DELIM + encode(b"ok")) == [b"ok"]
    assert r.cobs_errors == 1 and r.garbage_bytes == 3
    assert decode(b"\x09\x01\x02\x00") is None


def test_too_short_frames_are_crc_errors():
    r = FrameReader(64)
    # Valid COBS, but fewer than the 2 bytes of a CRC.
    assert r.feed(b"\x01\x00\x02\x05\x00") == []
    assert r.crc_errors == 2 and r.garbage_bytes == 3


def test_oversize_counted_then_good_frame_delivered():
    big = encode(_body(100), max_len=100)
    good = encode(_body(64))
    stream = big + good
    for step in (1, 10, len(stream)):
        r = FrameReader(max_len=64)
        assert _feed_all(r, stream, step) == [_body(64)], step
        assert r.oversize == 1 and r.crc_errors == 0 and r.cobs_errors == 0
        assert r.garbage_bytes == len(big) - 1
        assert r.pending <= max_encoded_len(64)


def test_oversize_by_decoded_length():
    # Encoded short enough to buffer, decoded one byte too long.
    body = bytes(301)
    f = encode(body, max_len=301)
    assert len(f) - 1 <= max_encoded_len(300)
    r = FrameReader(max_len=300)
    assert r.feed(f + encode(bytes(300), max_len=300)) == [bytes(300)]
    assert r.oversize == 1
    assert decode(f, max_len=300) is None
    assert decode(f, max_len=301) == body


def test_long_garbage_run_stays_bounded():
    r = FrameReader(max_len=16)
    junk = b"\x55" * 1000
    assert r.feed(junk) == []
    assert r.feed(junk) == []
    assert r.pending <= max_encoded_len(16)
    assert r.feed(junk + DELIM + encode(b"after", max_len=16)) == [b"after"]
    assert r.oversize == 1 and r.garbage_bytes == 3000


def test_encode_too_long_raises():
    e = raises(ValueError, encode, bytes(MAX_LEN + 1))
    assert str(MAX_LEN) in str(e) and str(MAX_LEN + 1) in str(e)
    raises(ValueError, encode, b"abc", 2)
    assert decode(encode(bytes(MAX_LEN))) == bytes(MAX_LEN)


def test_decode_message_transport_frame():
    body = b"\x00\x01temp\x00\xff"
    f = encode(body)
    assert decode(f) == body
    assert decode(f[:-1]) == body
    assert decode(bytearray(f)) == body
    assert decode(memoryview(f)) == body
    assert decode(encode(body, lead=True)) == body
    assert decode(b"") is None
    assert decode(DELIM) is None
    assert decode(f[:-2]) is None  # cut
    assert decode(f[:3] + f) is None  # 0x00 inside
    bad = bytearray(f)
    bad[2] ^= 1
    assert decode(bytes(bad)) is None


def test_accepts_trailing_code_byte_form():
    # Some COBS encoders end a data run of exactly 254 bytes with an extra
    # 0x01 code; ours omits it, the reader takes both.
    body = b"\x01" * 252
    f = encode(body)
    assert len(f) == 256 and f[0] == 0xFF
    alt = f[:-1] + b"\x01" + DELIM
    assert decode(alt) == body
    r = FrameReader(252)
    assert r.feed(alt + f) == [body, body]


def test_reset_drops_partial_frame():
    f = encode(b"abcdef")
    r = FrameReader(64)
    assert r.feed(f[:4]) == []
    r.reset()
    assert r.garbage_bytes == 4 and r.pending == 0
    assert r.feed(f) == [b"abcdef"]


def test_reader_never_raises_on_noise():
    # A fixed pseudo-random byte stream (LCG) fed in varying chunk sizes.
    x = 12345
    noise = bytearray(2000)
    for i in range(len(noise)):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        noise[i] = (x >> 16) & 0xFF if i % 5 else 0x01
    r = FrameReader(max_len=64)
    pos = 0
    step = 1
    while pos < len(noise):
        r.feed(noise[pos : pos + step])
        pos += step
        step = step * 3 % 97 + 1
        assert r.pending <= max_encoded_len(64)
    assert r.garbage_bytes > 0 and r.frames == 0
    assert r.feed(DELIM + encode(b"sync", max_len=64)) == [b"sync"]
