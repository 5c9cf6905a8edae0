"""The link's receiving side: frames dispatched by type, data in with
sequence numbers and gaps, holds, acknowledgements, and the retained snapshot
(SYNCSTART/SYNC/SYNCEND)."""

from .. import compat, errors, topic
from . import calls, handshake, rules, tx, wire


def init(link):
    """The receiving side at the start (Link.__init__, which sets rtt and
    last_gap, public): numbers in, gaps, holds, ACKs sent, the snapshot in;
    then reset()."""
    link._held = None  # {None (this boot) or an earlier sid: first held}
    link._bad = None  # an undecodable frame's number, asked for again once
    link._retained = None  # the facts the peer retained here, kept under max_retained
    link._t_resend = 0.0  # RESEND, or no_session, sent
    link._t_ack = -1.0  # the last ACK sent: the first goes at once (clocks from 0)
    link._oversize_in = 0  # the transport reader's oversize count, as last seen (oversize_in)
    reset(link)  # not stuck, the snapshot in, the last ACK's number


def reset(link):
    """The receiving side between sessions (Link.__init__, end_session): not
    stuck, no snapshot coming, no ACK sent or held."""
    link._stuck = False
    link._rx_sync, link._rx_overflow = None, False
    link._rx_acked = 0
    link._ack_held = None  # a mark acknowledge() keeps for tick() (opts.ack_gap)


def rx_mark(link):
    """Link.rx_mark: a mark of everything received from the peer boot so far,
    or None; once earlier boots' entries came (HIST), theirs too (a third item)."""
    if link._hist is not None:
        from . import hist

        return hist.mark(link)
    n = link.state.get("rx_next")
    return None if n is None or link.peer_sid is None else (link.peer_sid, n)


def acknowledge(link, mark):
    """Link.acknowledge: the owner made everything under ``mark`` durable: tell
    the peer, at once when no ACK went for opts.ack_gap s or half the window
    waits for it (16 numbers at most: the sender's spool holds them in
    bytes), else from tick() once the gap has passed (one ACK for all that
    came meanwhile: a device sending 20 readings a second is woken by two
    ACKs a second, not twenty)."""
    if mark is None or link.status != wire.UP or not link._acking:
        return
    n = mark[1]
    if mark[0] == link.peer_sid and n is not None and n > link._rx_acked:
        now = compat.now()
        w = link._rx_window
        if now - link._t_ack >= link.opts.ack_gap or n - link._rx_acked >= (
            w // 2 if w and w < 32 else 16
        ):
            link._ack_held = None
            link._rx_acked = n
            link._t_ack = now
            tx.control(link, wire.ACK, n)
        else:
            link._ack_held = mark if len(mark) == 2 else mark[:2]
    if len(mark) > 2:
        from . import hist

        hist.acknowledge(link, mark[2])


def handle(link, t, seq, obj, blob, n):
    """Act on one decoded frame (``n`` bytes long)."""
    up = link.status == wire.UP
    if up and wire.PUB <= t <= wire.UNRET:  # data, the common case: first, no helper between
        return on_data(link, t, seq, obj, blob, n)
    if wire.HELLO <= t <= wire.BYE:
        return _opening(link, t, obj)
    if not up:
        link.count("unauthenticated")
        if (
            link.role == "responder"
            and link.status == wire.DOWN
            and t >= wire.PING
            and compat.now() - link._t_resend >= 1.0
        ):
            # Data from a peer that believes in a session we lost (we
            # restarted): tell it, at most once a second, instead of letting
            # it talk into the void until its liveness timeout.
            link._t_resend = compat.now()
            tx.control(link, wire.ERROR, {"code": "no_session", "msg": "no session: say HELLO"})
        return
    if t == wire.PING:
        return tx.control(link, wire.PONG, obj)
    if t == wire.PONG:
        link.rtt = compat.now() - obj / 1000 if type(obj) in (int, float) else None
        return
    if wire.SYNCSTART <= t <= wire.SYNCEND:
        return on_snapshot(link, t, obj, blob)
    if t == wire.CALL:
        return calls.on_call(link, obj, blob)
    if t == wire.REPLY or t == wire.FAIL:
        return calls.on_result(link, t, obj, blob)
    if t == wire.ROUTES:
        return calls.on_routes(link, obj)
    if t == wire.REFUSE:
        return on_refuse(link, obj)
    if t == wire.WINDOW:
        return tx.on_window(link, obj)
    _acks(link, t, obj, blob)


def _opening(link, t, obj):
    """HELLO, HELLO_ACK, AUTH, ERROR or BYE: taken in any state."""
    if t == wire.HELLO:
        return handshake.on_hello(link, obj)
    if t == wire.HELLO_ACK:
        return handshake.on_ack(link, obj)
    if t == wire.AUTH:
        return handshake.on_auth(link, obj)
    if t == wire.BYE:
        return link.end_session("peer closed")
    link.count("errors_in")
    code = obj.get("code")
    link.last_error = "peer: %s: %s" % (code, obj.get("msg"))
    if code == "auth_failed":
        link.count("auth_failures")
    if code == "no_session":
        # The peer restarted and lost our session: a new one at once,
        # unless one is already being made (the answer may be stale).
        if link.status == wire.UP:
            link.end_session("peer has no session")
        return
    link.end_session("peer error")
    if link.role == "initiator":
        link.retry_later()


def _acks(link, t, obj, blob):
    """ACK, RESEND, SKIP and HIST (earlier boots' with a list: protocol 14),
    or an unknown type."""
    if t >= wire.ACK and (t == wire.HIST or type(obj) is list):
        if link._journal is not None and t <= wire.RESEND:
            return link._journal.on_old(link, t, obj)
        from . import hist

        return hist.on_frame(link, t, obj, blob)
    if t == wire.ACK:
        return tx.on_ack(link, obj)
    if t == wire.RESEND:
        return tx.on_resend(link, obj)
    if t == wire.SKIP:
        return on_skip(link, obj)
    link.count("unknown_type")


def gap(link, first, last, why="lost", sid=None):
    """Link._gap: the peer's numbers ``first``..``last`` (of its earlier boot
    ``sid``, if given) are lost: counted, said in last_gap, and told to the
    owner's on_gap(link, first, last, why, sid) if it set one. ``why``:
    "evicted" (the peer said SKIP, or its snapshot's next number jumped on an
    acknowledged session: gone from its spool for good), "lost" (the numbers
    jumped otherwise), "corrupt" (a frame undecodable twice)."""
    link.count("gaps", last - first + 1)
    link.count("gap_events")
    link.last_gap = (first, last)
    if link.on_gap is not None:
        link.on_gap(link, first, last, why, sid)


def hold_back(link, key, n):
    """Link._hold_back: a numbered frame not taken, as the owner's hold (Link.hold)
    is on. The peer keeps it spooled; release() asks for it again from ``n``
    (per boot ``key``: None for the current one)."""
    link.count("held")
    h = link._held
    if h is None:
        h = link._held = {}
    if key not in h:
        h[key] = n


def extra_in(link, obj, i, seq):
    """The extra dict at obj[i] with our own ``seq`` in it, and, when the
    sender stamped its clock after it, ``ts`` (Unix seconds, unless the
    publisher gave its own) with ``clk``, which clock that is (handshake's
    _clock), and ``late`` (spooled before this session began); or None."""
    x = obj[i] if len(obj) > i and type(obj[i]) is dict else {}
    if seq is not None:
        x["seq"] = seq  # ours: the sender cannot choose what is recorded here
    elif "seq" in x:
        del x["seq"]  # an unsequenced frame (SYNC) has none: never the sender's
    ms = obj[i + 1] if len(obj) > i + 1 else None
    c = link._clock
    if "clk" in x:
        del x["clk"]  # ours, as seq: which clock the ts below comes from
    if not link.opts.claims:  # not a relay we trust: the origin is this link's peer
        for k in ("src", "src_sid", "src_seq", "via", "hop_sid"):
            if k in x:
                del x[k]
    if type(ms) is int and c is not None:
        if c[1] is not None and "ts" not in x:  # a publisher's own ts wins
            x["ts"] = (ms + c[1]) / 1000
            if c[2] is not None:
                x["clk"] = c[2]
        if ms <= c[0]:
            x["late"] = True
        elif "late" in x:
            del x["late"]
    return x or None


def seq_of(link, s16, n):
    """The full number of a data frame of ``n`` bytes (0: not taken), or
    None (duplicate, held, or ahead of a loss in flight on an acknowledged
    session: asked for again, dropped)."""
    st = link.state
    exp = st.get("rx_next")
    if exp is None:  # first sequenced frame of this peer boot
        exp = s16
    d = (s16 - exp) & 0xFFFF
    if d >= 0x8000:
        link.count("duplicates")
        return None
    # Only the next frame can be taken: one ahead of it asks (size 0) whether
    # any may pass now, so a small one behind a large held one takes nothing.
    if link.hold is not None and link._acking and link.hold(link, 0 if d else n):
        hold_back(link, None, exp)
        return None
    h = link._held
    if h is not None and None in h:  # taken again: the peer is back at the hole, or
        del h[None]  # shows it (below), so release() need not ask
        if not h:
            link._held = None
    if d:
        if link._acking:
            link.count("out_of_order")
            resend(link, exp)
            return None
        gap(link, exp, exp + d - 1)
    full = exp + d
    w = link._rx_window
    a = link._rx_acked
    if w is not None and a and link._flow and full >= a + max(w, 1):
        # The window this side gave is kept, not trusted, from the session's
        # first ACK on: a sender that claims flow and sends past it gets no
        # more of the receiver than one that honours it (asked for again).
        link.count("over_window")
        resend(link, exp)
        return None
    st["rx_next"] = full + 1
    link._stuck = False
    return full


def undecodable(link, s16):
    """A numbered frame that passed its CRC but does not decode: noise can
    beat a 16-bit CRC, so on an acknowledged session its number is asked for
    again once; undecodable again (or with no acknowledgements) the number is
    spent, or it would be asked for forever, and counted as a gap."""
    exp = link.state.get("rx_next")
    if exp is None or s16 != exp & 0xFFFF:
        return
    if link._acking and link._bad != exp:
        link._bad = exp
        link._stuck = False  # at once, not after the 1 s pacing
        return resend(link, exp)
    full = seq_of(link, s16, 0)
    if full is not None:
        gap(link, full, full, "corrupt")


def resend(link, n):
    """Ask the peer to send again from ``n`` (once a second while stuck)."""
    now = compat.now()
    if not link._stuck or now - link._t_resend >= 1.0:
        link._stuck = True
        link._t_resend = now
        link.count("resends_asked")
        tx.control(link, wire.RESEND, n)


def oversize_in(link, n):
    """The transport's reader says ``n`` frames longer than max_len were
    dropped (a new transport counts from 0): the new ones counted
    ``oversize_in`` and said in last_error, since a peer that sends larger
    frames (a bridge's ROUTES to a program whose max_len is too short)
    otherwise fails its calls with no word why."""
    d = n - link._oversize_in
    link._oversize_in = n
    if d > 0:
        link.count("oversize_in", d)
        link.last_error = (
            "a frame longer than max_len %d came in, dropped: the peer sends larger ones"
            % link.opts.max_len
        )


def timers(link, now):
    """Asking again: while stuck after a loss (once a second), and once the
    owner's hold (Link.hold: it held numbered frames back, which the peer
    keeps spooled) is off: hold(link, 0), may any frame pass now."""
    if link._stuck and now - link._t_resend >= 1.0:
        resend(link, link.state.get("rx_next"))
    if link._held is not None and (link.hold is None or not link.hold(link, 0)):
        release(link)


def release(link):
    """The hold is off: RESEND from the first number held (per boot)."""
    h = link._held
    link._held = None
    for key in h:
        if key is None:
            link._stuck = False  # at once, not after the 1 s pacing
            resend(link, link.state.get("rx_next"))
        else:
            link.count("resends_asked")
            tx.control(link, wire.RESEND, [h[key], key])


def on_refuse(link, obj):
    """REFUSE [n, reason, sid?]: the peer will never keep entry n (the ACK
    that passes it frees it): counted, and said in last_error."""
    if type(obj) is not list or len(obj) < 2 or type(obj[0]) is not int:
        return link.count("bad_frames")
    link.count("refused_by_peer")
    link.last_error = "peer refused %s%d: %s" % (
        "" if len(obj) < 3 else "%s/" % (obj[2],),
        obj[0],
        obj[1],
    )


def on_skip(link, n):
    """SKIP: the peer's next number is ``n``; ours below it are lost."""
    if type(n) is not int:
        return link.count("bad_frames")
    st = link.state
    exp = st.get("rx_next")
    if exp is not None and n > exp:
        gap(link, exp, n - 1, "evicted")
    if exp is None or n > exp:
        st["rx_next"] = n
        link._stuck = False


def on_data(link, t, s16, obj, blob, n):
    """PUB, RET or UNRET (``n`` bytes): its full sequence number (gaps
    counted, duplicates dropped), then published here under the import rules."""
    if s16 is None:
        return link.count("bad_frames")
    full = seq_of(link, s16, n)
    if full is None:
        return
    k = rules.map_in(link, obj[0], link._imports)
    if k is None:
        return
    imp = link._imp
    try:
        if t == wire.UNRET:
            imp.unretain(k, extra_in(link, obj, 1, full))
            if link._retained is not None:
                link._retained.discard(k)
        elif t == wire.RET and not room(link, k):
            return
        else:
            p = blob if blob is not None else obj[1]
            x = extra_in(link, obj, 2, full)
            if t == wire.PUB:
                imp.publish(k, p, x)
            else:
                imp.retain(k, p, x)
        link.count("imported")
    except errors.Denied as e:
        link.count("denied")
        link.last_error = str(e)


def room(link, k):
    """True if the peer may retain ``k`` here: it is one of the facts it
    holds, or it holds fewer than Link.max_retained (else counted
    retained_refused: each fact costs the receiver memory for good)."""
    n = link.opts.max_retained
    if n is None:
        return True
    r = link._retained
    if r is None:
        r = link._retained = set()
    if k in r:
        return True
    if len(r) >= n:
        link.count("retained_refused")
        link.last_error = "retained %s refused: the peer holds %d facts (max_retained)" % (
            topic.render(k),
            n,
        )
        return False
    r.add(k)
    return True


def on_snapshot(link, t, obj, blob):
    """SYNCSTART, SYNC or SYNCEND: the peer's retained facts, collected,
    then applied at once."""
    buf = link._rx_sync
    if t == wire.SYNCSTART:
        st = link.state
        nxt = obj.get("seq")
        if type(nxt) is int:
            exp = st.get("rx_next")
            if exp is not None and nxt > exp:  # lost while the link was down, unless
                lo = exp  # acknowledged by another gateway meanwhile
                a = obj.get("acked")
                if type(a) is int and exp < a <= nxt:
                    link.count("acked_elsewhere", a - exp)
                    lo = a
                if nxt > lo:  # acknowledged sessions: gone from the peer's spool
                    gap(link, lo, nxt - 1, "evicted" if link._acking else "lost")
            if exp is None or nxt > exp:  # never back: what we have stays had
                st["rx_next"] = nxt
        link._rx_sync = {}
        link._rx_overflow = False
        return
    if buf is None:
        return link.count("unexpected")
    if t == wire.SYNC:
        if len(buf) >= link.opts.max_sync:
            link._rx_overflow = True
            return link.count("sync_overflow")
        k = rules.map_in(link, obj[0], link._imports)
        if k is not None and room(link, k):
            buf[k] = (blob if blob is not None else obj[1], extra_in(link, obj, 2, None))
        return
    link._rx_sync = None
    _apply_snapshot(link, buf)
    link.count("syncs")


def _apply_snapshot(link, buf):
    """SYNCEND: the collected facts ``buf`` ({topic: (payload, extra)}) retained here."""
    store = link.bus._store
    imp = link._imp
    # Replace, then remove: a view never sees a fact missing between its
    # old and new value, and facts the peer no longer has go away.
    for k, (p, x) in buf.items():
        cur = store.get(k)
        o = cur.origin if cur is not None else None
        if (
            o is not None
            and o.link_id == link.link_id
            and o.peer_sid == link.peer_sid
            and cur.payload == p
        ):
            continue
        try:
            imp.retain(k, p, x)
        except errors.Denied as e:
            link.count("denied")
            link.last_error = str(e)
    if not link._rx_overflow:  # only a complete snapshot says what vanished
        for r in link._imports:
            for m in store.query(r[1] + r[0], []):
                if m.origin.link_id == link.link_id and m.topic not in buf:
                    imp.unretain(m.topic)
                    if link._retained is not None:
                        link._retained.discard(m.topic)
