"""Key rotation's wrap (docs/protocol.md section 5, "Key rotation"): a new
device key sent under the key the device holds, confidential and checked
even on a session that is not encrypted. The bridge wraps (`edgebus keys
rotate`); the device unwraps (sys/key/set, which loads this module only for
the call).

A key is 32 random bytes written as 64 hex digits; the link uses those
digits' bytes. With H HMAC-SHA256, K the old key, N a fresh nonce:
``wrapped = raw(new) XOR H(K, "edgebus-rotate-1|" N)`` and
``check = H(new, "edgebus-rotate-check-1|" N)``, first 16 bytes.
"""

from binascii import hexlify, unhexlify

from . import wire

SIZE = 32  # random bytes in a key (64 hex digits)
CHECK = 16  # bytes of the check
NONCE = 16  # hex digits of the nonce


def _xor(a, b):
    return bytes([x ^ y for x, y in zip(a, b)])


def _check(new, nonce):
    return hexlify(
        wire.mac(new.encode(), b"edgebus-rotate-check-1|" + nonce.encode())[:CHECK]
    ).decode()


def wrap(old, new, nonce):
    """sys/key/set's request carrying key ``new`` (str, 64 hex digits) to a
    device holding ``old`` (bytes); ``nonce``: 16 fresh hex digits."""
    pad = wire.mac(old, b"edgebus-rotate-1|" + nonce.encode())
    return {
        "nonce": nonce,
        "wrapped": hexlify(_xor(unhexlify(new), pad)).decode(),
        "check": _check(new, nonce),
    }


def unwrap(old, req):
    """The new key (str, 64 hex digits) that sys/key/set's request ``req``
    carries to a device holding ``old`` (bytes); ValueError saying why when
    the request is malformed or its check fails (wrapped under another key,
    or altered on the way)."""
    if type(req) is not dict:
        raise ValueError(
            'sys/key/set takes {"nonce", "wrapped", "check"} (hex), '
            "or null for the kid of the key in use"
        )
    n, w, c = req.get("nonce"), req.get("wrapped"), req.get("check")
    try:
        if len(n) != NONCE or len(w) != 2 * SIZE or len(c) != 2 * CHECK:
            raise ValueError
        unhexlify(n)
        raw = unhexlify(w)
    except (TypeError, ValueError):
        raise ValueError(
            "nonce, wrapped and check must be %d, %d and %d hex digits"
            % (NONCE, 2 * SIZE, 2 * CHECK)
        )
    new = hexlify(_xor(raw, wire.mac(old, b"edgebus-rotate-1|" + n.encode()))).decode()
    if not wire.same(_check(new, n).encode(), c.encode()):
        raise ValueError(
            "the check does not match: the key was wrapped under another key "
            "than this device's, or altered on the way"
        )
    return new
