"""Earlier boots' readings arriving (HIST, docs/protocol.md 14): each one
published under that boot's own provenance (its sid, the generation recorded
for it, its sequence number, its clock), deduplicated and acknowledged per
boot. Imported when the first such frame arrives."""

from .. import compat, errors
from . import rules, tx, wire

OLD = 4  # earlier boots remembered per link (state["old"])


def _old(link, sid):
    """[sid, next expected, generation] of an earlier peer boot, kept in
    link.state["old"] (the last OLD ones)."""
    olds = link.state.get("old")
    if olds is None:
        olds = link.state["old"] = []
    for o in olds:
        if o[0] == sid:
            return o
    o = [sid, None, None]
    olds.append(o)
    del olds[:-OLD]
    return o


def _rx(link):
    """[session, {sid: acknowledged}, {sid: connection}, {sid: (asked, t)}]."""
    h = link._hist
    if h is None:
        h = link._hist = [link._session, {}, {}, {}]
    elif h[0] != link._session:  # a new session: acknowledgements said again
        h[0] = link._session
        h[1] = {}
        h[3] = {}
    return h


def _imp(link, h, o):
    """The connection publishing for earlier boot o (derived, cached)."""
    c = h[2].get(o[0])
    if c is None:
        if len(h[2]) >= OLD:
            for k in list(h[2]):
                h[2].pop(k).disconnect()
                break
        c = h[2][o[0]] = link._conn.derive(
            origin_factory={
                "kind": "link",
                "link_id": link.link_id,
                "peer_node": link.peer_node,
                "peer_sid": o[0],
                "generation": o[2],
            }
        )
    return c


def on_frame(link, t, obj, blob):
    """HIST [sid, seq, wall] + the original body, or SKIP [n, sid]; ACK or
    RESEND [n, sid] here mean a journal we do not have."""
    if t != wire.HIST and t != wire.SKIP:
        return link.count("unexpected")
    h = _rx(link)
    if t == wire.SKIP:
        return _skip(link, obj[0], obj[1])
    sid, seq, wall = obj[0], obj[1], obj[2]
    if type(sid) is not str or type(seq) is not int or blob is None or sid == link.peer_sid:
        return link.count("bad_frames")
    o = _old(link, sid)
    exp = o[1]
    if exp is not None and seq < exp:
        return link.count("duplicates")
    if exp is not None and seq > exp:  # lost in flight: asked again (once a second)
        link.count("out_of_order")
        a = h[3].get(sid)
        now = compat.now()
        if a is None or a[0] != exp or now - a[1] >= 1.0:
            h[3][sid] = (exp, now)
            link.count("resends_asked")
            tx.control(link, wire.RESEND, [exp, sid])
        return
    t, _, body, b = wire.decode(blob)
    if t != wire.PUB and t != wire.RET and t != wire.UNRET:
        return link.count("bad_frames")
    if link.hold is not None and link.hold(link, len(blob)):
        return link._hold_back(sid, seq if exp is None else exp)
    o[1] = seq + 1
    k = rules.map_in(link, body[0], link._imports)
    if k is None:
        return
    i = 1 if t == wire.UNRET else 2
    x = body[i] if len(body) > i and type(body[i]) is dict else {}
    x["seq"] = seq
    if "clk" in x:
        del x["clk"]  # the receiver's (rx.extra_in), never the sender's
    ms = body[i + 1] if len(body) > i + 1 else None
    if type(ms) is int and type(wall) is int and "ts" not in x:
        x["ts"] = (ms + wall) / 1000
    x["late"] = True
    imp = _imp(link, h, o)
    try:
        if t == wire.UNRET:
            imp.unretain(k, x)
        elif t == wire.PUB:
            imp.publish(k, b if b is not None else body[1], x)
        else:
            imp.retain(k, b if b is not None else body[1], x)
        link.count("imported")
        link.count("hist_imported")
    except errors.Denied as e:
        link.count("denied")
        link.last_error = str(e)


def _skip(link, n, sid):
    """SKIP [n, sid]: earlier boot sid's next number is n; ours below it are lost."""
    if type(n) is not int or type(sid) is not str or sid == link.peer_sid:
        return link.count("bad_frames")
    o = _old(link, sid)
    if o[1] is not None and n > o[1]:
        link._gap(o[1], n - 1, "evicted", sid)
    if o[1] is None or n > o[1]:
        o[1] = n


def mark(link):
    """Link.rx_mark() once earlier boots' frames came: theirs third."""
    return (
        link.peer_sid,
        link.state.get("rx_next"),
        tuple([(o[0], o[1]) for o in link.state.get("old", ())]),
    )


def acknowledge(link, marks):
    """ACK [n, sid] for each earlier boot whose mark moved this session."""
    acked = _rx(link)[1]
    for sid, n in marks:
        if n is not None and n > acked.get(sid, 1):
            acked[sid] = n
            tx.control(link, wire.ACK, [n, sid])
