"""What an outsider can send into a sealed session, and what it must leave
alone (docs/protocol.md section 17), for the portable sweep
(test_link_unsealed.py, CPython and MicroPython) and the Hypothesis state
machine (tests/host/link/test_link_unsealed_property.py)."""

from edgebus.link import seal, wire

# Counters a refused frame may move: the refusal itself, the frame count,
# a HELLO answered beside the session (or ignored as a late retry), a
# HELLO_ACK that answers a HELLO of the session's handshake late.
REFUSALS = ("forged", "replayed", "frames_in", "stale_hellos", "hellos_beside", "stale_acks")
# Flags an outsider may set on any type byte.
FLAGS = (0, wire.F_SEQ, wire.F_BIN, wire.F_SEQ | wire.F_BIN)
TYPES = tuple(range(0, 26))  # every type, and two past the last


def valid_obj(t, peer_node="dev1"):
    """A body object of type ``t`` as a genuine peer would send it."""
    if t == wire.HELLO or t == wire.HELLO_ACK:
        return hello(peer_node)
    if t == wire.AUTH:
        return {"proof": "0" * 64}
    if t == wire.ERROR:
        return {"code": "no_session", "msg": "no session: say HELLO"}
    if t == wire.BYE:
        return {"reason": "x"}
    if t in (wire.PUB, wire.RET):
        return ["sensor/forged", 99.9]
    if t == wire.UNRET:
        return ["sensor/forged"]
    if t == wire.SYNC:
        return ["sensor/forged", 1]
    if t in (wire.SYNCSTART, wire.SYNCEND):
        return {"seq": 4096, "n": 1, "acked": 4096}
    if t == wire.CALL:
        return [1, "sys/reboot", None, 1000, None]
    if t in (wire.REPLY, wire.FAIL):
        return [1, "x"]
    if t == wire.ROUTES:
        return ["sys/reboot"]
    if t == wire.REFUSE:
        return [1, "x"]
    if t == wire.HIST:
        return ["sid", 1, 0]
    return 4096  # PING, PONG, ACK, RESEND, SKIP, WINDOW and the unknown


def hello(node="dev1"):
    """A well-formed HELLO from ``node`` offering a sealed session (a new boot)."""
    return {
        "v": wire.VERSION,
        "node": node,
        "sid": wire.nonce()[:16],
        "nonce": seal.MARK + wire.nonce(),
        "hb": 1000,
        "auth": True,
        "ms": 1 << 40,
        "caps": [wire.CAP_ACK, wire.CAP_FLOW, wire.CAP_SEAL],
    }


def body(t, flags, shape, seq):
    """A body of type ``t`` with ``flags``: "empty" (the header alone),
    "undecodable" (a byte that is no JSON) or "valid"."""
    head = bytes((t | flags,))
    if flags & wire.F_SEQ:
        head += bytes(((seq >> 8) & 0xFF, seq & 0xFF))
    if shape == "empty":
        return head
    if shape == "undecodable":
        return head + b"\x21"
    b = wire.encode(t, valid_obj(t), seq if flags & wire.F_SEQ else None)
    return bytes(b) if not flags & wire.F_BIN else bytes((b[0] | wire.F_BIN,)) + bytes(b[1:])


def wrong_tag(link, b):
    """``b`` with a seal tail that ``link`` would check: its next counter and
    a tag no one computed."""
    c = link._s_rx + 1
    return b + bytes(((c >> 24) & 0xFF, (c >> 16) & 0xFF, (c >> 8) & 0xFF, c & 0xFF)) + bytes(8)


def frames(link, t, flags, shape):
    """The outsider's frames for ``link`` of one kind: unsealed, and with a wrong tag."""
    n = link.state.get("rx_next") or 1
    b = body(t, flags, shape, n)
    return (b, wrong_tag(link, b))


def _ctl(link):
    # what a refused frame may queue: a HELLO_ACK beside the session, the
    # PING of a doubt (an unsealed ERROR to an initiator: seal.py)
    return [bytes(b) for b in link._ctl if b[0] & wire.TYPE_MASK not in (wire.HELLO_ACK, wire.PING)]


def _spool(link):
    s = link.spool_stats()
    del s["oldest_age"]  # the clock's, not the frame's
    return s


def snapshot(link):
    """Everything a frame could change that an outsider's must not."""
    st = link.state
    return (
        link.status,
        link.peer_node,
        link.peer_sid,
        link.generation,
        link._session,
        st.get("rx_next"),
        st.get("peer_sid"),
        st.get("generation"),
        link._s_rx,
        link._s_tx,
        link._seal is None,
        _spool(link),
        link.tx_seq,
        link._tx_next,
        link.tx_acked,
        link._tx_window,
        link._rx_window,
        link._rx_acked,
        link._stuck,
        link._held,
        link._bad,
        link._clock,
        link._hkey,
        link._acking,
        link._flow,
        link._rx_sync is None,
        link.rtt,
        len(link._pending),
        len(link._calls),
        _ctl(link),
        link.bus.stats(),
        sorted((k, v) for k, v in link.counters.items() if k not in REFUSALS),
    )


def unchanged(link, before, t_rx, what):
    """Assert that ``link`` is as ``before`` (snapshot) and no sign of life
    was taken from the frame (its last-received time not moved on)."""
    after = snapshot(link)
    if after != before:
        for i in range(len(after)):
            if after[i] != before[i]:
                raise AssertionError("%s moved field %d: %r -> %r" % (what, i, before[i], after[i]))
    assert link._t_rx <= t_rx, "%s counted as a sign of life" % what
