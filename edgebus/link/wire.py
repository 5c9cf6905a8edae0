"""The link's wire format (docs/protocol.md): frame bodies, topics, proofs.

A body is ``type|flags`` (1 byte), an optional 16-bit sequence number, JSON,
and an optional raw binary payload after it. JSON because MicroPython's json
is C (fast, no code of ours to carry) and every bus payload the firmware uses
is a JSON value; bytes payloads travel raw after the JSON instead of base64.
"""

import hashlib
import json
from binascii import hexlify
from os import urandom

from ..compat import MICROPYTHON

# Here, not in compat: the core alone (a board's 64 KB budget) never needs them.
if MICROPYTHON:

    def utf8(s):
        """The UTF-8 bytes of str s as a buffer: on MicroPython a view of the
        str itself (no copy; a frame-sized copy is heap a board lacks)."""
        return memoryview(s)

    def span(b, i, j):
        """b[i:j] for json.loads: a view on MicroPython (its json reads any buffer)."""
        return memoryview(b)[i:j]

    def dumps(obj):
        """The compact JSON of a frame body."""
        return json.dumps(obj, separators=(",", ":"))
else:

    def utf8(s):
        return s.encode()

    def span(b, i, j):
        return bytes(b[i:j])

    # One encoder for every frame: json.dumps given separators makes one a
    # call, which doubles the cost of a small body (an ACK's: ~4 of 7 us).
    dumps = json.JSONEncoder(separators=(",", ":")).encode


VERSION = 1
# The smallest max_len: a HELLO_ACK with every capability, its kid and proof
# is about 310 bytes plus the node name (at most 64).
MIN_LEN = 400

HELLO = 1  # initiator -> responder: opens a session
HELLO_ACK = 2  # responder -> initiator: its side plus proof of the key
AUTH = 3  # initiator -> responder: proof of the key
ERROR = 4  # either: a refusal with a code; the session ends
BYE = 5  # either: clean close
PING = 6
PONG = 7
SYNCSTART = 8  # retained snapshot: start
SYNC = 9  # one retained fact
SYNCEND = 10  # snapshot complete: the importer applies it now
PUB = 11  # published message          (sequenced)
RET = 12  # retained value             (sequenced)
UNRET = 13  # retained value removed     (sequenced)
CALL = 14
REPLY = 15
FAIL = 16
ROUTES = 17  # the endpoints the sender offers, complete list
ACK = 18  # receiver: every sequence number below N is durable here  ("ack" capability)
RESEND = 19  # receiver: N is missing (lost in flight); send again from N  ("ack")
SKIP = 20  # sender: N is next; what you lack below N is lost for good  ("ack")
HIST = 21  # sender: an earlier boot's entry [sid, seq, wall] + its body  ("hist")
REFUSE = 22  # receiver: [N, reason, sid?]: N will never be durable here  ("ack")
WINDOW = 23  # receiver: W: at most W numbers sent and not acknowledged  ("flow")

# Capabilities this side can offer in HELLO / HELLO_ACK ("caps").
CAP_ACK = "ack"
CAP_HIST = "hist"  # takes HIST, and ACK/RESEND/SKIP [n, sid] for earlier boots
CAP_FLOW = "flow"  # honours WINDOW: the receiver paces what is sent ahead of its ACKs
CAP_SEAL = "seal"  # every frame after AUTH carries a counter and tag (seal.py)
CAP_ENC = "enc"  # a sealed session encrypts what follows each type byte (cipher.py)
CAP_BARE = "bare"  # a sealed session's messages may be bodies without COBS and CRC (frame.py)

# Session states: a link's public ``status``.
DOWN = "down"
HELLO_SENT = "hello_sent"
ACK_SENT = "ack_sent"
UP = "up"

F_SEQ = 0x40  # a 16-bit sequence number follows the type byte
F_BIN = 0x80  # a varint JSON length follows; the payload is the raw tail
TYPE_MASK = 0x3F

NAMES = (
    "",
    "HELLO",
    "HELLO_ACK",
    "AUTH",
    "ERROR",
    "BYE",
    "PING",
    "PONG",
    "SYNCSTART",
    "SYNC",
    "SYNCEND",
    "PUB",
    "RET",
    "UNRET",
    "CALL",
    "REPLY",
    "FAIL",
    "ROUTES",
    "ACK",
    "RESEND",
    "SKIP",
    "HIST",
    "REFUSE",
    "WINDOW",
)


class WireError(ValueError):
    """A body that does not decode; the reason is the message."""


def parts(t, obj, seq=None, blob=None):
    """encode()'s body as its parts, (head, JSON, blob or None) buffers not
    joined: a spool copies them into its ring one by one, and a board needs
    no body-sized block besides the JSON itself (Spool.put, size, join)."""
    j = utf8(dumps(obj))
    n = len(j)
    head = bytearray((3 if seq is not None else 1) + (_varlen(n) if blob is not None else 0))
    head[0] = t | (F_SEQ if seq is not None else 0) | (F_BIN if blob is not None else 0)
    i = 1
    if seq is not None:
        head[1] = (seq >> 8) & 0xFF
        head[2] = seq & 0xFF
        i = 3
    if blob is not None:
        while n >= 0x80:
            head[i] = (n & 0x7F) | 0x80
            i += 1
            n >>= 7
        head[i] = n
    return head, j, blob


def _varlen(n):
    k = 1
    while n >= 0x80:
        k += 1
        n >>= 7
    return k


def size(p):
    """The length of the body of parts p."""
    return len(p[0]) + len(p[1]) + (len(p[2]) if p[2] is not None else 0)


def join(p):
    """The body of parts p, in one exactly-sized bytearray (filled by slices:
    growing it by += could hold the JSON up to four times over at once)."""
    head, j, blob = p
    out = bytearray(size(p))
    i = len(head)
    out[:i] = head
    out[i : i + len(j)] = j
    if blob is not None:
        out[i + len(j) :] = blob
    return out


def encode(t, obj, seq=None, blob=None):
    """One frame body. ``blob`` (bytes) travels raw after the JSON."""
    return join(parts(t, obj, seq, blob))


def decode(body):
    """(type, seq16 or None, JSON value, blob or None); WireError if malformed."""
    n = len(body)
    if n < 2:
        raise WireError("body too short")
    h = body[0]
    i = 1
    seq = None
    if h & F_SEQ:
        if n < 3:
            raise WireError("truncated sequence number")
        seq = (body[1] << 8) | body[2]
        i = 3
    end = n
    if h & F_BIN:
        ln = 0
        shift = 0
        while True:
            if i >= n or shift > 21:
                raise WireError("bad JSON length")
            b = body[i]
            i += 1
            ln |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        end = i + ln
        if end > n:
            raise WireError("JSON length past the end")
    try:
        obj = json.loads(span(body, i, end))
    except ValueError:
        raise WireError("bad JSON")
    except RuntimeError:  # CPython's RecursionError: JSON nested too deeply
        raise WireError("JSON nested too deeply")
    return h & TYPE_MASK, seq, obj, (bytes(body[end:]) if h & F_BIN else None)


def topic_out(key):
    """A topic key on the wire: 'a/b' when that round-trips, else a list."""
    for t in key:
        if type(t) is not str or "/" in t:
            return list(key)
    return "/".join(key)


def topic_in(x):
    """A wire topic as a key; WireError unless str or a list of str/int."""
    if type(x) is str:
        if x:
            return tuple(x.split("/"))
    elif type(x) is list and x:
        for t in x:
            if type(t) is not str and type(t) is not int:
                raise WireError("bad topic token")
        return tuple(x)
    raise WireError("bad topic")


def nonce():
    return hexlify(urandom(12)).decode()


try:
    import hmac as _hmac  # CPython: the standard library's, constant-time compare too

    def mac(key, msg):
        return _hmac.new(key, msg, hashlib.sha256).digest()

    same = _hmac.compare_digest
except ImportError:
    # MicroPython has hashlib.sha256 but no hmac: RFC 2104 over it.
    def mac(key, msg):
        if len(key) > 64:
            key = hashlib.sha256(key).digest()
        key = key + bytes(64 - len(key))
        inner = hashlib.sha256(bytes([b ^ 0x36 for b in key]))
        inner.update(msg)
        outer = hashlib.sha256(bytes([b ^ 0x5C for b in key]))
        outer.update(inner.digest())
        return outer.digest()

    def same(a, b):
        if len(a) != len(b):
            return False
        r = 0
        for x, y in zip(a, b):
            r |= x ^ y
        return r == 0


def proof(key, role, hello, ack, bound=""):
    """Proof that ``role`` ('I' or 'R') knows key, bound to both sides' nonces,
    session ids and node ids, so no proof can be replayed into another session
    (and to ``bound``, what else the handshake fixes: seal.bound)."""
    m = (
        "|".join(
            (
                "edgebus-link-1",
                role,
                hello["nonce"],
                ack["nonce"],
                hello["sid"],
                ack["sid"],
                str(hello["node"]),
                str(ack["node"]),
            )
        )
        + bound
    )
    return hexlify(mac(key, m.encode())).decode()
