"""The link's handshake: HELLO, HELLO_ACK and AUTH, keys and proofs, and
the start of a session (the end is Link.end_session)."""

from binascii import hexlify

from .. import backoff, compat
from . import calls, rules, seal, tx, wire

# Handshakes kept in progress at once: a slow peer's answer to an earlier
# HELLO (a fleet storming a busy bridge) still makes a session instead of
# being stale, as does an AUTH answering an earlier HELLO_ACK.
KEEP = 4
# A responder's half-done handshake waits for the AUTH this many times
# handshake_timeout (the span of KEEP retries at the initiator's longest
# wait): under a storm the way back takes longer than one timeout (10,000
# devices at once: ~1 in 15 AUTHs came too late for 1x, and the devices
# counted a session the bridge never had).
HOLD = KEEP


def init(link):
    """The handshake's fields at the start (Link.__init__, which sets the
    peer's, public): keys, handshakes in progress, the session's terms."""
    link._hkey = None  # this handshake's key (key_for)
    link._mine = None  # our latest side
    link._hs = []  # in progress: (peer's HELLO or None, our side), newest last
    link._recent = []  # initiator nonces seen (replay guard)
    link._session = 0
    link._backoff = 5.0  # the retry delay after an error; handshake_timeout once up
    link._retry_at = 0.0  # no HELLO before (after an error)
    link._hello_wait = 0  # the current HELLO retry interval
    # the peer's: (its ms at HELLO / HELLO_ACK, ms to Unix or None, source or None)
    link._clock = None
    link._acking = link._flow = False  # negotiated: acknowledgements, WINDOW honoured
    link._imp = None  # derived connection for what arrives, per session
    link._imports = []  # the rules resolved for the peer's node
    link._export_calls = []
    link._import_calls = []


def kid(key):
    """The key id of ``key`` (bytes): 8 hex digits of a MAC under it, which
    tell a side holding several keys for a peer which one the peer uses
    (protocol 5) and nothing about the key."""
    return hexlify(wire.mac(key, b"edgebus-kid-1")).decode()[:8]


def key_for(link, node, side=None):
    """The key (bytes) of this handshake with peer ``node``, or None for no
    authentication. Given ``side`` (the peer's HELLO or HELLO_ACK; {} for an
    initiator's own HELLO) it is chosen and kept for the handshake: of the
    keys the link takes for node (``Link(key=...)``: bytes or str, a
    non-empty list of them newest first, or a callable(node) returning one),
    the one whose kid the peer names, else the first."""
    if side is None:
        return link._hkey
    k = link._key
    if callable(k):
        k = k(node)
    if type(k) is not list:
        k = [k]
    pick = k[0]
    want = side.get("kid")
    if want is not None and len(k) > 1:
        for c in k:
            c = c.encode() if type(c) is str else c
            if kid(c) == want:
                pick = c
                break
    if type(pick) is str:
        pick = pick.encode()
    link._hkey = pick
    return pick


def error(link, code, msg):
    """Record an error and tell the peer with an ERROR frame (unless down)."""
    link.last_error = "%s: %s" % (code, msg)
    link.count("errors")
    if link.status != wire.DOWN:
        tx.control(link, wire.ERROR, {"code": code, "msg": msg})


def _side(link, auth):
    sealing = auth and link.opts.seal != "off"
    # A side that offers seal marks its nonce (not hex, so never an old
    # peer's): the proofs cover both nonces, so a man in the middle who
    # strips "seal" from caps is caught by the mark it cannot remove.
    s = {
        "v": wire.VERSION,
        "node": link.node,
        "sid": link.sid,
        "nonce": (seal.MARK if sealing else "") + wire.nonce(),
        "hb": int(link.opts.heartbeat * 1000),
        "auth": auth,
        "ms": compat.ms(),
    }
    w = compat.wall_ms()
    if w is not None:
        s["wall"] = w - s["ms"]  # this side's Unix time at ms 0 of its clock
        if compat.wall[0]:
            s["clk"] = compat.wall[0]  # where it comes from: "ntp" or "rtc"
    caps = [wire.CAP_ACK, wire.CAP_HIST, wire.CAP_FLOW] if link.opts.ack else []
    if sealing:
        caps += seal.caps(link, link._transport)
    if caps:
        s["caps"] = caps
    if link.opts.ack and link._rx_window is not None:
        s["win"] = link._rx_window  # the window from the first frame on (protocol 11)
    return s


def _proof(key, role, hello, ack):
    # Both sides offer seal: the proof binds their caps and clocks too.
    x = ""
    if seal.offered(hello) and seal.offered(ack):
        x = "|" + seal.bound(hello) + "|" + seal.bound(ack)
    return wire.proof(key, role, hello, ack, x)


def _unsealed(link, mine, theirs):
    """Refuse (True) a session less sealed than this side asks: the peer's
    nonce says it offers seal although its caps do not (stripped on the way:
    a downgrade); this side requires a seal ("auto", "mac") or encryption
    ("encrypt") that the peer does not offer."""
    if not seal.offered(mine):
        return False
    if not seal.offered(theirs) and theirs["nonce"].startswith(seal.MARK):
        link.count("downgrades")
        _refuse(link, "downgrade", "seal was stripped from the handshake", "downgrade")
        return True
    if (
        link.opts.seal == "offer"
        or seal.offered(theirs)
        and (link.opts.seal != "encrypt" or seal.offered(theirs, wire.CAP_ENC))
    ):
        return False
    link.count("seal_refused")
    _refuse(
        link,
        "seal_required",
        "this link requires %s session"
        % ("an encrypted" if link.opts.seal == "encrypt" else "a sealed"),
        "unsealed peer",
    )
    return True


def _unpaced(link, theirs):
    """Refuse (True) a peer that does not offer acknowledgements and a send
    window while this side requires them (Link.paced)."""
    caps = theirs.get("caps")
    if not link.opts.paced or type(caps) is list and wire.CAP_ACK in caps and wire.CAP_FLOW in caps:
        return False
    link.count("unpaced_refused")
    _refuse(
        link,
        "pace_required",
        "this link requires acknowledgements and a send window (caps ack, flow)",
        "unpaced peer",
    )
    return True


def retry_later(link):
    """Link.retry_later: after a refusal, the next HELLO waits (doubling up to 60 s)."""
    link._backoff = backoff.grow(link._backoff, 0, 60)
    link._retry_at = compat.now() + backoff.jitter(link._backoff, 0.75)


def hello(link):
    """Open a session (initiator): send HELLO, and again after a short wait
    (doubling, with jitter, up to handshake_timeout) until an answer."""
    seal.stop(link)  # this handshake's frames go unsealed; session_up seals
    link._mine = _side(link, link._key is not None)
    link._hs = (link._hs if link.status == wire.HELLO_SENT else [])[1 - KEEP :] + [
        (None, link._mine)
    ]
    key = key_for(link, link.peer, {})
    if key is not None:
        link._mine["kid"] = kid(key)
    tx.control(link, wire.HELLO, link._mine)
    link._set_state(wire.HELLO_SENT)
    link._hello_wait = backoff.jitter(
        backoff.grow(link._hello_wait, 0.5, link.opts.handshake_timeout), 0.75
    )


def peer_presence(link, online):
    """The transport's word on the peer (e.g. its MQTT presence): gone
    ends the session now, or in a sealed one (anyone on the broker can say
    "offline") unless the peer answers within seconds; back makes an
    initiator say HELLO now (Link.peer_presence)."""
    if not online:
        link.count("peer_offline")
        if link.status == wire.UP:
            if link._seal is not None:
                link._doubt()
            else:
                link.end_session("peer offline")
    elif (
        link.role == "initiator"
        and link._transport is not None
        and (
            link.status == wire.DOWN
            or link.status == wire.HELLO_SENT
            and compat.now() - link._t_state > 0.5
        )
    ):  # a HELLO just sent is not redone
        link.count("peer_online")
        link._hello_wait = 0
        link._retry_at = 0.0
        hello(link)


def _clock(link, h):
    """How to read the peer's clock (its "ms" field): the Unix ms offset,
    from its own wall clock if it has one, else from ours now; and which
    clock that is ("ntp", "rtc" as the peer says, "bridge": ours, None:
    the peer's, source unstated)."""
    ms = h.get("ms")
    if type(ms) is not int:
        link._clock = None
        return
    w = h.get("wall")
    src = h.get("clk")
    if type(w) is not int:
        w = compat.wall_ms()
        w = None if w is None else w - ms
        src = "bridge" if w is not None else None
    elif src != "ntp" and src != "rtc":  # never a string of the peer's choosing
        src = None
    link._clock = (ms, w, src)


def _bad_hello(h):
    """What is wrong with a HELLO or HELLO_ACK ``h``: (code, message), or None."""
    if h.get("v") != wire.VERSION:
        return "version", "protocol version %r not supported (want %d)" % (h.get("v"), wire.VERSION)
    for f in ("node", "sid", "nonce"):
        if type(h.get(f)) is not str or not h[f] or len(h[f]) > 64:
            return "protocol", "bad %s in hello" % f
    return None


def _check(link, h):
    bad = _bad_hello(h)
    if bad is not None:
        error(link, bad[0], bad[1])
        return None
    return h


def _refuse(link, code, msg, why):
    link.count("auth_failures")
    error(link, code, msg)
    link.end_session(why)


def _beside(link):
    """True while a sealed session is up: a new handshake runs beside it, and
    the session ends only when that handshake proves the key (on_auth)."""
    return link.status == wire.UP and link._seal is not None


def _forged(link, why):
    link.count("forged")
    link.last_error = "forged frame refused: %s" % why


def _hello_beside(link, h):
    """A HELLO while a sealed session is up: the peer restarted, or anyone
    on the line said it. Answered beside the session, which it leaves alone:
    no reply to a bad one (it would go sealed, unreadable to a new peer),
    no state but the handshake's own entry, the session's key kept."""
    why = _bad_hello(h)
    why = why and why[1]
    if why is None and link.peer is not None and h["node"] != link.peer:
        why = "node %r is not this link's" % h["node"]
    if why is None and h["nonce"] in link._recent:
        why = "its nonce was seen before"
    if why is None and not (seal.offered(h) and h.get("auth")):
        why = "it does not offer a sealed session"
    caps = h.get("caps") if why is None else None
    if link.opts.paced and why is None and not (wire.CAP_ACK in caps and wire.CAP_FLOW in caps):
        why = "it does not offer acknowledgements and a send window"
    if why is not None:
        return _forged(link, "HELLO beside the session: " + why)
    hk = link._hkey
    key = key_for(link, h["node"], h)
    link._hkey = hk  # the session's key until the new handshake proves its own
    if key is None:
        return _forged(link, "HELLO beside the session: no key for node %r" % h["node"])
    link._recent = (link._recent + [h["nonce"]])[-16:]
    mine = _side(link, True)
    mine["kid"] = kid(key)
    # _hs[0] is the session's own handshake; the rest, KEEP - 1 beside it
    link._hs = link._hs[:1] + (link._hs[1:] + [(h, mine)])[2 - KEEP :]
    link.count("hellos_beside")
    ack = dict(mine)
    ack["to"] = h["nonce"][:8]
    ack["proof"] = _proof(key, "R", h, mine)
    tx.control(link, wire.HELLO_ACK, ack)


def on_hello(link, h):
    if link.role != "responder":
        return link.count("unexpected")
    prev = link._hs if link.status == wire.ACK_SENT else []
    last = link._hs[-1][0] if link._hs and link.status != wire.DOWN else None
    if (
        last is not None
        and last["sid"] == h.get("sid")
        and h.get("nonce") not in link._recent
        and type(h.get("ms")) is int
        and type(last.get("ms")) is int
        and h["ms"] <= last["ms"]
    ):
        # A retry the peer sent before the HELLO in hand (the session's, or
        # the latest answered), arriving late: redoing it would end a
        # session the peer already has, or answer what it no longer waits for.
        return link.count("stale_hellos")
    if _beside(link):
        return _hello_beside(link, h)
    if link.status == wire.UP:
        link.end_session("new hello")
    # Reply on the control queue even though we are 'down'.
    link._set_state(wire.ACK_SENT)
    seal.stop(link)
    if _check(link, h) is None:
        return link.end_session("bad hello")
    if link.peer is not None and h["node"] != link.peer:
        return _refuse(
            link,
            "unknown_node",
            "this link serves node %r, not %r" % (link.peer, h["node"]),
            "unknown node",
        )
    if h["nonce"] in link._recent:
        link.count("replays")
        error(link, "replay", "hello nonce already used")
        return link.end_session("replayed hello")
    link._recent = (link._recent + [h["nonce"]])[-16:]
    key = key_for(link, h["node"], h)
    if (key is None) != (not h.get("auth")):
        return _refuse(
            link, "auth_failed", "authentication required on one side only", "auth mismatch"
        )
    link._mine = _side(link, key is not None)
    if key is not None:
        link._mine["kid"] = kid(key)
    if _unsealed(link, link._mine, h) or _unpaced(link, h):
        return
    # The same boot's earlier HELLOs stay answerable (KEEP); another boot's go.
    link._hs = [e for e in prev if e[0]["sid"] == h["sid"]][1 - KEEP :] + [(h, link._mine)]
    ack = dict(link._mine)
    ack["to"] = h["nonce"][
        :8
    ]  # which HELLO this answers: a retried HELLO's stale answer is ignored
    if key is not None:
        ack["proof"] = _proof(key, "R", h, link._mine)
    tx.control(link, wire.HELLO_ACK, ack)


def on_ack(link, a):
    if link.role == "initiator" and _beside(link):
        # A busy responder's answer to an earlier HELLO of this session's
        # handshake, come late, or anyone's: nothing to act on either way.
        for _, mine in link._hs:  # the session's handshake, kept while it is up
            if a.get("to") == mine["nonce"][:8]:
                return link.count("stale_acks")
        return _forged(link, "HELLO_ACK beside the session: it answers no HELLO of this side's")
    if link.role != "initiator" or link.status != wire.HELLO_SENT:
        return link.count("unexpected")
    to = a.get("to")
    for _, mine in reversed(link._hs):
        if to is None or to == mine["nonce"][:8]:
            break
    else:
        return link.count("stale_acks")
    if mine is not link._mine:
        link.count("earlier_acks")  # the answer to an earlier HELLO: taken
        link._mine = mine
    if _check(link, a) is None:
        return link.end_session("bad hello_ack")
    key = key_for(link, a["node"], a)
    if key is not None:
        p = a.get("proof")
        if type(p) is not str or not wire.same(
            p.encode(), _proof(key, "R", link._mine, a).encode()
        ):
            _refuse(
                link,
                "auth_failed",
                "the peer does not know this link's key (or the handshake was altered)",
                "auth failed",
            )
            link.retry_later()
            return
        if _unsealed(link, link._mine, a) or _unpaced(link, a):
            link.retry_later()
            return
        tx.control(link, wire.AUTH, {"proof": _proof(key, "I", link._mine, a)})
    elif a.get("auth"):
        return _refuse(
            link, "auth_failed", "authentication required on one side only", "auth mismatch"
        )
    else:
        tx.control(link, wire.AUTH, {})
    session_up(link, link._mine, a)


def on_auth(link, a):
    beside = _beside(link)
    if link.role != "responder" or link.status != wire.ACK_SENT and not beside:
        return link.count("unexpected")
    p = a.get("proof")
    hk = link._hkey
    # The AUTH may answer an earlier HELLO_ACK; beside a session, never the
    # session's own handshake (_hs[0]: a replayed AUTH would restart it).
    for h, mine in reversed(link._hs[1:] if beside else link._hs):
        key = key_for(link, h["node"], h)
        if (
            key is None
            or type(p) is str
            and wire.same(p.encode(), _proof(key, "I", h, mine).encode())
        ):
            if beside:  # proved: the new session replaces the old
                link.end_session("the peer started a new session")
            return session_up(link, h, mine)
    if beside:
        link._hkey = hk
        return _forged(link, "AUTH beside the session: its proof fails")
    _refuse(link, "auth_failed", "the peer does not know this link's key", "auth failed")


def session_up(link, hello, ack):
    """Both sides proved the key: start the session."""
    if link.role == "responder":  # the session's HELLO (an initiator keeps its own
        link._hs = [(hello, ack)]  # HELLOs, whose answers may still come late)
    peer = ack if link.role == "initiator" else hello
    sid = peer["sid"]
    st = link.state
    if st.get("peer_sid") != sid:
        if st.get("rx_next") is not None:  # for that boot's entries still to come (HIST)
            st["old"] = (st.get("old") or [])[-3:] + [
                [st["peer_sid"], st["rx_next"], st.get("generation")]
            ]
        st["generation"] = st.get("generation", 0) + 1
        st["peer_sid"] = sid
        st["rx_next"] = None
    link.peer_node = node = peer["node"]
    link.peer_sid = sid
    _clock(link, peer)
    caps = peer.get("caps")
    link._acking = link.opts.ack and type(caps) is list and wire.CAP_ACK in caps
    link._flow = link._acking and wire.CAP_FLOW in caps
    mine = hello if link.role == "initiator" else ack
    seal.start(link, key_for(link, node), hello, ack, seal.offered(mine) and seal.offered(peer))
    link.generation = st["generation"]
    link._session += 1
    link.count("sessions")
    link.last_error = None
    imp = link._imp
    if imp is not None:
        imp.disconnect()
    link._imp = link._conn.derive(
        origin_factory={
            "kind": "link",
            "link_id": link.link_id,
            "peer_node": node,
            "peer_sid": sid,
            "generation": link.generation,
        }
    )
    o = link.opts
    link._imports = rules.resolve(o.imports, link.bus, node)
    link._export_calls = rules.resolve(o.export_calls, link.bus, node)
    link._import_calls = rules.resolve(o.import_calls, link.bus, node)
    tx.start(link, node, peer.get("win"))
    if link._journal is not None:
        from . import journal

        journal.up(link, peer)
    link._set_state(wire.UP)
    link._backoff = link.opts.handshake_timeout
    link._hello_wait = 0
    calls.send_routes(link)
