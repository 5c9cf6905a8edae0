"""The link's sending side: control and call queues, export observers,
encoding, sequence numbers spent on losses, and the retained snapshot."""
from .. import topic
from ..values import Message
from . import rules, wire


def too_big(link, b, what):
    """True (counted, said in last_error) if body ``b`` exceeds max_len."""
    if len(b) <= link.max_len:
        return False
    link.count("oversize_out")
    link.last_error = "%s of %d bytes exceeds max_len %d: not sent" % (what, len(b), link.max_len)
    return True


def control(link, t, obj):
    """Queue a control frame (sent before anything else)."""
    b = wire.encode(t, obj)
    if not too_big(link, b, wire.NAMES[t]):
        link._ctl.append(b)
        link._wake.set()


def call_frame(link, t, obj, blob=None):
    """Queue a CALL, REPLY or FAIL; a CALL too large raises, a reply too
    large becomes a FAIL the caller sees."""
    b = wire.encode(t, obj, None, blob)
    if too_big(link, b, wire.NAMES[t]):
        if t == wire.CALL:
            raise ValueError("request too large for the link (max_len %d)" % link.max_len)
        b = wire.encode(wire.FAIL, [obj[0], "failed", "reply too large for the link (%d bytes, max %d)"
                                    % (len(b), link.max_len)])
    link._calls.append(b)
    link._wake.set()


def next_body(link):
    """The next frame body to send, or None: control first, then the
    snapshot, then calls and data interleaved so neither starves."""
    if link._ctl:
        return link._ctl.pop(0)
    if link.status != wire.UP:
        return None
    if link._snap is not None:
        return snap_next(link)
    obs = link._obs
    if link._calls:
        ready = False    # data waiting: only asked once the credit is spent
        if link._credit <= 0:
            for o, _ in obs:
                if o._n:
                    ready = True
                    break
        if not ready:
            link._credit -= 1
            return link._calls.pop(0)
    link._credit = 4  # up to 4 call frames per data frame under load
    # The next exportable item, the observers served in turn.
    n = len(obs)
    for _ in range(n):
        i = link._rr
        link._rr = (i + 1) % n
        o, rule = obs[i]
        while True:
            account_drops(link, i)
            item = o.recv_nowait()
            if item is None:
                break
            if not exportable(link, item.topic, rule, item.origin):
                continue
            seq = link._tx_seq
            link._tx_seq = seq + 1
            b = encode_item(link, item, rule, seq)
            if b is not None:
                return b
    if link._calls:
        return link._calls.pop(0)
    return None


def exportable(link, k, rule, origin):
    """True if key ``k``, seen by the observer of ``rule``, goes to the peer."""
    if origin.link_id == link.link_id:   # loop guard: never send back what came from here
        return False
    if rules.first(link._exports, k) is not rule:  # a topic goes out under its first rule only
        return False
    return not rules.local(link, k)


def account_drops(link, i):
    d = link._obs[i][0].dropped()
    lost = d - link._obs_drops[i]
    if lost:
        # Overflowed messages still consume sequence numbers, so the peer
        # sees the loss as a gap instead of never knowing.
        link._tx_seq += lost
        link._obs_drops[i] = d
        link.count("dropped_out", lost)


def encode_item(link, item, rule, seq, t=None):
    """The body for a message or retained item under ``rule``, or None."""
    wt = wire.topic_out(item.topic[len(rule[1]):])
    if type(item) is Message:
        t = t or wire.PUB
    else:
        t = t or (wire.RET if item.op == "retain" else wire.UNRET)
    x = item.origin.extra
    obj = [wt]
    blob = None
    if t != wire.UNRET:
        p = item.payload
        if isinstance(p, (bytes, bytearray)):
            blob = p
            p = None
        obj.append(p)
    if x:
        obj.append(x)   # a dict subclass: json encodes it as it is
    try:
        b = wire.encode(t, obj, seq if t != wire.SYNC else None, blob)
    except (TypeError, ValueError) as e:
        link.count("unencodable")
        link.last_error = "unencodable payload on %s: %s" % (topic.render(item.topic), e)
        return None
    # Too large: dropped here; its sequence number is spent, so the peer
    # counts the loss as a gap.
    return None if too_big(link, b, topic.render(item.topic)) else b


def start(link, node):
    """The sending side of a new session with peer ``node``: observers on
    the export patterns (kept if the node is unchanged), then the snapshot
    of the retained facts the peer gets first."""
    if link._obs_node != node:
        for o, _ in link._obs:
            o.close()
        src = link._rule_src[0]
        exports = rules.resolve(src, link.bus, node)
        link._obs = []
        for r, rule in zip(src, exports):
            o = link._conn.observe(rules.subst(r[0], node), queue_len=link.out_queue)
            o.wake_on(link._wake)   # the writer serves every observer
            link._obs.append((o, rule))
        link._obs_drops = [0] * len(link._obs)
        link._exports = exports
        link._obs_node = node
    # Events queued before the snapshot are older than it: drop them
    # (they still consume sequence numbers, so the loss stays visible).
    for i, (o, rule) in enumerate(link._obs):
        account_drops(link, i)
        while True:
            item = o.recv_nowait()
            if item is None:
                break
            if exportable(link, item.topic, rule, item.origin):
                link._tx_seq += 1
                link.count("dropped_down")
    snap = []
    for o, rule in link._obs:
        for m in link.bus._store.query(rule[0], []):
            if exportable(link, m.topic, rule, m.origin):
                snap.append((m, rule))
    link._snap = snap
    link._snap_i = -1


def snap_next(link):
    i = link._snap_i
    link._snap_i = i + 1
    if i < 0:
        return wire.encode(wire.SYNCSTART, {"seq": link._tx_seq, "n": len(link._snap)})
    if i < len(link._snap):
        m, rule = link._snap[i]
        return encode_item(link, m, rule, None, wire.SYNC) or snap_next(link)
    link._snap = None
    return wire.encode(wire.SYNCEND, {"seq": link._tx_seq, "n": i})
