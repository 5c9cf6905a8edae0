"""Property tests for the link framing (CPython, Hypothesis).

The streaming FrameReader is checked against a deliberately naive reference
(byte-at-a-time COBS, binascii.crc_hqx for the CRC) on corrupted and on
arbitrary streams fed in arbitrary chunks.
"""

import binascii

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgebus.link.frame import DELIM, FrameReader, crc16, crc16_py, decode, encode, max_encoded_len

ERRORS = ("crc_errors", "cobs_errors", "oversize")


# -- reference -----------------------------------------------------------------


def ref_cobs(data):
    """Canonical COBS, a byte at a time: no 0x01 code after a final full
    block of 254 non-zero bytes."""
    out = bytearray()
    block = bytearray()
    flushed = False
    for b in data:
        if b:
            block.append(b)
            flushed = False
            if len(block) == 254:
                out.append(255)
                out += block
                block = bytearray()
                flushed = True
        else:
            out.append(len(block) + 1)
            out += block
            block = bytearray()
            flushed = False
    if not flushed:
        out.append(len(block) + 1)
        out += block
    return bytes(out)


def ref_unstuff(seg):
    out = bytearray()
    i = 0
    while i < len(seg):
        code = seg[i]
        i += 1
        if code == 0 or i + code - 1 > len(seg):
            return None
        out += seg[i : i + code - 1]
        i += code - 1
        if code != 0xFF and i < len(seg):
            out.append(0)
    return bytes(out)


def ref_body(seg, max_len):
    """The body a reader must deliver for one complete segment, or None."""
    if not seg or len(seg) > max_encoded_len(max_len):
        return None
    d = ref_unstuff(seg)
    if d is None or len(d) < 2 or len(d) > max_len + 2:
        return None
    if binascii.crc_hqx(d[:-2], 0xFFFF) != int.from_bytes(d[-2:], "big"):
        return None
    return d[:-2]


def ref_read(stream, max_len):
    """(bodies, non-empty complete segments, empty segments, tail length)."""
    segs = stream.split(DELIM)
    tail = segs.pop()  # not terminated yet
    bodies = [b for b in (ref_body(s, max_len) for s in segs) if b is not None]
    full = [s for s in segs if s]
    return bodies, full, len(segs) - len(full), len(tail)


def feed_chunked(r, stream, sizes):
    got = []
    i = 0
    k = 0
    while i < len(stream):
        n = sizes[k % len(sizes)]
        k += 1
        got.extend(r.feed(stream[i : i + n]))
        assert r.pending <= max_encoded_len(r.max_len)
        i += n
    return got


def check_against_reference(r, stream, got):
    bodies, full, empty, tail = ref_read(stream, r.max_len)
    assert got == bodies
    assert r.frames == len(bodies)
    # Every complete non-empty segment is either delivered or one error; an
    # unfinished one is held, or already counted oversize once too long.
    cap = max_encoded_len(r.max_len)
    too_long = 1 if tail > cap else 0
    assert r.frames + sum(getattr(r, k) for k in ERRORS) == len(full) + too_long
    assert r.pending == (0 if too_long else tail)
    assert r.empty == empty
    # Every byte but the delimiters is delivered, dropped or still held.
    delivered = sum(len(s) for s in full if ref_body(s, r.max_len) is not None)
    assert delivered + r.garbage_bytes + r.pending == len(stream) - stream.count(0)
    assert len(r._buf) == max_encoded_len(r.max_len)  # never reallocated
    assert r.stats() == {
        k: getattr(r, k)
        for k in ("frames", "crc_errors", "cobs_errors", "oversize", "garbage_bytes", "empty")
    }


# -- strategies ----------------------------------------------------------------

# Bytes with plenty of 0x00 and 0xFF, the interesting values for COBS.
BYTE = st.one_of(st.integers(0, 255), st.sampled_from([0, 0, 1, 0xFF, 0xFE]))
CHUNKS = st.lists(st.integers(1, 700), min_size=1, max_size=8)


@st.composite
def payloads(draw, max_size):
    kind = draw(st.sampled_from(["random", "zeros", "ff", "mixed"]))
    n = draw(st.integers(0, max_size))
    if kind == "zeros":
        return bytes(n)
    if kind == "ff":
        return b"\xff" * n
    if kind == "random":
        return draw(st.binary(min_size=n, max_size=n))
    return bytes(draw(st.lists(BYTE, min_size=n, max_size=n)))


# -- properties ----------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 0xFFFF))
def test_crc_matches_binascii(data, start):
    want = binascii.crc_hqx(data, start)
    assert crc16_py(data, start) == want  # the MicroPython path
    assert crc16(data, start) == want


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(payloads(1024), CHUNKS)
def test_round_trip_any_body_any_chunking(body, sizes):
    f = encode(body)
    c = crc16(body)
    assert f == ref_cobs(body + bytes([c >> 8, c & 0xFF])) + DELIM
    assert len(f) <= max_encoded_len() + 1
    assert decode(f) == body
    r = FrameReader()
    stream = DELIM + f + f
    got = feed_chunked(r, stream, sizes)
    assert got == [body, body]
    check_against_reference(r, stream, got)


@st.composite
def corrupted_streams(draw):
    """(sent bodies, wire frames after frame-level damage, final stream)."""
    n = draw(st.integers(1, 10))
    # Distinct bodies: a 2-byte index, then a payload.
    bodies = [bytes([i >> 8, i & 0xFF]) + draw(payloads(200)) for i in range(n)]
    wire = [encode(b) for b in bodies]
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["truncate", "dup", "garbage", "swap", "drop"]))
        if not wire:
            break
        i = draw(st.integers(0, len(wire) - 1))
        if op == "truncate":  # cut short, delimiter included
            if wire[i]:
                wire[i] = wire[i][: draw(st.integers(0, len(wire[i]) - 1))]
        elif op == "dup":
            wire.insert(i, wire[i])
        elif op == "garbage":
            g = draw(st.binary(min_size=1, max_size=80))
            wire.insert(i, g)
        elif op == "swap":
            j = draw(st.integers(0, len(wire) - 1))
            wire[i], wire[j] = wire[j], wire[i]
        else:
            del wire[i]
    stream = bytearray(DELIM + b"".join(wire))
    for _ in range(draw(st.integers(0, 4))):  # bit flips
        if len(stream) > 1:
            p = draw(st.integers(1, len(stream) - 1))
            stream[p] ^= 1 << draw(st.integers(0, 7))
    return bodies, wire, bytes(stream)


# derandomize: a CRC-16 lets a corrupted frame through with probability
# 2**-16, so "never a body that was not sent" is checked on a fixed set of
# examples (the same every run) instead of a fresh draw that could flake.
@pytest.mark.slow
@settings(max_examples=200, deadline=None, derandomize=True)
@given(corrupted_streams(), CHUNKS)
def test_corruption_never_yields_a_body_not_sent(case, sizes):
    bodies, wire, stream = case
    r = FrameReader(256)
    got = feed_chunked(r, stream, sizes)
    sent = set(bodies)
    for b in got:
        assert b in sent
    check_against_reference(r, stream, got)
    frames = set(encode(b) for b in bodies)
    # Every frame that reaches the stream undamaged is delivered.
    intact = [s for s in stream.split(DELIM)[:-1] if s + DELIM in frames]
    assert len(got) == len(intact)
    # Every whole frame put on the wire but not delivered is accounted for:
    # by an error counter (the damaged frame it ended up in) and dropped
    # bytes, or by bytes still held (damage to the last frame).
    lost = sum(1 for w in wire if w in frames) - len(got)
    if lost > 0:
        errors = sum(getattr(r, k) for k in ERRORS)
        assert errors > 0 and r.garbage_bytes > 0 or r.pending > 0


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(st.binary(max_size=4000), st.lists(BYTE, max_size=3000).map(bytes)),
    CHUNKS,
    st.sampled_from([0, 1, 16, 64, 300, 1024]),
)
def test_arbitrary_streams_never_raise_and_stay_bounded(stream, sizes, max_len):
    r = FrameReader(max_len)
    got = feed_chunked(r, stream, sizes)
    check_against_reference(r, stream, got)
    for b in got:
        assert len(b) <= max_len
    # Whatever came before, a delimiter and a good frame get through.
    f = encode(b"x" * min(max_len, 5), max_len)
    assert r.feed(DELIM + f) == [b"x" * min(max_len, 5)]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_decode_agrees_with_reference(frame):
    seg = frame[:-1] if frame.endswith(DELIM) else frame
    if seg.startswith(DELIM):
        seg = seg[1:]
    want = None if DELIM in seg else ref_body(seg, 300)
    assert decode(frame, 300) == want
