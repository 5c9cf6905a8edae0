"""The link's sending side: control and call queues, export observers,
encoding, sequence numbers spent on losses, and the retained snapshot."""

from .. import compat, topic
from ..values import Message
from . import rules, spool, wire

RTO = 2.0  # s: first wait for an ACK of the tail before a pause (doubles to 16)


def init(link):
    """The sending side at the start (Link.__init__): control queue, export
    observers, numbers out (tx_seq, tx_acked: set there, public), pace,
    retransmission; then reset()."""
    link._ctl = []
    link._credit = 4
    link._obs = []  # [observer, rule, its losses counted] per export rule
    link._obs_node = False  # the peer node they observe for
    link._exports = []
    link._tx_next = 1  # the number the peer is told comes next
    link._tx_window = link._rx_window = None  # the peer's pace; ours for it (protocol 11)
    link._t_acked = link._t_data = 0.0  # last ACK that freed entries; last numbered frame out
    link._rto = RTO  # the wait before the unacknowledged tail goes again
    reset(link)  # calls queued, the snapshot out


def too_big(link, n, what):
    """True (counted, said in last_error) if a body of ``n`` bytes exceeds
    max_len (less seal.TAIL on a link with a key: a sealed frame must fit)."""
    if n <= link._room:
        return False
    link.count("oversize_out")
    link.last_error = "%s of %d bytes exceeds max_len %d%s: not sent" % (
        what,
        n,
        link.opts.max_len,
        "" if link._room == link.opts.max_len else " less a seal's room",
    )
    return True


def control(link, t, obj):
    """Queue a control frame (sent before anything else); sent at once
    while the writer waits for work and the transport can (Link.send_now)."""
    b = wire.encode(t, obj)
    if not too_big(link, len(b), wire.NAMES[t]):
        if link._now is not None and not link._ctl and link.send_now(b):
            return  # the writer waited for work: sent at once, no task woken
        link._ctl.append(b)
        link._wake.set()


def refuse(link, n, reason, sid=None):
    """Link.refuse: the owner will never keep the peer's entry ``n`` (of its
    earlier boot ``sid``, if given): tell the peer why (REFUSE) before an ACK
    passes it, so the entry is not taken for durable."""
    if link.status == wire.UP and link._acking:
        link.count("refusals")
        control(link, wire.REFUSE, [n, str(reason)[:160]] + ([sid] if sid else []))


def window(link, w):
    """Link.window: the owner's pace for the peer (protocol 11): it may have
    at most ``w`` numbered frames sent and not acknowledged (0: send none
    now; None: no limit). Said with WINDOW when it changes, to a peer that honours it
    ("flow"); a new session hears it in HELLO_ACK or HELLO."""
    if w == link._rx_window:
        return
    link._rx_window = w
    if link.status == wire.UP and link._flow:
        control(link, wire.WINDOW, -1 if w is None else w)


def on_window(link, w):
    """WINDOW: the peer's pace (-1: none)."""
    if type(w) is not int:
        return link.count("bad_frames")
    link._tx_window = None if w < 0 else w
    link._wake.set()


def call_frame(link, t, obj, blob=None):
    """Queue a CALL, REPLY or FAIL; a CALL too large raises, a reply too
    large becomes a FAIL the caller sees."""
    b = wire.encode(t, obj, None, blob)
    if too_big(link, len(b), wire.NAMES[t]):
        if t == wire.CALL:
            raise ValueError("request too large for the link (max_len %d)" % link.opts.max_len)
        b = wire.encode(
            wire.FAIL,
            [
                obj[0],
                "failed",
                "reply too large for the link (%d bytes, max %d)" % (len(b), link.opts.max_len),
            ],
        )
    link._calls.append(b)
    link._wake.set()


def next_body(link):
    """The next frame body to send, or None: control first, then the
    snapshot, then calls and data interleaved so neither starves."""
    if link._ctl:
        return link._ctl.pop(0)
    if link.status != wire.UP:
        pump(link)  # woken for an export in the session that just ended (Exports)
        return None
    if link._snap is not None:
        return snap_next(link)
    pump(link)
    if link._calls and (link._credit > 0 or not link._spool.unsent):
        link._credit -= 1
        return link._calls.pop(0)
    link._credit = 4  # up to 4 call frames per data frame under load
    j = link._journal
    b = j.next_frame(link) if j is not None else None  # earlier boots' (journal.py), turn about
    b = b or data_next(link)
    if b is None and j is not None:
        b = j.next_frame(link, True)
    if b is None and link._calls:
        return link._calls.pop(0)
    return b


def data_next(link):
    """The next sequenced frame from the spool (a view into it), or a SKIP
    saying which numbers are gone for good, or None."""
    sp = link._spool
    acking = link._acking
    while True:
        o = sp.peek()
        if o < 0:
            return None
        f = sp.flags_at(o)
        if f & spool.DEAD:
            sp.advance(not acking)
            continue
        seq = sp.seq_at(o)
        if acking and seq != link._tx_next:
            # Numbers spent on losses (or sent and gone, for latest data):
            # said out loud, so the receiver does not ask for them again.
            link._tx_next = seq
            return wire.encode(wire.SKIP, seq)
        w = link._tx_window
        if w is not None and seq >= sp.seq_at(sp.head) + w:
            return None  # w past the oldest unacknowledged: it waits for an ACK
        link._tx_next = seq + 1
        link._t_data = compat.now()
        if f & spool.SENT:
            link.count("retransmitted")
        b = sp.body(o)
        sp.advance(not acking, f & spool.LATEST)
        return b


def pump(link):
    """Move what the export observers hold into the spool, numbered and
    encoded now (so an item waits as bytes, not as an object, and its time
    is the time it left the bus)."""
    t = None
    for e in link._obs:
        o, rule = e[0], e[1]
        while True:
            account_drops(link, e)
            item = o.recv_nowait()
            if item is None:
                break
            if not exportable(link, item.topic, rule, item.origin):
                continue
            if type(item) is not Message and link.status != wire.UP:
                # A retained change with no session up: the next session's
                # snapshot carries the topic's state then. Numbered, it would be
                # dropped at that session's start and its number seen as a gap.
                continue
            if t is None:
                t = compat.ms()
            spool_item(link, item, rule, t)


def spool_item(link, item, rule, ms):
    """Number ``item`` (exported under ``rule``), encode it with the link clock
    ``ms`` and spool it (pump; replay.py for an owner's resend); the owner's
    on_export(seq, item), if set, hears each one spooled."""
    seq = link.tx_seq
    link.tx_seq = seq + 1
    b = encode_item(link, item, rule, seq, None, ms)
    if b is None:
        return
    latest = type(item) is not Message or rule[2] == "latest"
    sp = link._spool
    ev = sp.evicted
    du = sp.dropped_unsent
    if not sp.put(seq, b, spool.LATEST if latest else 0):
        link.count("spool_refused")
    else:
        if sp.evicted != ev:
            # never sent: lost for sure; sent, not yet acknowledged: maybe
            link.count("spool_dropped", sp.dropped_unsent - du)
            link.count("spool_evicted", sp.evicted - ev)
        if link.on_export is not None:
            link.on_export(seq, item)
    if not latest and link._journal is not None and (link._acking or link.status != wire.UP):
        # on flash too: survives a reboot
        link._journal.append(seq, sp.body(sp.last) if sp.last >= 0 else wire.join(b))


def exportable(link, k, rule, origin):
    """True if key ``k``, seen by the observer of ``rule``, goes to the peer."""
    if origin.link_id == link.link_id:  # loop guard: never send back what came from here
        return False
    x = origin.extra
    p = link.peer_node or link.peer  # before a session: the configured peer, if any
    if (
        x
        and p is not None
        and origin.kind == "link"
        and (x.get("src") == p or p in (x.get("via") or ()))
    ):
        link.count("relay_loops")  # the peer already had it: a ring of buses
        return False
    if rules.first(link._exports, k) is not rule:  # a topic goes out under its first rule only
        return False
    return not rules.local(link, k)


def account_drops(link, e):
    d = e[0].dropped()
    lost = d - e[2]
    if lost:
        # Overflowed messages still consume sequence numbers, so the peer
        # sees the loss as a gap instead of never knowing.
        link.tx_seq += lost
        e[2] = d
        link.count("dropped_out", lost)


def encode_item(link, item, rule, seq, t=None, ms=None):
    """The body for a message or retained item under ``rule`` as its parts
    (wire.parts), or None. ``ms``, the link clock when the item left the
    bus, travels last."""
    wt = wire.topic_out(item.topic[len(rule[1]) :])
    if type(item) is Message:
        t = t or wire.PUB
    else:
        t = t or (wire.RET if item.op == "retain" else wire.UNRET)
    o = item.origin
    x = o.extra
    if o.kind == "link":
        # Relayed: the far side learns where it entered (src, src_sid,
        # src_seq, kept from the first hop) and every bus that passed it on (via).
        y = {}
        if x:
            for kk in x:  # dict(x) refuses a dict subclass on MicroPython
                y[kk] = x[kk]
        x = y
        s = x.pop("seq", None)  # this hop's number: the far side sets its own
        if "src" not in x:
            # The first relay: the sender's node, boot and number travel on,
            # so the far side can record the reading under its origin.
            x["src"] = o.peer_node
            x["src_sid"] = o.peer_sid
            if s is not None:
                x["src_seq"] = s
        x["via"] = list(x.get("via") or ()) + [link.node]
    obj = [wt]
    blob = None
    if t != wire.UNRET:
        p = item.payload
        if isinstance(p, (bytes, bytearray)):
            blob = p
            p = None
        obj.append(p)
    if x or ms is not None:
        obj.append(x or None)  # a dict subclass: json encodes it as it is
    if ms is not None:
        obj.append(ms)
    try:
        b = wire.parts(t, obj, seq if t != wire.SYNC else None, blob)
    except (TypeError, ValueError) as e:
        link.count("unencodable")
        link.last_error = "unencodable payload on %s: %s" % (topic.render(item.topic), e)
        return None
    # Too large: dropped here; its sequence number is spent, so the peer
    # counts the loss as a gap.
    return None if too_big(link, wire.size(b), topic.render(item.topic)) else b


class Exports(compat.Event):
    """What the export observers wake (Feed.wake_on): the writer alone while
    it waits for work in a session (it spools what it sends: one task woken
    a reading, not two), else the pump task, which waits on this event (no
    session, or the writer busy sending: what comes meanwhile is spooled,
    not left in the observer's few slots)."""

    def __init__(self, link):
        compat.Event.__init__(self)
        self.link = link

    def set(self):
        k = self.link
        if k._idle and k.status == wire.UP:
            k._wake.set()
        else:
            compat.Event.set(self)


def observe(link, node):
    """Export observers for peer ``node`` (kept while the node is the same):
    from now on what the bus exports is numbered and spooled."""
    if link._obs_node == node:
        return
    for e in link._obs:
        e[0].close()
    src = link.opts.exports
    exports = rules.resolve(src, link.bus, node)
    link._obs = []
    for r, rule in zip(src, exports):
        o = link._conn.observe(rules.subst(r[0], node), queue_len=link.opts.out_queue)
        o.wake_on(link._exported)  # the writer, or the pump, serves every observer
        link._obs.append([o, rule, 0])
    link._exports = exports
    link._obs_node = node
    sp = link._spool
    if sp.n:  # spooled for another node: its topics mean nothing to this one
        link.count("dropped_down", sp.kill_unsent(0))
        sp.ack(link.tx_seq)


def reset(link):
    """The sending side between sessions (Link.__init__, end_session): no
    call frames queued, no snapshot going."""
    link._calls = []
    link._snap = None
    link._snap_i = -1


def start(link, node, win):
    """The sending side of a new session with peer ``node``, whose pace is
    ``win`` (its HELLO's "win", honoured when it takes "flow"): what waits is
    spooled, then either kept for sending again (acknowledged sessions:
    reliable data from the oldest unacknowledged on; latest data, which the
    snapshot replaces, dropped) or dropped (the peer does not acknowledge, as
    in protocol version 1 without the capability); then the snapshot of the
    retained facts, which the peer gets first."""
    link._tx_window = win if link._flow and type(win) is int and win >= 0 else None
    observe(link, node if link.opts.node_rules else None)
    pump(link)
    sp = link._spool
    if link._acking:
        link.count("dropped_down", sp.kill_unsent(spool.LATEST))
        sp.rewind()
        nxt = sp.first_live()
        link._tx_next = link.tx_seq if nxt is None else nxt
    else:
        link.count("dropped_down", sp.kill_unsent(0))
        sp.ack(link.tx_seq)
        link._tx_next = link.tx_seq
    snap = []
    for e in link._obs:
        rule = e[1]
        for m in link.bus._store.query(rule[0], []):
            if exportable(link, m.topic, rule, m.origin):
                snap.append((m, rule))
    link._snap = snap


def snap_next(link):
    i = link._snap_i
    link._snap_i = i + 1
    if i < 0:
        o = {"seq": link._tx_next, "n": len(link._snap)}
        if link.tx_acked:
            o["acked"] = link.tx_acked  # acknowledged: by this peer, or another gateway
        return wire.encode(wire.SYNCSTART, o)
    if i < len(link._snap):
        m, rule = link._snap[i]
        p = encode_item(link, m, rule, None, wire.SYNC)
        return wire.join(p) if p is not None else snap_next(link)
    link._snap = None
    return wire.encode(wire.SYNCEND, {"seq": link._tx_next, "n": i})


def on_ack(link, n):
    """ACK: every number below ``n`` is durable at the peer; free it."""
    if type(n) is not int:
        return link.count("bad_frames")
    k = link._spool.ack(n)
    if n > link.tx_acked:
        link.tx_acked = n
    if k:
        link.count("acked", k)
        link._t_acked = compat.now()
        link._rto = RTO
    if link._journal is not None:
        link._journal.ack(n)
    if link._tx_next < n:
        link._tx_next = n
    if link._tx_window is not None:
        link._wake.set()  # the window moved with the ACK


def on_resend(link, n):
    """RESEND: the peer lacks ``n``; send again from there."""
    if type(n) is not int:
        return link.count("bad_frames")
    link.count("resends")
    link._spool.rewind(n)
    link._tx_next = n
    link._wake.set()


def tail_timeout(link, now):
    """Send again what was sent and never acknowledged when nothing was sent
    after it for ``_rto`` s: a loss in the last frames before a pause, which
    no later frame reveals (mid-stream the receiver sees the hole and asks,
    RESEND). Not while data flows, however late the ACKs (a receiver behind
    on its log is not sent copies), and the wait doubles while the peer
    stays silent, as TCP's retransmission timer."""
    sp = link._spool
    rto = link._rto
    if (
        sp.n > sp.unsent
        and not sp.unsent
        and now - link._t_data > rto
        and now - link._t_acked > rto
    ):
        link._t_acked = now
        link._rto = min(rto * 2, 16.0)
        link.count("ack_timeouts")
        sp.rewind()
        link._tx_next = sp.seq_at(sp.cur)
        link._wake.set()
