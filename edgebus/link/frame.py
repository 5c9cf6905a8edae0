"""Framing for the federation link: self-synchronising frames on byte streams.

A frame carries one body (bytes, up to ``max_len`` long, 1024 by default)::

    COBS(body + CRC16(body) as 2 big-endian bytes) + b"\\x00"

COBS (Consistent Overhead Byte Stuffing) removes every 0x00 from the encoded
frame, so 0x00 only ever appears as the delimiter: a reader that starts in the
middle of a stream, or after line noise, resynchronises at the next 0x00.
The CRC is CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, not reflected, no
final xor; crc16(b"123456789") == 0x29B1).  The overhead for a body below 252
bytes is 4 bytes: one COBS code byte, the CRC (2) and the delimiter (1); every
further 254 bytes add at most one code byte.

Byte streams (UART, pty, TCP, unix sockets): writers send :data:`DELIM` once
when the stream (re)opens -- it terminates whatever partial frame the other
side holds -- then ``encode(body)`` per frame (``encode(body, lead=True)`` does
both at once).  Readers push whatever arrives into a :class:`FrameReader`.

Message transports (MQTT) carry the same frames, one per message:
``encode(body)`` to send and ``decode(message)`` to receive (None if bad).

The same source runs on CPython and on MicroPython: no dataclasses, typing or
CPython-only modules, and the reader works in one preallocated buffer.
"""

DELIM = b"\x00"
"""The frame delimiter; also sent alone when a stream (re)opens."""

MAX_LEN = 1024
"""Default maximum body length in bytes."""

_ZERO = b"\x00"


# -- CRC-16/CCITT-FALSE ------------------------------------------------------
# Written by hand because nothing portable computes it: MicroPython has no
# crcmod and its binascii has no crc_hqx (CPython's, the same CRC, is used
# below when present: same result, C speed on the host side), and
# MicroPython's binascii.crc32 (not on every port either) would cost 4 bytes
# per frame instead of 2.  Table-driven, one lookup per byte in each half of
# the 256-entry table (high and low bytes of each 16-bit entry).  The table is
# two bytes literals, not built at import: frozen into a board's firmware they
# stay in flash, where an array('H') built at import took ~0.5 KB of the heap
# (tests/portable/test_frame.py checks them against the polynomial 0x1021).
_HI = (
    b"\x00\x10\x20\x30\x40\x50\x60\x70\x81\x91\xa1\xb1\xc1\xd1\xe1\xf1\x12\x02\x32\x22\x52\x42"
    b"\x72\x62\x93\x83\xb3\xa3\xd3\xc3\xf3\xe3\x24\x34\x04\x14\x64\x74\x44\x54\xa5\xb5\x85\x95"
    b"\xe5\xf5\xc5\xd5\x36\x26\x16\x06\x76\x66\x56\x46\xb7\xa7\x97\x87\xf7\xe7\xd7\xc7\x48\x58"
    b"\x68\x78\x08\x18\x28\x38\xc9\xd9\xe9\xf9\x89\x99\xa9\xb9\x5a\x4a\x7a\x6a\x1a\x0a\x3a\x2a"
    b"\xdb\xcb\xfb\xeb\x9b\x8b\xbb\xab\x6c\x7c\x4c\x5c\x2c\x3c\x0c\x1c\xed\xfd\xcd\xdd\xad\xbd"
    b"\x8d\x9d\x7e\x6e\x5e\x4e\x3e\x2e\x1e\x0e\xff\xef\xdf\xcf\xbf\xaf\x9f\x8f\x91\x81\xb1\xa1"
    b"\xd1\xc1\xf1\xe1\x10\x00\x30\x20\x50\x40\x70\x60\x83\x93\xa3\xb3\xc3\xd3\xe3\xf3\x02\x12"
    b"\x22\x32\x42\x52\x62\x72\xb5\xa5\x95\x85\xf5\xe5\xd5\xc5\x34\x24\x14\x04\x74\x64\x54\x44"
    b"\xa7\xb7\x87\x97\xe7\xf7\xc7\xd7\x26\x36\x06\x16\x66\x76\x46\x56\xd9\xc9\xf9\xe9\x99\x89"
    b"\xb9\xa9\x58\x48\x78\x68\x18\x08\x38\x28\xcb\xdb\xeb\xfb\x8b\x9b\xab\xbb\x4a\x5a\x6a\x7a"
    b"\x0a\x1a\x2a\x3a\xfd\xed\xdd\xcd\xbd\xad\x9d\x8d\x7c\x6c\x5c\x4c\x3c\x2c\x1c\x0c\xef\xff"
    b"\xcf\xdf\xaf\xbf\x8f\x9f\x6e\x7e\x4e\x5e\x2e\x3e\x0e\x1e"
)
_LO = (
    b"\x00\x21\x42\x63\x84\xa5\xc6\xe7\x08\x29\x4a\x6b\x8c\xad\xce\xef\x31\x10\x73\x52\xb5\x94"
    b"\xf7\xd6\x39\x18\x7b\x5a\xbd\x9c\xff\xde\x62\x43\x20\x01\xe6\xc7\xa4\x85\x6a\x4b\x28\x09"
    b"\xee\xcf\xac\x8d\x53\x72\x11\x30\xd7\xf6\x95\xb4\x5b\x7a\x19\x38\xdf\xfe\x9d\xbc\xc4\xe5"
    b"\x86\xa7\x40\x61\x02\x23\xcc\xed\x8e\xaf\x48\x69\x0a\x2b\xf5\xd4\xb7\x96\x71\x50\x33\x12"
    b"\xfd\xdc\xbf\x9e\x79\x58\x3b\x1a\xa6\x87\xe4\xc5\x22\x03\x60\x41\xae\x8f\xec\xcd\x2a\x0b"
    b"\x68\x49\x97\xb6\xd5\xf4\x13\x32\x51\x70\x9f\xbe\xdd\xfc\x1b\x3a\x59\x78\x88\xa9\xca\xeb"
    b"\x0c\x2d\x4e\x6f\x80\xa1\xc2\xe3\x04\x25\x46\x67\xb9\x98\xfb\xda\x3d\x1c\x7f\x5e\xb1\x90"
    b"\xf3\xd2\x35\x14\x77\x56\xea\xcb\xa8\x89\x6e\x4f\x2c\x0d\xe2\xc3\xa0\x81\x66\x47\x24\x05"
    b"\xdb\xfa\x99\xb8\x5f\x7e\x1d\x3c\xd3\xf2\x91\xb0\x57\x76\x15\x34\x4c\x6d\x0e\x2f\xc8\xe9"
    b"\x8a\xab\x44\x65\x06\x27\xc0\xe1\x82\xa3\x7d\x5c\x3f\x1e\xf9\xd8\xbb\x9a\x75\x54\x37\x16"
    b"\xf1\xd0\xb3\x92\x2e\x0f\x6c\x4d\xaa\x8b\xe8\xc9\x26\x07\x64\x45\xa2\x83\xe0\xc1\x1f\x3e"
    b"\x5d\x7c\x9b\xba\xd9\xf8\x17\x36\x55\x74\x93\xb2\xd1\xf0"
)


def crc16_py(data, crc=0xFFFF):
    """CRC-16/CCITT-FALSE of data (any bytes-like), continuing from crc.

    crc16(b"123456789") == 0x29B1.  Since the CRC is not reflected and has
    no final xor, crc16(body + the CRC as 2 big-endian bytes) == 0.  This is
    the pure-Python version; crc16 is the same function, or the C one of
    CPython's binascii where there is one.
    """
    hi = _HI
    lo = _LO
    for b in data:
        x = (crc >> 8) ^ b
        crc = (((crc & 0xFF) ^ hi[x]) << 8) | lo[x]
    return crc


try:
    from binascii import crc_hqx as _hqx

    if _hqx(b"123456789", 0xFFFF) != 0x29B1:
        raise ImportError("crc_hqx is not CRC-16/CCITT")
except ImportError:
    crc16 = crc16_py
else:

    def crc16(data, crc=0xFFFF):
        """CRC-16/CCITT-FALSE of data (any bytes-like), continuing from crc
        (binascii.crc_hqx; the same as crc16_py)."""
        return _hqx(data, crc)


# -- COBS ---------------------------------------------------------------------


def max_encoded_len(max_len=MAX_LEN):
    """Longest encoded frame (delimiter excluded) for a body of up to max_len
    bytes, from any COBS encoder: the bound a reader buffers."""
    n = max_len + 2
    return n + 1 + n // 254


def encode(body, max_len=MAX_LEN, lead=False, tail=None):
    """The frame for body (bytes-like), delimiter included, as bytes.

    With lead=True the frame also starts with a delimiter (what a writer
    sends first on a freshly (re)opened stream).  ``tail`` (bytes-like)
    ends the body: a seal (seal.py), framed with it and never copied to it.
    Raises ValueError if body and tail are longer than max_len bytes.
    """
    nb = len(body)
    n = nb + (len(tail) if tail is not None else 0)
    _check(n, max_len)
    if n < 252:
        c = crc16(body)
        if tail is not None:
            c = crc16(tail, c)
        # Body and CRC fit one COBS block (at most 253 bytes): encode in
        # place, each 0x00 becoming the code byte of the run that follows it.
        s = 2 if lead else 1  # out[s - 1]: first code byte
        e = s + n + 2  # out[e]: the delimiter
        out = bytearray(e + 1)
        out[s : s + nb] = body
        if tail is not None:
            out[s + nb : s + n] = tail
        out[e - 2] = c >> 8
        out[e - 1] = c & 0xFF
        p = s - 1
        while p < e:
            z = out.find(_ZERO, p + 1)
            out[p] = z - p
            p = z
        return bytes(out)
    # Longer bodies: block by block (blocks(), the encoder a UART writer
    # uses), gathered into one buffer of the longest encoding.
    buf = bytearray(BLOCK)
    mv = memoryview(buf)  # no copy of the block per piece
    out = bytearray(max_encoded_len(n) + 2)
    j = 0
    for k in blocks(body, buf, max_len, lead, tail):
        out[j : j + k] = mv[:k]
        j += k
    return bytes(memoryview(out)[:j])


BLOCK = 256
"""Size of the buffer :func:`blocks` encodes into (one COBS block and its code)."""


def _check(n, max_len):
    if n > max_len:
        raise ValueError("frame body of %d bytes exceeds the maximum of %d bytes" % (n, max_len))


def blocks(body, buf, max_len=MAX_LEN, lead=False, tail=None):
    """The frame for body as pieces: yields k for each piece, buf[:k], until
    the delimiter. buf (a bytearray of at least BLOCK bytes) is reused for
    every piece, so a writer that sends each before asking for the next
    (PolledTransport) needs no frame-sized block of heap, which a board's
    fragmented heap may not have. The bytes are those of encode()."""
    nb = len(body)
    n = nb + (len(tail) if tail is not None else 0)
    _check(n, max_len)
    src = memoryview(body)
    c = crc16(body)
    if tail is not None:
        c = crc16(tail, c)
        tv = memoryview(tail)
    total = n + 2
    if lead:
        buf[0] = 0
        yield 1
    i = 0
    while True:
        # The next (up to) 254 bytes of body + CRC into buf[1:], then the run
        # up to the first 0x00 among them is one COBS block.
        k = total - i if total - i < 254 else 254
        m = n if n < i + k else i + k
        if i < m:
            if m <= nb:
                buf[1 : 1 + m - i] = src[i:m]
            else:  # the tail's bytes: after the body's
                j = i if i > nb else nb
                if i < nb:
                    buf[1 : 1 + nb - i] = src[i:nb]
                buf[1 + j - i : 1 + m - i] = tv[j - nb : m - nb]
        for p in range(m, i + k):
            buf[1 + p - i] = c >> 8 if p == n else c & 0xFF
        z = buf.find(_ZERO, 1, 1 + k)
        if z >= 0:
            buf[0] = z
            yield z
            i += z
            continue
        buf[0] = k + 1
        yield k + 1
        i += k
        if k < 254 or i == total:  # a final full block implies no 0x00
            break
    buf[0] = 0
    yield 1


def _unstuff(src, n, out, cap=-1, inplace=False):
    """COBS-decode src[:n] (no 0x00 in it) into the bytearray out, at most cap
    bytes (default: len(out)).  inplace: src is a view of out itself; each run
    is then copied through a bytes object, as the decoded bytes land a little
    before where they are read and an overlapping slice copy is not safe.

    Returns the decoded length, -1 for an invalid COBS sequence (a code byte
    pointing past the end, or a 0x00 code) or -2 if it would not fit in out.
    """
    if cap < 0:
        cap = len(out)
    i = 0
    j = 0
    while i < n:
        code = src[i]
        end = i + code
        if code == 0 or end > n:
            return -1
        k = code - 1
        if j + k > cap:
            return -2
        out[j : j + k] = bytes(src[i + 1 : end]) if inplace else src[i + 1 : end]
        j += k
        i = end
        if code != 0xFF and i < n:
            if j >= cap:
                return -2
            out[j] = 0
            j += 1
    return j


def decode(frame, max_len=MAX_LEN):
    """The body of one frame given whole (one transport message), or None if
    it is not a valid frame: empty, bad COBS, a 0x00 inside, a body longer
    than max_len or a CRC mismatch.  The trailing delimiter is optional (and
    a leading one is skipped).  Counts nothing: a FrameReader counts what it
    drops."""
    if not isinstance(frame, (bytes, bytearray)):
        frame = bytes(frame)
    n = len(frame)
    if n and frame[n - 1] == 0:
        n -= 1
    if n and frame[0] == 0:
        frame = frame[1:n]
        n -= 1
    if n < 2 or n > max_encoded_len(max_len) or frame.find(_ZERO, 0, n) >= 0:
        return None
    out = bytearray(min(n - 1, max_len + 2))
    m = _unstuff(memoryview(frame), n, out)
    if m < 2:
        return None
    body = memoryview(out)[:m]
    if crc16(body) != 0:
        return None
    return bytes(body[: m - 2])


def message(body, max_len=MAX_LEN, tail=None, bare=False):
    """One transport message (MQTT) for body and tail: the frame (encode),
    or with ``bare`` (a sealed session whose peer offered "bare") 0x00 and
    the body and tail as they are: the seal's tag checks them far better
    than the CRC, and the transport delimits and checks its messages."""
    if not bare:
        return encode(body, max_len, False, tail)
    n = len(body) + (len(tail) if tail is not None else 0)
    _check(n, max_len)
    return b"\x00" + body + tail if tail is not None else b"\x00" + body


def unmessage(msg, max_len=MAX_LEN):
    """The body of one transport message (message()), or None if it is not
    valid. A frame never starts with 0x00 on a message transport (encode
    without lead), so a leading 0x00 marks a bare body."""
    if len(msg) and msg[0] == 0:
        return bytes(msg[1:]) if 1 < len(msg) <= max_len + 1 else None
    return decode(msg, max_len)


# -- the streaming reader -----------------------------------------------------


class FrameReader:
    """Reassembles frames from a byte stream fed in arbitrary chunks.

    ``feed(data)`` returns the list of bodies (bytes) completed by data, in
    order.  Never raises on any input and never returns a body whose CRC
    does not match.  What it drops is counted (plain int attributes, also
    returned by ``stats()``):

    frames         good frames returned
    crc_errors     frames whose CRC did not match (or too short to hold one)
    cobs_errors    frames that were not a valid COBS sequence
    oversize       frames longer than max_len (the rest is skipped unbuffered)
    garbage_bytes  bytes dropped (the bytes of all the above; no delimiters)
    empty          empty frames (two delimiters in a row, or one at the very
                   start): normal, no error

    Garbage before a frame, or a frame cut short by a reconnect, merges with
    the next frame into one bad frame; that one is dropped and counted and the
    reader is back in sync after its delimiter (which is why writers send a
    leading delimiter on (re)open: then only the cut frame is lost).

    Memory: one buffer allocated once, max_encoded_len(max_len) bytes, for
    the undelimited tail of the stream; a frame is decoded into it (in place
    when it was held there), so a reader costs one frame, not two (1 KB less
    heap on a board).  Create readers early on MicroPython: the buffer needs
    one contiguous block, which a fragmented heap may no longer have later on.
    """

    def __init__(self, max_len=MAX_LEN):
        if max_len < 0:
            raise ValueError("max_len must be >= 0")
        self.max_len = max_len
        self._cap = max_encoded_len(max_len)
        self._buf = bytearray(self._cap)
        self._bmv = memoryview(self._buf)
        self.pending = 0  # bytes of an unfinished frame held in _buf
        self._skip = False  # inside an oversized frame: drop to delimiter
        self.frames = 0
        self.crc_errors = 0
        self.cobs_errors = 0
        self.oversize = 0
        self.garbage_bytes = 0
        self.empty = 0

    def stats(self):
        """The counters as a dict."""
        return {
            "frames": self.frames,
            "crc_errors": self.crc_errors,
            "cobs_errors": self.cobs_errors,
            "oversize": self.oversize,
            "garbage_bytes": self.garbage_bytes,
            "empty": self.empty,
        }

    def reset(self):
        """Drop any unfinished frame (counted as garbage bytes), e.g. when the
        stream is reopened."""
        self.garbage_bytes += self.pending
        self.pending = 0
        self._skip = False

    def feed(self, data):
        """Push bytes received (bytes, bytearray or memoryview, any length);
        returns the list of bodies completed by them, in order."""
        got = []
        n = len(data)
        if not n:
            return got
        if not isinstance(data, (bytes, bytearray)):
            data = bytes(data)  # memoryview has no find()
        src = memoryview(data)
        pos = 0
        while pos < n:
            z = data.find(_ZERO, pos)
            if z < 0:
                self._hold(src, pos, n)
                break
            if self._skip:
                self.garbage_bytes += z - pos
                self._skip = False
            elif self.pending:
                if self._hold(src, pos, z):
                    k = self.pending
                    self.pending = 0
                    self._frame(self._bmv, k, got)
                else:
                    self._skip = False  # the delimiter ends the oversized frame
            elif z == pos:
                self.empty += 1
            else:
                self._frame(src[pos:z], z - pos, got)
            pos = z + 1
        return got

    def _hold(self, src, a, b):
        # Append src[a:b] to the buffer; False (counted) if it overflows.
        if self._skip:
            self.garbage_bytes += b - a
            return False
        p = self.pending
        q = p + b - a
        if q > self._cap:
            self.oversize += 1
            self.garbage_bytes += q
            self.pending = 0
            self._skip = True
            return False
        self._buf[p:q] = src[a:b]
        self.pending = q
        return True

    def _frame(self, src, k, got):
        # One complete frame of k bytes (k > 0, no 0x00 in it).
        if k > self._cap:
            self.oversize += 1
        else:
            # Decoded into the buffer: held there (src is the buffer, in place)
            # or not held at all (then the buffer is free: nothing pending).
            m = _unstuff(src, k, self._buf, self.max_len + 2, src is self._bmv)
            if m == -1:
                self.cobs_errors += 1
            elif m == -2:
                self.oversize += 1
            elif m < 2 or crc16(self._bmv[:m]) != 0:
                self.crc_errors += 1
            else:
                self.frames += 1
                got.append(bytes(self._bmv[: m - 2]))
                return
        self.garbage_bytes += k
