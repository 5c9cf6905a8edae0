"""Link: joins a bus to a peer bus over a transport (docs/protocol.md).

One Link object lives as long as its node's boot (its ``sid``); ``run()``
drives one transport connection at a time and may be called again after the
transport ends. The session logic is transport-free: ``run()`` feeds it frame
bodies and sends the bodies it produces.
"""
from .. import compat as C, errors as E, topic as T
from ..values import Message
from . import wire as W

DOWN = "down"
HELLO_SENT = "hello_sent"
ACK_SENT = "ack_sent"
UP = "up"

_CALL_FAIL = ("failed", "closed")  # FAIL codes the caller sees with the reason


def _subst(x, node):
    return x.replace("{node}", node) if node is not None and type(x) is str else x


def _rules(rules, bus, node):
    """[(pattern key, prefix key)], '{node}' replaced by the peer's node id."""
    out = []
    for pat, prefix in rules:
        pat = _subst(pat, node)
        prefix = _subst(prefix, node)
        pk = T.pattern(pat, bus.s_wild, bus.m_wild)[1]
        out.append((pk, T.key(prefix) if prefix else ()))
    return out


def _first(rules, k):
    for r in rules:
        if T.matches(r[0], k):
            return r
    return None


class Link:
    """A federation link for ``bus``; see docs/protocol.md for the rules.

    ``exports``/``imports``: data rules, lists of (pattern, prefix): exported
    local topics lose ``prefix`` on the wire; imported wire topics gain it.
    ``export_calls``/``import_calls``: the same for endpoints offered to the
    peer and the peer's endpoints proxied here. ``{node}`` in a rule stands
    for the peer's node id. ``key`` is bytes, a callable(node) -> bytes|None,
    or None for an unauthenticated link (both sides must agree).
    ``principal`` is who the link acts as on this bus (for the authoriser);
    ``state`` holds the peer's generation and may be persisted by the owner.
    """

    def __init__(self, bus, node, key=None, role="initiator", link_id=None, peer=None,
                 exports=(), imports=(), export_calls=(), import_calls=(),
                 local_only=("link/#", "local/#"), heartbeat=5.0, handshake_timeout=5.0,
                 max_pending=8, max_sync=512, out_queue=32, status=True, sid=None,
                 state=None, principal=None, max_len=1024):
        if role not in ("initiator", "responder"):
            raise ValueError("role must be 'initiator' or 'responder'")
        self.bus = bus
        self.node = node
        self.role = role
        self.link_id = link_id or ("%s:%s" % (node, peer or role))
        self.peer = peer
        self.sid = sid or W.nonce()[:16]
        self._key = key
        self._rule_src = (exports, imports, export_calls, import_calls)
        self._local_only = [T.pattern(p, bus.s_wild, bus.m_wild)[1] for p in local_only]
        self.heartbeat = heartbeat
        self.handshake_timeout = handshake_timeout
        self.max_pending = max_pending
        self.max_sync = max_sync
        self.out_queue = out_queue
        self.max_len = max_len    # the largest frame body; the transport's limit too
        # Peer continuity across sessions (and across restarts, if the caller
        # persists it): generation and the next sequence number expected.
        self.state = state if state is not None else {}
        # Everything the link does on this bus is done as principal (the
        # authoriser's subject): by default ("link", link_id).
        self._conn = bus.connect(principal=principal if principal is not None
                                 else ("link", self.link_id))
        self._status_on = status
        self._imp = None          # derived connection for what arrives, per session
        self._obs = []            # [(observer, rule)] for exports, per peer node
        self._obs_node = False
        self._obs_drops = []
        self._rr = 0
        self._tx_seq = 1
        self._ctl = []
        self._calls = []
        self._snap = None         # messages of the snapshot being sent
        self._snap_i = -1
        self._rx_sync = None      # snapshot being received
        self._rx_overflow = False
        self._pending = {}        # call id -> Request, calls we forwarded
        self._next_cid = 1
        self._served = 0
        self._proxies = {}        # wire topic -> Endpoint bound here for the peer
        self._routes_sent = None
        self._recent = []         # initiator nonces seen (replay guard)
        self._tasks = []
        self._wake = C.Event()
        self._freed = C.Event()
        self._transport = None
        self.counters = {}
        self.last_error = None
        self.peer_node = None
        self.peer_sid = None
        self.generation = None
        self._session = 0
        self._set_state(DOWN)

    # -- bookkeeping ---------------------------------------------------
    @property
    def tx_seq(self):
        """The sequence number the next sequenced frame will carry."""
        return self._tx_seq

    def count(self, name, n=1):
        self.counters[name] = self.counters.get(name, 0) + n
        self._dirty = True

    def _set_state(self, s):
        self.status = s
        self._t_state = C.now()
        self._dirty = True

    def _error(self, code, msg, tell=True):
        self.last_error = "%s: %s" % (code, msg)
        self.count("errors")
        if tell and self.status != DOWN:
            self._control(W.ERROR, {"code": code, "msg": msg})

    def status_topic(self):
        return ("link", self.link_id)

    def stats(self):
        """A snapshot of the link's state and counters (also retained on the bus
        at ``link/<link_id>``)."""
        s = {"state": self.status, "node": self.node, "sid": self.sid, "role": self.role,
             "peer": self.peer_node, "peer_sid": self.peer_sid,
             "generation": self.generation, "tx_seq": self._tx_seq,
             "rx_next": self.state.get("rx_next"), "pending_calls": len(self._pending),
             "proxies": len(self._proxies), "last_error": self.last_error,
             "counters": dict(self.counters)}
        t = self._transport
        if t is not None and hasattr(t, "stats"):
            s["transport"] = t.stats()
        return s

    def _publish_status(self):
        self._dirty = False
        if self._status_on and not self._conn.is_disconnected():
            self._conn.retain(self.status_topic(), self.stats())

    # -- outbound queues -------------------------------------------------
    def _too_big(self, b, what):
        if len(b) <= self.max_len:
            return False
        self.count("oversize_out")
        self.last_error = "%s of %d bytes exceeds max_len %d: not sent" % (what, len(b), self.max_len)
        return True

    def _control(self, t, obj):
        b = W.encode(t, obj)
        if not self._too_big(b, W.NAMES[t]):
            self._ctl.append(b)
            self._wake.set()

    def _call_frame(self, t, obj, blob=None):
        b = W.encode(t, obj, None, blob)
        if self._too_big(b, W.NAMES[t]):
            if t == W.CALL:
                raise ValueError("request too large for the link (max_len %d)" % self.max_len)
            b = W.encode(W.FAIL, [obj[0], "failed", "reply too large for the link (%d bytes, max %d)"
                                  % (len(b), self.max_len)])
        self._calls.append(b)
        self._wake.set()

    def next_body(self):
        """The next frame body to send, or None: control first, then the
        snapshot, then calls and data interleaved so neither starves."""
        if self._ctl:
            return self._ctl.pop(0)
        if self.status != UP:
            return None
        if self._snap is not None:
            return self._snap_next()
        if self._calls and (self._credit > 0 or not self._data_ready()):
            self._credit -= 1
            return self._calls.pop(0)
        self._credit = 4  # up to 4 call frames per data frame under load
        b = self._pull()
        if b is None and self._calls:
            return self._calls.pop(0)
        return b

    _credit = 4

    def _data_ready(self):
        for o, _ in self._obs:
            if o._n:
                return True
        return False

    # -- export side ---------------------------------------------------
    def _ensure_observers(self, node):
        if self._obs_node == node:
            return
        for o, _ in self._obs:
            o.close()
        exports = _rules(self._rule_src[0], self.bus, node)
        self._obs = []
        for r, rule in zip(self._rule_src[0], exports):
            o = self._conn.observe(_subst(r[0], node), queue_len=self.out_queue)
            o.wake_on(self._wake)   # the writer serves every observer
            self._obs.append((o, rule))
        self._obs_drops = [0] * len(self._obs)
        self._exports = exports
        self._obs_node = node

    def _exportable(self, k, rule, origin):
        if origin.link_id == self.link_id:   # loop guard: never send back what came from here
            return False
        if _first(self._exports, k) is not rule:  # a topic goes out under its first rule only
            return False
        for lp in self._local_only:
            if T.matches(lp, k):
                return False
        return True

    def _account_drops(self, i):
        d = self._obs[i][0]._dropped
        lost = d - self._obs_drops[i]
        if lost:
            # Overflowed messages still consume sequence numbers, so the peer
            # sees the loss as a gap instead of never knowing.
            self._tx_seq += lost
            self._obs_drops[i] = d
            self.count("dropped_out", lost)

    def _pull(self):
        """Encode the next exportable item from the observers, or None."""
        n = len(self._obs)
        for _ in range(n):
            i = self._rr
            self._rr = (i + 1) % n
            o, rule = self._obs[i]
            while True:
                self._account_drops(i)
                item = o.recv_nowait()
                if item is None:
                    break
                k = item.topic
                if not self._exportable(k, rule, item.origin):
                    continue
                seq = self._tx_seq
                self._tx_seq = seq + 1
                b = self._encode_item(item, rule, seq)
                if b is not None:
                    return b
        return None

    def _encode_item(self, item, rule, seq, t=None):
        wt = W.topic_out(item.topic[len(rule[1]):])
        if type(item) is Message:
            t = t or W.PUB
        else:
            t = t or (W.RET if item.op == "retain" else W.UNRET)
        x = item.origin.extra
        obj = [wt]
        blob = None
        if t != W.UNRET:
            p = item.payload
            if isinstance(p, (bytes, bytearray)):
                blob = p
                p = None
            obj.append(p)
        if x:
            obj.append(x)   # a dict subclass: json encodes it as it is
        try:
            b = W.encode(t, obj, seq if t != W.SYNC else None, blob)
        except (TypeError, ValueError) as e:
            self.count("unencodable")
            self.last_error = "unencodable payload on %s: %s" % (T.render(item.topic), e)
            return None
        # Too large: dropped here; its sequence number is spent, so the peer
        # counts the loss as a gap.
        return None if self._too_big(b, T.render(item.topic)) else b

    def _start_snapshot(self):
        # Events queued before the snapshot are older than it: drop them
        # (they still consume sequence numbers, so the loss stays visible).
        for i, (o, rule) in enumerate(self._obs):
            self._account_drops(i)
            while True:
                item = o.recv_nowait()
                if item is None:
                    break
                if self._exportable(item.topic, rule, item.origin):
                    self._tx_seq += 1
                    self.count("dropped_down")
        snap = []
        for o, rule in self._obs:
            for m in self.bus._store.query(rule[0], []):
                if self._exportable(m.topic, rule, m.origin):
                    snap.append((m, rule))
        self._snap = snap
        self._snap_i = -1

    def _snap_next(self):
        i = self._snap_i
        self._snap_i = i + 1
        if i < 0:
            return W.encode(W.SYNCSTART, {"seq": self._tx_seq, "n": len(self._snap)})
        if i < len(self._snap):
            m, rule = self._snap[i]
            return self._encode_item(m, rule, None, W.SYNC) or self._snap_next()
        self._snap = None
        return W.encode(W.SYNCEND, {"seq": self._tx_seq, "n": i})

    # -- session ---------------------------------------------------------
    def _key_for(self, node):
        k = self._key
        if callable(k):
            k = k(node)
        if type(k) is str:
            k = k.encode()
        return k

    def _hello(self):
        self._mine = {"v": W.VERSION, "node": self.node, "sid": self.sid, "nonce": W.nonce(),
                      "hb": int(self.heartbeat * 1000), "auth": self._key is not None}
        self._control(W.HELLO, self._mine)
        self._set_state(HELLO_SENT)

    def _session_up(self, hello, ack):
        """Both sides proved the key: start the session."""
        peer = ack if self.role == "initiator" else hello
        sid = peer["sid"]
        st = self.state
        if st.get("peer_sid") != sid:
            st["generation"] = st.get("generation", 0) + 1
            st["peer_sid"] = sid
            st["rx_next"] = None
        self.peer_node = peer["node"]
        self.peer_sid = sid
        self.generation = st["generation"]
        self._session += 1
        self.count("sessions")
        self.last_error = None
        imp = self._imp
        if imp is not None:
            imp.disconnect()
        self._imp = self._conn.derive(origin_factory={
            "kind": "link", "link_id": self.link_id, "peer_node": self.peer_node,
            "peer_sid": sid, "generation": self.generation})
        rs = self._rule_src
        self._imports = _rules(rs[1], self.bus, self.peer_node)
        self._export_calls = _rules(rs[2], self.bus, self.peer_node)
        self._import_calls = _rules(rs[3], self.bus, self.peer_node)
        self._ensure_observers(self.peer_node)
        self._set_state(UP)
        self._backoff = self.handshake_timeout
        self._start_snapshot()
        self._routes_sent = None
        self._send_routes()

    def _session_down(self, why):
        """End the session: pending calls fail, proxies go, state is kept."""
        was = self.status
        self._set_state(DOWN)
        self._snap = None
        self._rx_sync = None
        self._calls = []
        for req in list(self._pending.values()):
            req.abandon("session_reset")
        self._pending = {}
        self._freed.set()
        for ep in self._proxies.values():
            ep.unbind()
        self._proxies = {}
        if was == UP:
            self.count("session_ends")
            self.last_error = self.last_error or why

    def feed(self, body):
        """Handle one received frame body (never raises)."""
        self._t_rx = C.now()
        self.count("frames_in")
        try:
            t, seq, obj, blob = W.decode(body)
            self._handle(t, seq, obj, blob)
        except W.WireError as e:
            self.count("bad_frames")
            self.last_error = "bad frame: %s" % e
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            self.count("bad_frames")
            self.last_error = "bad %s: %s" % (W.NAMES[t] if 0 < t < len(W.NAMES) else t, e)
        except MemoryError:   # a small board under pressure: this frame is lost, not the link
            self.count("memory_errors")
            self.last_error = "out of memory handling a frame"

    def _handle(self, t, seq, obj, blob):
        if t == W.HELLO:
            return self._on_hello(obj)
        if t == W.HELLO_ACK:
            return self._on_ack(obj)
        if t == W.AUTH:
            return self._on_auth(obj)
        if t == W.ERROR:
            self.count("errors_in")
            code = obj.get("code")
            self.last_error = "peer: %s: %s" % (code, obj.get("msg"))
            if code == "auth_failed":
                self.count("auth_failures")
            self._session_down("peer error")
            if self.role == "initiator":
                self._backoff = min(self._backoff * 2, 60)
            return
        if t == W.BYE:
            self._session_down("peer closed")
            return
        if self.status != UP:
            self.count("unauthenticated")
            return
        if t == W.PING:
            return self._control(W.PONG, obj)
        if t == W.PONG:
            self.rtt = C.now() - obj / 1000 if type(obj) in (int, float) else None
            return
        if t == W.PUB or t == W.RET or t == W.UNRET:
            return self._on_data(t, seq, obj, blob)
        if t == W.SYNCSTART:
            return self._on_syncstart(obj)
        if t == W.SYNC:
            return self._on_sync(obj, blob)
        if t == W.SYNCEND:
            return self._on_syncend()
        if t == W.CALL:
            return self._on_call(obj, blob)
        if t == W.REPLY or t == W.FAIL:
            return self._on_result(t, obj, blob)
        if t == W.ROUTES:
            return self._on_routes(obj)
        self.count("unknown_type")

    def _check_hello(self, h):
        if h.get("v") != W.VERSION:
            self._error("version", "protocol version %r not supported (want %d)" % (h.get("v"), W.VERSION))
            return None
        for f in ("node", "sid", "nonce"):
            if type(h.get(f)) is not str or not h[f] or len(h[f]) > 64:
                self._error("protocol", "bad %s in hello" % f)
                return None
        return h

    def _on_hello(self, h):
        if self.role != "responder":
            return self.count("unexpected")
        if self.status == UP:
            self._session_down("new hello")
        # Reply on the control queue even though we are 'down'.
        self._set_state(ACK_SENT)
        if self._check_hello(h) is None:
            return self._session_down("bad hello")
        if self.peer is not None and h["node"] != self.peer:
            self.count("auth_failures")
            self._error("unknown_node", "this link serves node %r, not %r" % (self.peer, h["node"]))
            return self._session_down("unknown node")
        if h["nonce"] in self._recent:
            self.count("replays")
            self._error("replay", "hello nonce already used")
            return self._session_down("replayed hello")
        self._recent = (self._recent + [h["nonce"]])[-16:]
        key = self._key_for(h["node"])
        if (key is None) != (not h.get("auth")):
            self.count("auth_failures")
            self._error("auth_failed", "authentication required on one side only")
            return self._session_down("auth mismatch")
        self._theirs = h
        self._mine = {"v": W.VERSION, "node": self.node, "sid": self.sid, "nonce": W.nonce(),
                      "hb": int(self.heartbeat * 1000), "auth": key is not None}
        ack = dict(self._mine)
        if key is not None:
            ack["proof"] = W.proof(key, "R", h, self._mine)
        self._control(W.HELLO_ACK, ack)

    def _on_ack(self, a):
        if self.role != "initiator" or self.status != HELLO_SENT:
            return self.count("unexpected")
        if self._check_hello(a) is None:
            return self._session_down("bad hello_ack")
        key = self._key_for(a["node"])
        if key is not None:
            p = a.get("proof")
            if type(p) is not str or not W.same(p.encode(), W.proof(key, "R", self._mine, a).encode()):
                self.count("auth_failures")
                self._error("auth_failed", "the peer does not know this link's key")
                self._session_down("auth failed")
                self._backoff = min(self._backoff * 2, 60)
                return
            self._control(W.AUTH, {"proof": W.proof(key, "I", self._mine, a)})
        elif a.get("auth"):
            self.count("auth_failures")
            self._error("auth_failed", "authentication required on one side only")
            return self._session_down("auth mismatch")
        else:
            self._control(W.AUTH, {})
        self._session_up(self._mine, a)

    def _on_auth(self, a):
        if self.role != "responder" or self.status != ACK_SENT:
            return self.count("unexpected")
        h = self._theirs
        key = self._key_for(h["node"])
        if key is not None:
            p = a.get("proof")
            if type(p) is not str or not W.same(p.encode(), W.proof(key, "I", h, self._mine).encode()):
                self.count("auth_failures")
                self._error("auth_failed", "the peer does not know this link's key")
                return self._session_down("auth failed")
        self._session_up(h, self._mine)

    # -- import side ---------------------------------------------------
    def _map_in(self, wt, rules):
        k = W.topic_in(wt)
        for t in k:
            if (t == self.bus.s_wild or t == self.bus.m_wild) and type(t) is str:
                self.count("refused")
                return None
        r = _first(rules, k)
        if r is None:
            self.count("refused")
            self.last_error = "refused topic %s" % T.render(k)
            return None
        return r[1] + k

    def _seq_in(self, s16):
        st = self.state
        exp = st.get("rx_next")
        if exp is None:       # first sequenced frame of this peer boot
            exp = s16
        d = (s16 - exp) & 0xFFFF
        if d >= 0x8000:
            self.count("duplicates")
            return None
        if d:
            self.count("gaps", d)
            self.count("gap_events")
            self.last_gap = (exp, exp + d - 1)
        full = exp + d
        st["rx_next"] = full + 1
        return full

    def _extra_in(self, obj, i, seq):
        x = obj[i] if len(obj) > i and type(obj[i]) is dict else {}
        if seq is not None:
            x["seq"] = seq   # ours: the sender cannot choose what is recorded here
        elif "seq" in x:
            del x["seq"]     # an unsequenced frame (SYNC) has none: never the sender's
        return x or None

    def _on_data(self, t, s16, obj, blob):
        if s16 is None:
            return self.count("bad_frames")
        full = self._seq_in(s16)
        if full is None:
            return
        k = self._map_in(obj[0], self._imports)
        if k is None:
            return
        try:
            if t == W.UNRET:
                self._imp.unretain(k, self._extra_in(obj, 1, full))
            else:
                p = blob if blob is not None else obj[1]
                x = self._extra_in(obj, 2, full)
                if t == W.PUB:
                    self._imp.publish(k, p, x)
                else:
                    self._imp.retain(k, p, x)
            self.count("imported")
        except E.Denied as e:
            self.count("denied")
            self.last_error = str(e)

    def _on_syncstart(self, obj):
        st = self.state
        nxt = obj.get("seq")
        if type(nxt) is int:
            exp = st.get("rx_next")
            if exp is not None and nxt > exp:   # lost while the link was down
                self.count("gaps", nxt - exp)
                self.count("gap_events")
                self.last_gap = (exp, nxt - 1)
            st["rx_next"] = nxt
        self._rx_sync = {}
        self._rx_overflow = False

    def _on_sync(self, obj, blob):
        buf = self._rx_sync
        if buf is None:
            return self.count("unexpected")
        if len(buf) >= self.max_sync:
            self._rx_overflow = True
            return self.count("sync_overflow")
        k = self._map_in(obj[0], self._imports)
        if k is not None:
            buf[k] = (blob if blob is not None else obj[1], self._extra_in(obj, 2, None))

    def _on_syncend(self):
        buf = self._rx_sync
        if buf is None:
            return self.count("unexpected")
        self._rx_sync = None
        store = self.bus._store
        # Replace, then remove: a view never sees a fact missing between its
        # old and new value, and facts the peer no longer has go away.
        for k, (p, x) in buf.items():
            cur = store.get(k)
            o = cur.origin if cur is not None else None
            if o is not None and o.link_id == self.link_id and o.peer_sid == self.peer_sid \
                    and cur.payload == p:
                continue
            try:
                self._imp.retain(k, p, x)
            except E.Denied as e:
                self.count("denied")
                self.last_error = str(e)
        if not self._rx_overflow:  # only a complete snapshot says what vanished
            for pk, prefix in self._imports:
                for m in store.query(prefix + pk, []):
                    if m.origin.link_id == self.link_id and m.topic not in buf:
                        self._imp.unretain(m.topic)
        self.count("syncs")

    # -- calls -----------------------------------------------------------
    def _routes(self):
        out = []
        for k, ep in self.bus._eps.items():
            if ep._conn is self._conn:   # our own proxies: never offered back
                continue
            r = _first(self._export_calls, k)
            if r is not None and not any(T.matches(lp, k) for lp in self._local_only):
                out.append(W.topic_out(k[len(r[1]):]))
        out.sort(key=str)
        return out

    def _send_routes(self):
        r = self._routes()
        if r != self._routes_sent:
            self._routes_sent = r
            self._control(W.ROUTES, r)

    def _on_routes(self, obj):
        want = {}
        for wt in obj:
            k = self._map_in(wt, self._import_calls)
            if k is not None:
                want[k] = wt
        for k in list(self._proxies):
            if k not in want:
                self._proxies.pop(k).unbind()
        for k, wt in want.items():
            if k in self._proxies:
                continue
            try:
                ep = self._conn.bind(k, queue_len=self.max_pending)
            except ValueError:   # bound locally already: the local owner wins
                self.count("route_conflicts")
                continue
            self._proxies[k] = ep
            self._spawn(self._proxy(ep, wt))

    def _spawn(self, coro):
        t = C.asyncio.create_task(coro)
        self._tasks = [x for x in self._tasks if not x.done()] + [t]
        return t

    async def _proxy(self, ep, wt):
        """Forward requests on a proxy endpoint to the peer."""
        while True:
            while len(self._pending) >= self.max_pending and ep.why() is None:
                # Leaving requests queued makes further callers see Full at once.
                self._freed.clear()
                await self._freed.wait()
            req = await ep.recv()
            if req is None:
                return
            if self.status != UP:
                req.abandon("link_down")
                continue
            ttl = None
            if req.deadline is not None:
                ttl = int((req.deadline - C.now()) * 1000)
                if ttl <= 0:
                    req.abandon("timeout")
                    continue
            cid = self._next_cid
            self._next_cid = cid + 1
            p = req.payload
            blob = None
            if isinstance(p, (bytes, bytearray)):
                blob, p = p, None
            x = req.origin.extra
            try:
                self._call_frame(W.CALL, [cid, wt, p, ttl, x or None], blob)
            except (TypeError, ValueError) as e:
                req.fail("unencodable: %s" % e)
                continue
            self._pending[cid] = req
            self.count("calls_out")

    def _on_result(self, t, obj, blob):
        req = self._pending.pop(obj[0], None)
        self._freed.set()
        if req is None:
            return self.count("late_replies")
        if t == W.REPLY:
            req.reply(blob if blob is not None else obj[1])
        elif obj[1] == "timeout" and req.deadline is not None:
            pass  # the peer ran out of our own deadline: the caller sees Timeout itself
        elif obj[1] == "failed":
            req.fail(obj[2])
        else:
            req.abandon(obj[2] if obj[1] == "closed" else obj[1])

    def _on_call(self, obj, blob):
        cid = obj[0]
        if self._served >= self.max_pending:
            self.count("busy")
            return self._call_frame(W.FAIL, [cid, "busy", None])
        k = W.topic_in(obj[1])
        r = None
        wild = False
        for t in k:          # a call names one concrete endpoint: no wildcards
            if (t == self.bus.s_wild or t == self.bus.m_wild) and type(t) is str:
                wild = True
        for ec in self._export_calls:
            if not wild and T.matches(ec[0], ec[1] + k):
                r = ec
                break
        if r is None:
            self.count("refused")
            return self._call_frame(W.FAIL, [cid, "no_route", None])
        self._served += 1
        self.count("calls_in")
        ttl = obj[3]
        x = obj[4] if len(obj) > 4 and type(obj[4]) is dict else None
        self._spawn(self._serve(self._session, cid, r[1] + k,
                                blob if blob is not None else obj[2], ttl, x))

    async def _serve(self, session, cid, k, payload, ttl, x):
        res = None
        try:
            v = await self._imp.call(k, payload, timeout=None if ttl is None else ttl / 1000,
                                     extra=x)
            blob = None
            if isinstance(v, (bytes, bytearray)):
                blob, v = v, None
            res = (W.REPLY, [cid, v], blob)
        except E.Failed as e:
            res = (W.FAIL, [cid, "failed", e.reason], None)
        except E.Closed as e:
            res = (W.FAIL, [cid, "closed", e.reason], None)
        except E.Disconnected:
            res = (W.FAIL, [cid, "session_reset", None], None)
        except E.CallError as e:
            res = (W.FAIL, [cid, e.reason, None], None)
        except E.BusError as e:
            res = (W.FAIL, [cid, "denied", str(e)], None)
        except ValueError as e:   # a topic the bus refuses: answer, never leave the caller waiting
            res = (W.FAIL, [cid, "failed", str(e)], None)
        except MemoryError:     # a small board: answer rather than leave the caller waiting
            res = (W.FAIL, [cid, "failed", "out of memory on %s" % self.node], None)
        finally:
            self._served -= 1
        if session == self._session and self.status == UP:  # replies to a dead session go nowhere
            try:
                self._call_frame(*res)
            except (TypeError, ValueError, MemoryError) as e:
                self._call_frame(W.FAIL, [cid, "failed", "unencodable reply: %s" % e])

    # -- timers ----------------------------------------------------------
    _backoff = 5.0
    _t_status = 0.0
    _status_seen = None
    _t_rx = 0.0
    _t_tx = 0.0
    rtt = None
    last_gap = None

    def tick(self):
        """Timers: handshake retry, heartbeats, liveness, routes, status."""
        now = C.now()
        s = self.status
        if s == HELLO_SENT or s == ACK_SENT:
            if now - self._t_state > self.handshake_timeout:
                self.count("handshake_timeouts")
                self._session_down("handshake timeout")
                s = DOWN
        if s == DOWN and self.role == "initiator" and self._transport is not None \
                and now - self._t_state >= (self._backoff if self.last_error else 0):
            self._hello()
        elif s == UP:
            if now - self._t_rx > 3 * self.heartbeat:
                self.count("liveness_timeouts")
                self._session_down("peer silent for %.1fs" % (now - self._t_rx))
            else:
                if now - self._t_tx >= self.heartbeat:
                    self._control(W.PING, int(now * 1000))
                self._send_routes()
                for cid, req in list(self._pending.items()):
                    if req.done():       # the caller gave up; the peer times out too
                        del self._pending[cid]
                        self._freed.set()
        # Status goes out on a state change at once, else at most once a second.
        if self._dirty and (self.status != self._status_seen or now - self._t_status >= 1.0):
            self._status_seen = self.status
            self._t_status = now
            self._publish_status()

    # -- driving a transport -------------------------------------------
    async def run(self, transport):
        """Run the link over one transport until it ends (EOF or close())."""
        self._transport = transport
        self._t_rx = C.now()
        self._ctl = []
        self._session_down("new transport")
        self._dirty = True
        if self.role == "initiator":
            self._hello()
        writer = C.asyncio.create_task(self._writer(transport))
        ticker = C.asyncio.create_task(self._ticker())
        try:
            while True:
                bodies = await transport.recv()
                if bodies is None:
                    break
                for b in bodies:
                    self.feed(b)
                if self._ctl or self._calls or self._snap is not None:
                    self._wake.set()
        finally:
            writer.cancel()
            ticker.cancel()
            self._transport = None
            self._session_down("transport closed")
            self._publish_status()

    async def _writer(self, transport):
        while True:
            try:
                b = self.next_body()
            except MemoryError:
                # A small board under pressure: skip this turn, never stop the
                # writer (a dead writer would leave the link silent for good).
                self.count("memory_errors")
                await C.asyncio.sleep(0.05)
                continue
            if b is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await transport.send(b)
            except OSError as e:
                self.last_error = "send failed: %s" % e
                self.count("send_errors")
                transport.close()
                return
            except (ValueError, MemoryError) as e:   # refused or no memory: counted, go on
                self.last_error = "send refused: %r" % (e,)
                self.count("send_errors")
                continue
            self._t_tx = C.now()
            self.count("frames_out")

    async def _ticker(self):
        period = min(0.25, self.heartbeat / 4)
        while True:
            try:
                self.tick()
            except MemoryError:
                # A board's heap, briefly full (e.g. a status publish): this
                # tick is skipped, counted; the timers must not die with it.
                self.count("memory_errors")
            await C.asyncio.sleep(period)

    async def close(self, reason="closed"):
        """Say BYE to the peer, end the session, and disconnect the link's
        connections (its imported retained facts stay on the bus)."""
        t = self._transport
        if t is not None and self.status == UP:
            try:
                await t.send(W.encode(W.BYE, {"reason": reason}))
            except OSError:
                pass
        self._session_down(reason)
        if t is not None:
            t.close()
        for x in self._tasks:
            x.cancel()
        self._publish_status()
        self._conn.disconnect()
