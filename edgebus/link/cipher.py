"""AES-128-CTR for sealed sessions that encrypt (seal.py, protocol 17).

One backend per runtime, whichever this build has:
- ``cryptolib`` with CTR (MicroPython built with MICROPY_PY_CRYPTOLIB_CTR):
  a new cipher per frame, since its counter is set only when one is made;
- ``cryptolib`` with ECB only (the unix port from PyPI): the counter blocks
  encrypted with ECB in one call and XORed in as big integers (C speed; a
  Python loop over the bytes costs ~10x more);
- ``cryptography`` on CPython (a maintained library, not our own AES): the
  same counter blocks through one ECB context per session key, which is 3x
  cheaper per frame than a CTR cipher made per frame (1.9 against 5.8 us for a
  reading), and a bridge does that for every frame of thousands of devices.
None of them: ``BACKEND`` is None and the seal can only authenticate
(``seal="mac"``); a link asked to encrypt says so when it is made.

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


def ctr(k, c, data):
    """``data`` XOR the AES-CTR keystream of key ``k`` (from ``key``) for
    frame counter ``c``: encrypts and decrypts alike. New bytes."""
    n = len(data)
    if not n:
        return b""
    if BACKEND == "cryptolib-ctr":
        return cryptolib.aes(k, 6, _iv(c)).encrypt(data)
    blocks = bytearray(_iv(c) * ((n + 15) >> 4))
    for i in range(1, len(blocks) >> 4):
        blocks[(i << 4) + 14] = i >> 8  # frames are < 64 KiB: two bytes of block number
        blocks[(i << 4) + 15] = i & 0xFF
    s = k(blocks)
    x = int.from_bytes(data, "big") ^ int.from_bytes(memoryview(s)[:n], "big")
    return x.to_bytes(n, "big")
