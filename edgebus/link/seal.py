"""Sealed sessions (docs/protocol.md section 17, capabilities "seal", "enc"
and "bare"): session keys from the handshake, and a counter and tag on every
frame after AUTH; encrypted too when both sides offer "enc".

Per direction: a key derived from the device key and both sides' nonces,
sids and nodes (HKDF over HMAC-SHA256), a 32-bit frame counter that only
goes up, and a 64-bit tag (HMAC-SHA256 truncated) over the body and the
counter. A frame whose tag does not verify is refused (``forged``), one whose
counter does not advance too (``replayed``); neither ends the session. An
encrypted session also derives an AES-128 key per direction and encrypts
everything after a body's type byte with AES-CTR (cipher.py) before the tag
is computed (encrypt-then-MAC: nothing is decrypted before it verifies).

Cost per frame: two SHA-256 objects and their digests (CPython copies the
keyed states; MicroPython's sha256 has no copy(), so it hashes the 64-byte
pads again). Unless encrypted, the body is not copied: counter and tag go to
the transport as a tail (frame.encode) from a 12-byte buffer kept for the boot.
Encrypted, it is copied: on MicroPython into one buffer per frame, where
it is encrypted in place (cipher.py), as a fragmented small heap often has
no frame-sized block to spare for the several the copy took before.
"""

import hashlib

from . import cipher, wire

TAIL = 12  # counter (4) + tag (8) after the body
MARK = "s"  # starts the nonce of a side that offers seal (never hex)
CTR_MAX = 0xFFFFFFFF

MODES = ("auto", "encrypt", "mac", "offer", "off")

_keyed = hasattr(hashlib.sha256(), "copy")  # CPython: keep the keyed states, copy per frame
_INPLACE = cipher.INPLACE  # MicroPython: encrypt a body in its copy (_crypt)


def init(link):
    """No session keys, tail buffer or frame counters yet (Link.__init__)."""
    link._seal = link._s_buf = None
    link._s_tx = link._s_rx = 0


def check(mode):
    """Refuse (ValueError, saying why) a seal mode this runtime cannot keep."""
    if mode not in MODES:
        raise ValueError("seal must be one of %s, got %r" % (", ".join(MODES), mode))
    if mode == "encrypt" and cipher.BACKEND is None:
        raise ValueError(
            "seal 'encrypt' needs AES, which this runtime lacks (MicroPython: "
            "cryptolib; CPython: the cryptography package): use seal 'mac'"
        )


def _pads(k):
    """HMAC's keyed inner and outer starts for a 32-byte key k."""
    k = k + bytes(64 - len(k))
    i = bytes([b ^ 0x36 for b in k])
    o = bytes([b ^ 0x5C for b in k])
    return (hashlib.sha256(i), hashlib.sha256(o)) if _keyed else (i, o)


def _mac(p, q, data, more=None):
    """HMAC-SHA256 of data (then more) with the keyed starts p, q (_pads)."""
    if _keyed:
        h = p.copy()
        g = q.copy()
    else:
        h = hashlib.sha256(p)
        g = hashlib.sha256(q)
    h.update(data)
    if more is not None:
        h.update(more)
    g.update(h.digest())
    return g.digest()


def keys(key, role, hello, ack, enc=False):
    """This side's (tx inner, tx outer, rx inner, rx outer) for the session of
    ``hello`` and ``ack``, then with ``enc`` its (tx, rx) AES keys:
    HKDF-Extract with the handshake as salt, then one HKDF-Expand block per
    direction and purpose (RFC 5869, L = 32; AES-128 takes 16 bytes)."""
    salt = "|".join(
        (
            "edgebus-seal-1",
            hello["nonce"],
            ack["nonce"],
            hello["sid"],
            ack["sid"],
            str(hello["node"]),
            str(ack["node"]),
        )
    ).encode()
    prk = wire.mac(salt, key)
    ir = _pads(wire.mac(prk, b"edgebus-seal-1 I>R\x01"))
    ri = _pads(wire.mac(prk, b"edgebus-seal-1 R>I\x01"))
    ks = ir + ri if role == "initiator" else ri + ir
    if not enc:
        return ks
    ei = cipher.key(wire.mac(prk, b"edgebus-seal-1 I>R enc\x01")[:16])
    er = cipher.key(wire.mac(prk, b"edgebus-seal-1 R>I enc\x01")[:16])
    return ks + ((ei, er) if role == "initiator" else (er, ei))


def bound(side):
    """What a proof binds of one side's HELLO or HELLO_ACK beyond m(role)
    when both offer seal: its capabilities, heartbeat, clock (and its source)
    and window, so a man in the middle cannot change them (or strip "seal")
    unnoticed."""
    caps = side.get("caps")
    caps = ",".join(str(c) for c in caps) if type(caps) is list else ""
    clk = side.get("clk")
    return "%s;%s;%s;%s;%s%s" % (
        caps,
        side.get("hb"),
        side.get("ms"),
        side.get("wall"),
        side.get("win"),
        # the clock's source, bound when sent (a peer that sends none binds as before)
        ";%s" % clk if clk is not None else "",
    )


def offered(side, cap=wire.CAP_SEAL):
    """True if the HELLO or HELLO_ACK ``side`` lists ``cap`` (seal)."""
    caps = side.get("caps")
    return type(caps) is list and cap in caps


def caps(link, transport):
    """What this side offers when it authenticates: seal, enc where it may
    encrypt, bare where its transport can send a body unframed."""
    if link.opts.seal == "off":
        return []
    c = [wire.CAP_SEAL]
    if link.opts.seal != "mac" and cipher.BACKEND is not None:
        c.append(wire.CAP_ENC)
    if transport is not None and hasattr(transport, "bare"):
        c.append(wire.CAP_BARE)
    return c


def stop(link):
    """No seal, and framed messages, until the next session starts."""
    link._seal = None
    t = link._transport
    if t is not None and hasattr(t, "bare"):
        t.bare = False


def start(link, key, hello, ack, on):
    """Seal the session now starting (both offered seal) or not; encrypt it
    and send bodies bare where both offered that too."""
    if not on:
        stop(link)
        return
    enc = offered(hello, wire.CAP_ENC) and offered(ack, wire.CAP_ENC)
    link._seal = keys(key, link.role, hello, ack, enc)
    t = link._transport
    if t is not None and hasattr(t, "bare"):
        t.bare = offered(hello, wire.CAP_BARE) and offered(ack, wire.CAP_BARE)
    link._s_tx = 0
    link._s_rx = 0
    if link._s_buf is None:  # once per boot: the tail, and a view of its counter
        t = bytearray(TAIL)
        link._s_buf = (t, memoryview(t)[:4])


def encrypted(link):
    """True while the session is sealed and encrypted."""
    ks = link._seal
    return ks is not None and len(ks) > 4


def out(link, body, fresh=False):
    """``body`` as sent and its seal: (body, tail), the tail (counter and tag)
    in the link's buffer, valid until the next call (with ``fresh``, in a
    buffer of its own), the body encrypted in an encrypted session; or
    (body, None) when the session is not sealed or the frame is a handshake
    frame."""
    ks = link._seal
    if ks is None or body is None or body[0] & wire.TYPE_MASK <= wire.AUTH:
        return body, None
    c = link._s_tx + 1
    if c > CTR_MAX:  # never reused under one key: a new handshake, new keys
        link.end_session("seal counter exhausted")
        return body, None
    link._s_tx = c
    if fresh:
        t = bytearray(TAIL)
        ctr = memoryview(t)[:4]
    else:
        t, ctr = link._s_buf
    t[0] = c >> 24
    t[1] = (c >> 16) & 0xFF
    t[2] = (c >> 8) & 0xFF
    t[3] = c & 0xFF
    if len(ks) > 4:  # the type byte stays clear: it says how to read the rest
        if _INPLACE:
            body = _crypt(ks[4], c, memoryview(body), len(body))
        else:
            body = bytes((body[0],)) + cipher.ctr(ks[4], c, memoryview(body)[1:])
    t[4:] = memoryview(_mac(ks[0], ks[1], body, ctr))[:8]
    return body, t


def opened(link, body):
    """The body of a received frame without its seal, or None when it is
    refused (counted: ``forged`` or ``replayed``; nothing in it is acted on).
    Handshake frames are never sealed (a restarted peer says HELLO); in a
    live sealed session only a HELLO or AUTH to a responder passes, for a
    handshake beside the session, and a HELLO_ACK to an initiator (counted:
    a late answer, or forged); everything else unsealed is forged. A side
    without keys outside a session cannot read a session frame (it may be
    sealed), so only its type is kept: that type with the body ``0``, which
    rx counts as ``unauthenticated`` (a responder answers ``no_session``).
    An ERROR that fails makes an initiator check that its peer still
    answers: a restarted responder says ``no_session`` with no seal."""
    n = len(body)
    ks = link._seal
    live = ks is not None and link.status == wire.UP
    if not n:
        return _refuse(link, "forged", "an empty frame") if live else body
    t = body[0] & wire.TYPE_MASK
    if t <= wire.AUTH:
        # Unsealed by design, so in a live session nothing but a new handshake
        # beside it (handshake.py), which ends the session only once it proves
        # the key: a HELLO, or the AUTH that answers one, to a responder, and
        # to an initiator a HELLO_ACK (one it answers late is only counted),
        # never numbered. Anything else (type 0, a numbered frame) would
        # otherwise reach the session with no key behind it.
        if (
            not live
            or not body[0] & wire.F_SEQ
            and (
                t == wire.HELLO_ACK  # a late answer to one of its HELLOs (handshake.on_ack)
                if link.role == "initiator"
                else t == wire.HELLO or t == wire.AUTH and len(link._hs) > 1
            )
        ):
            return body
        return _refuse(link, "forged", "unsealed %s in a sealed session" % _name(t))
    if ks is None:
        return body if link.status == wire.UP or t <= wire.BYE else bytes((t,)) + b"0"
    mv = memoryview(body)
    if n <= TAIL or not wire.same(memoryview(_mac(ks[2], ks[3], mv[: n - 8]))[:8], mv[n - 8 :]):
        if t == wire.ERROR and link.role == "initiator" and link.status == wire.UP:
            link._doubt()
        return _refuse(link, "forged", "no valid seal on a %s" % _name(t))
    c = (mv[n - 12] << 24) | (mv[n - 11] << 16) | (mv[n - 10] << 8) | mv[n - 9]
    if c <= link._s_rx:
        return _refuse(link, "replayed", "frame counter %d not above %d" % (c, link._s_rx))
    link._s_rx = c
    if len(ks) > 4:
        if _INPLACE:
            return _crypt(ks[5], c, mv, n - TAIL)
        return bytes((body[0],)) + cipher.ctr(ks[5], c, mv[1 : n - TAIL])
    return mv[: n - TAIL]


def _crypt(k, c, mv, n):
    """MicroPython's copy of mv[:n] (a memoryview of a body), all but its
    type byte through AES-CTR, made in one buffer: the only frame-sized
    block of heap it takes."""
    o = memoryview(bytearray(n + 15))  # with room for the last AES block whole
    o[0] = mv[0]
    cipher.ctr(k, c, mv[1:n], o[1:])
    return o[:n]


def _name(t):
    return wire.NAMES[t] if 0 < t < len(wire.NAMES) else "type %d" % t


def _refuse(link, what, why):
    link.count(what)
    link.last_error = "%s frame refused: %s" % (what, why)
    return None
