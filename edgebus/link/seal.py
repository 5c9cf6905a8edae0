"""Sealed sessions (docs/protocol.md section 17, capability "seal"): session
keys from the handshake, and a counter and tag on every frame after AUTH.

Per direction: a key derived from the device key and both sides' nonces,
sids and nodes (HKDF over HMAC-SHA256), a 32-bit frame counter that only
goes up, and a 64-bit tag (HMAC-SHA256 truncated) over the body and the
counter. A frame whose tag does not verify is refused (``forged``), one whose
counter does not advance too (``replayed``); neither ends the session.

Cost per frame: two SHA-256 objects and their digests (CPython copies the
keyed states; MicroPython's sha256 has no copy(), so it hashes the 64-byte
pads again). The body is not copied: counter and tag go to the transport as
a tail (frame.encode) from a 12-byte buffer kept for the boot.
"""
import hashlib
from .. import compat
from . import tx, wire

TAIL = 12           # counter (4) + tag (8) after the body
MARK = "s"          # starts the nonce of a side that offers seal (never hex)
CTR_MAX = 0xFFFFFFFF

_keyed = hasattr(hashlib.sha256(), "copy")   # CPython: keep the keyed states, copy per frame


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


def keys(key, role, hello, ack):
    """This side's (tx inner, tx outer, rx inner, rx outer) for the session of
    ``hello`` and ``ack``: HKDF-Extract with the handshake as salt, then one
    HKDF-Expand block per direction (RFC 5869, L = 32)."""
    salt = "|".join(("edgebus-seal-1", hello["nonce"], ack["nonce"], hello["sid"],
                     ack["sid"], str(hello["node"]), str(ack["node"]))).encode()
    prk = wire.mac(salt, key)
    ir = _pads(wire.mac(prk, b"edgebus-seal-1 I>R\x01"))
    ri = _pads(wire.mac(prk, b"edgebus-seal-1 R>I\x01"))
    return ir + ri if role == "initiator" else ri + ir


def bound(side):
    """What a proof binds of one side's HELLO or HELLO_ACK beyond m(role)
    when both offer seal: its capabilities, heartbeat, clock and window, so a
    man in the middle cannot change them (or strip "seal") unnoticed."""
    caps = side.get("caps")
    caps = ",".join(str(c) for c in caps) if type(caps) is list else ""
    return "%s;%s;%s;%s;%s" % (caps, side.get("hb"), side.get("ms"), side.get("wall"),
                               side.get("win"))


def offered(side):
    """True if the HELLO or HELLO_ACK ``side`` lists seal."""
    caps = side.get("caps")
    return type(caps) is list and wire.CAP_SEAL in caps


def start(link, key, hello, ack, on):
    """Seal the session now starting (both offered seal) or not."""
    if not on:
        link._seal = None
        return
    link._seal = keys(key, link.role, hello, ack)
    link._s_tx = 0
    link._s_rx = 0
    if link._s_buf is None:   # once per boot: the tail, and a view of its counter
        t = bytearray(TAIL)
        link._s_buf = (t, memoryview(t)[:4])


def out(link, body, fresh=False):
    """The seal of ``body``: its tail (counter and tag) in the link's buffer,
    valid until the next call (with ``fresh``, in a buffer of its own); or
    None when the session is not sealed or the frame is a handshake frame."""
    ks = link._seal
    if ks is None or body[0] & wire.TYPE_MASK <= wire.AUTH:
        return None
    c = link._s_tx + 1
    if c > CTR_MAX:   # never reused under one key: a new handshake, new keys
        link.end_session("seal counter exhausted")
        return None
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
    t[4:] = memoryview(_mac(ks[0], ks[1], body, ctr))[:8]
    return t


def opened(link, body):
    """The body of a received frame without its seal, or None when it is
    refused (counted: ``forged`` or ``replayed``; nothing in it is acted on).
    Handshake frames are never sealed (a restarted peer says HELLO). A side
    without keys outside a session cannot read a session frame (it may be
    sealed), so only its type is kept: that type with the body ``0``, which
    rx counts as ``unauthenticated`` (a responder answers ``no_session``).
    An ERROR that fails makes an initiator check that its peer still
    answers: a restarted responder says ``no_session`` with no seal."""
    n = len(body)
    if not n:
        return body
    t = body[0] & wire.TYPE_MASK
    if t <= wire.AUTH:
        return body
    ks = link._seal
    if ks is None:
        return body if link.status == wire.UP or t <= wire.BYE else bytes((t,)) + b"0"
    mv = memoryview(body)
    if n <= TAIL or not wire.same(memoryview(_mac(ks[2], ks[3], mv[:n - 8]))[:8], mv[n - 8:]):
        if t == wire.ERROR and link.role == "initiator" and link.status == wire.UP:
            _doubt(link)
        return _refuse(link, "forged", "no valid seal on a %s"
                       % (wire.NAMES[t] if t < len(wire.NAMES) else t))
    c = (mv[n - 12] << 24) | (mv[n - 11] << 16) | (mv[n - 10] << 8) | mv[n - 9]
    if c <= link._s_rx:
        return _refuse(link, "replayed", "frame counter %d not above %d" % (c, link._s_rx))
    link._s_rx = c
    return mv[:n - TAIL]


def _refuse(link, what, why):
    link.count(what)
    link.last_error = "%s frame refused: %s" % (what, why)
    return None


def _doubt(link):
    """An ERROR with no valid seal (no_session from a restarted responder,
    or an outsider's): PING, and end the session by liveness unless a sealed
    frame answers within min(2 s, heartbeat). At most once a second."""
    now = compat.now()
    if now - link._t_doubt < 1.0:
        return
    link._t_doubt = now
    tx.control(link, wire.PING, int(now * 1000))
    link._t_rx = min(link._t_rx, now - 3 * link.heartbeat + min(2.0, link.heartbeat))
