"""AES-128-CTR for sealed sessions that encrypt (seal.py, protocol 17).

One backend per runtime, whichever this build has:
- ``cryptolib`` with CTR (MicroPython built with MICROPY_PY_CRYPTOLIB_CTR):
  a new cipher per frame, since its counter is set only when one is made;
- ``cryptolib`` with ECB only (the unix port from PyPI): the counter blocks
  encrypted with ECB in one call, then XORed in;
- ``cryptography`` on CPython (a maintained library, not our own AES): the
  same counter blocks through one ECB context per session key, which is 3x
  cheaper per frame than a CTR cipher made per frame (1.9 against 5.8 us for a
  reading), and a bridge does that for every frame of thousands of devices.
On MicroPython (``INPLACE``) a frame is encrypted in the one buffer it is
copied into (seal.py): the counter blocks made and encrypted there, then
the data XORed in. A small heap, fragmented, often has no frame-sized
block to spare, and the copies and big integers this took before were
eight of them. None of them: ``BACKEND`` is None and the seal can only
authenticate (``seal="mac"``); a link asked to encrypt says so when it is
made.

AES-128, not 256: the key is one HKDF block per direction, never reused
across sessions, and 10 rounds instead of 14 matter on a Cortex-M.
"""

try:
    import cryptolib
except ImportError:
    cryptolib = None

BACKEND = None
if cryptolib is not None:
    try:
        cryptolib.aes(bytes(16), 6, bytes(16))
        BACKEND = "cryptolib-ctr"
    except ValueError:  # "mode": this build has no CTR
        BACKEND = "cryptolib-ecb"
else:
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        BACKEND = "cryptography"
    except ImportError:
        pass

# Encrypt into the caller's buffer (MicroPython); CPython's big integers and
# copies are faster, and its heap does not fragment.
INPLACE = cryptolib is not None


def key(k):
    """What ``ctr`` takes for the 16-byte key ``k``: the key itself (CTR), or
    the ECB encryption of blocks with its key schedule, made once per session."""
    if BACKEND == "cryptolib-ecb":
        return cryptolib.aes(k, 1).encrypt
    if BACKEND == "cryptography":
        return Cipher(algorithms.AES(k), modes.ECB()).encryptor().update
    return k


def _iv(c):
    # The frame counter C (never reused under one key) in the top 4 bytes,
    # the block number in the low ones: no two frames share a counter block.
    return bytes((c >> 24, (c >> 16) & 0xFF, (c >> 8) & 0xFF, c & 0xFF)) + bytes(12)


def ctr(k, c, data, out=None):
    """``data`` XOR the AES-CTR keystream of key ``k`` (from ``key``) for
    frame counter ``c``: encrypts and decrypts alike. New bytes; or, with
    ``out`` (a writable memoryview with room for len(data) rounded up to 16,
    where the ECB backend makes its keystream), written into ``out`` and
    returned as out[:len(data)]."""
    n = len(data)
    if not n:
        return b"" if out is None else out[:0]
    if BACKEND == "cryptography":
        nb = (n + 15) >> 4
        blocks = bytearray(_iv(c) * nb)
        if nb <= 256:  # each block's number into its last byte at C speed: half the cost
            blocks[15::16] = _NUMBERS[:nb]
        else:
            for i in range(1, nb):
                blocks[(i << 4) + 14] = i >> 8  # frames are < 64 KiB: two bytes of block number
                blocks[(i << 4) + 15] = i & 0xFF
        x = int.from_bytes(data, "big") ^ int.from_bytes(memoryview(k(blocks))[:n], "big")
        if out is None:
            return x.to_bytes(n, "big")
        out[:n] = x.to_bytes(n, "big")
        return out[:n]
    if BACKEND == "cryptolib-ctr":
        if out is None:
            return cryptolib.aes(k, 6, _iv(c)).encrypt(data)
        cryptolib.aes(k, 6, _iv(c)).encrypt(data, out[:n])
        return out[:n]
    if out is None:
        return bytes(ctr(k, c, data, memoryview(bytearray(n + 15))))
    m = (n + 15) & ~15
    out[0] = c >> 24
    out[1] = (c >> 16) & 0xFF
    out[2] = (c >> 8) & 0xFF
    out[3] = c & 0xFF
    out[4:16] = _ZEROS
    b = out[:16]
    i = 16
    while i < m:  # the next blocks: the first, with their number (i >> 4) in the last two bytes
        out[i : i + 16] = b
        out[i + 14] = i >> 12
        out[i + 15] = (i >> 4) & 0xFF
        i += 16
    b = out[:m]
    k(b, b)  # in place: ECB takes each block before it writes it
    if n <= _BIG:
        x = int.from_bytes(data, "big") ^ int.from_bytes(out[:n], "big")
        out[:n] = x.to_bytes(n, "big")
    else:
        for i in range(n):
            out[i] ^= data[i]
    return out[:n]


# Up to this many bytes (a reading is ~70) XORed as big integers, at C speed
# and with three blocks of at most this size as garbage; longer data byte by
# byte (~0.2 us a byte on a PC), which leaves none.
_BIG = 128
_ZEROS = bytes(12)
_NUMBERS = bytes(range(256)) if BACKEND == "cryptography" else None  # no RAM on a board
