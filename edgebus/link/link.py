"""Link: joins a bus to a peer bus over a transport (docs/protocol.md). It
lives as long as its node's boot (its ``sid``); ``run()`` drives one transport
at a time, feeding the session logic frame bodies and sending what it makes.
The Link holds the state; functions over it do the work, a module per concern
(cheaper on MicroPython than mixins): ``rules``, ``handshake``, ``tx``, ``rx``,
``calls``. Each field has one owner, the concern that writes it: ``__init__``
sets them a block per owner; an owner's ``reset(link)`` what a session's end
resets, at the start and in ``end_session``."""

from .. import compat, topic
from . import calls, handshake, presence, routes, rules, rx, seal, tx, wire
from .seal import TAIL as SEAL_TAIL
from .seal import check as seal_check
from .spool import Spool


class Link:
    """A federation link for ``bus``; see docs/protocol.md for the rules.

    ``exports``/``imports``: data rules, lists of (pattern, prefix): exported local topics lose
    ``prefix`` on the wire; imported wire topics gain it; a third item in an export rule is its
    delivery class, "reliable" (publishes' default: spooled until acknowledged) or "latest"
    (sent once). ``export_calls``/``import_calls``: the same for endpoints. ``{node}`` in a rule
    is the peer's node id. ``key``: bytes, a list (newest first; the peer's kid picks), a
    callable(node) -> either, or None (no auth on both sides). ``principal``: who the link acts
    as on this bus; ``state``: the peer's generation, for the owner to persist. ``spool``: bytes
    for what waits to be sent or acknowledged, ``spool_policy`` when full. ``ack``: offer
    acknowledgements; ``durable``: acknowledge only what the owner confirms (acknowledge()).
    ``journal``: a directory for the flash spool (journal.py), of ``journal_bytes`` in blocks of
    ``journal_block``; None: off. ``priority``: the rank of routes learned here (routes.py).
    ``hold``: None or the owner's admission, callable(link) (rx.py, protocol 11). ``seal`` (with
    a key; seal.py): "auto" seals (refusing a peer that cannot) and encrypts where both can,
    "encrypt" always encrypts, "mac" never does, "offer" seals where the peer offers it, "off".
    """

    # The owner's settings (configure(); class attributes: free on a board that sets none).
    ticks = True  # run() ticks it; False: its owner calls tick() (thousands of links)
    status_every = 1.0  # s between status publications while only counters change
    on_gap = None  # on_gap(link, first, last, why, sid) hears each gap (rx.gap)
    on_export = None  # on_export(seq, item) hears each item spooled (tx.spool_item)
    claims = True  # False drops a sender's relay claims (src, via: rx.extra_in)
    paced = False  # True refuses a peer without acknowledgements and a window (handshake)
    max_retained = None  # the facts the peer may retain here (rx.room)
    SETTINGS = ("ticks", "status_every", "on_gap", "on_export", "claims", "paced", "max_retained")

    def __init__(
        self,
        bus,
        node,
        key=None,
        role="initiator",
        link_id=None,
        peer=None,
        exports=(),
        imports=(),
        export_calls=(),
        import_calls=(),
        local_only=("link/#", "local/#"),
        heartbeat=5.0,
        handshake_timeout=5.0,
        max_pending=8,
        max_sync=512,
        out_queue=32,
        status=True,
        sid=None,
        state=None,
        principal=None,
        max_len=1024,
        spool=2048,
        spool_policy="drop_oldest",
        ack=True,
        durable=False,
        journal=None,
        journal_bytes=262144,
        journal_block=4096,
        priority=0,
        hold=None,
        seal="auto",
    ):
        if role not in ("initiator", "responder"):
            raise ValueError("role must be 'initiator' or 'responder'")
        seal_check(seal)
        if max_len < wire.MIN_LEN:
            raise ValueError(
                "max_len %d leaves no room for the handshake: at least %d" % (max_len, wire.MIN_LEN)
            )
        # The state, grouped by owner: a "-- NAME.py:" block's fields are written by that
        # module alone (and here); each owner's reset() sets what a session's end resets,
        # here and in end_session (tests/host/project/test_layout_link.py holds both).
        # -- link.py: configuration, status, the transport, liveness, timers --
        self.bus = bus
        self.node = node
        self.role = role
        self.link_id = link_id or ("%s:%s" % (node, peer or role))
        self.peer = peer
        self.sid = sid or wire.nonce()[:16]
        self.heartbeat = heartbeat
        self.handshake_timeout = handshake_timeout
        self.max_pending = max_pending
        self.priority = priority
        self.max_sync = max_sync
        self.out_queue = out_queue
        self.max_len = max_len  # the largest frame body; the transport's limit too
        self.seal = seal  # sealed sessions (seal.py); a body leaves a seal's room
        self._room = max_len - SEAL_TAIL if key is not None and seal != "off" else max_len
        self.ack = ack  # acknowledgements offered (negotiated: _acking)
        self.durable = durable  # acknowledge only what the owner confirms
        self.hold = hold
        # Peer continuity across sessions (and across restarts, if the caller
        # persists it): generation and the next sequence number expected.
        self.state = state if state is not None else {}
        self.counters = {}
        self.status = wire.DOWN
        self._t_state = compat.now()
        self._key = key  # as given (handshake.key_for picks one)
        # Rules: as given, then resolved for the peer's node per session.
        self._rule_src = (exports, imports, export_calls, import_calls)
        self._local_only = [topic.pattern(p, bus.s_wild, bus.m_wild)[1] for p in local_only]
        self._node_rules = False  # do the export rules name {node}?
        for r in exports:
            for x in r[:2]:
                if type(x) is str and "{node}" in x:
                    self._node_rules = True
        rules.resolve(exports, bus, None)  # a bad rule or class fails here, not at a session
        # Everything the link does on this bus is done as principal (the
        # authoriser's subject): by default ("link", link_id).
        self._conn = bus.connect(
            principal=principal if principal is not None else ("link", self.link_id)
        )
        self._spool = Spool(spool, spool_policy)  # what waits for an ACK (tx.py fills it)
        self._journal = None  # the flash spool (imported only when on)
        if journal is not None:
            from .journal import Journal

            self._journal = Journal(journal, self.sid, journal_bytes, journal_block)
        self._transport = None
        self._pump = None  # the task spooling exports between transports
        self._wake = compat.Event()
        self._freed = compat.Event()
        self._t_rx = self._t_tx = self._t_status = 0.0  # last frame in, out; status published
        self._t_doubt = 0.0  # the last _doubt()
        self._status_on, self._status_seen = status, None
        self._dirty = True
        # -- any module: the latest error, said by whichever concern met it --
        self.last_error = None
        # -- handshake.py: the peer, keys, handshakes in progress, the session's terms --
        self.peer_node = self.peer_sid = self.generation = None
        self._hkey = None  # this handshake's key (key_for)
        self._mine = None  # our latest side
        self._hs = []  # in progress: (peer's HELLO or None, our side), newest last
        self._recent = []  # initiator nonces seen (replay guard)
        self._session = 0
        self._backoff = 5.0  # the retry delay after an error; handshake_timeout once up
        self._retry_at = 0.0  # no HELLO before (after an error)
        self._hello_wait = 0  # the current HELLO retry interval
        # the peer's: (its ms at HELLO / HELLO_ACK, ms to Unix or None, source or None)
        self._clock = None
        self._acking = self._flow = False  # negotiated: acknowledgements, WINDOW honoured
        self._imp = None  # derived connection for what arrives, per session
        self._imports = []  # the rules resolved for the peer's node
        self._export_calls = []
        self._import_calls = []
        # -- seal.py: the session's keys, the tail buffer, frame counters --
        self._seal = self._s_buf = None
        self._s_tx = self._s_rx = 0
        # -- tx.py: control queue, export observers, numbers out, pace, retransmission --
        self._ctl = []
        self._credit = 4
        self._obs = []  # [observer, rule, its losses counted] per export rule
        self._obs_node = False  # the peer node they observe for
        self._exports = []
        self.tx_seq = 1  # the number the next numbered frame carries
        self._tx_next = 1  # the number the peer is told comes next
        self.tx_acked = 0  # every number below it acknowledged, by any peer
        self._tx_window = self._rx_window = None  # the peer's pace; ours for it (protocol 11)
        self._t_acked = self._t_data = 0.0  # last ACK that freed entries; last numbered frame out
        self._rto = tx.RTO  # the wait before the unacknowledged tail goes again
        tx.reset(self)  # calls queued, the snapshot out
        # -- rx.py: numbers in, gaps, holds, ACKs sent, the snapshot in --
        self.rtt = None  # seconds, from the latest PONG
        self.last_gap = None  # (first, last) sequence numbers of the latest gap
        self._held = None  # {None (this boot) or an earlier sid: first held}
        self._bad = None  # an undecodable frame's number, asked for again once
        self._retained = None  # the facts the peer retained here, kept under max_retained
        self._t_resend = 0.0  # RESEND, or no_session, sent (a 98th field: +480 B on a board)
        self._t_ack = -1.0  # the last ACK sent: the first goes at once (clocks from 0)
        rx.reset(self)  # not stuck, the snapshot in, the last ACK's number
        # -- hist.py: earlier boots' entries in --
        self._hist = None
        # -- calls.py: calls forwarded and served, routes sent --
        self._next_cid, self._served = 1, 0
        self._tasks = []
        calls.reset(self)
        # -- presence.py: the endpoints offered, for notices --
        self._offered = None

    def configure(self, **settings):
        """Set the owner's hooks and policies (SETTINGS) by name; TypeError for another."""
        for k, v in settings.items():
            if k not in self.SETTINGS:
                raise TypeError("Link has no setting %r (%s)" % (k, ", ".join(self.SETTINGS)))
            setattr(self, k, v)
        return self

    # -- bookkeeping ---------------------------------------------------
    def count(self, name, n=1):
        """Add ``n`` to counter ``name``."""
        self.counters[name] = self.counters.get(name, 0) + n
        self._dirty = True

    def _set_state(self, s):
        self.status = s
        self._t_state = compat.now()
        self._dirty = True

    def status_topic(self):
        """Where the link retains its status on its bus."""
        return ("link", self.link_id)

    def stats(self):
        """A snapshot of the link's state and counters (also retained on the bus
        at ``link/<link_id>``)."""
        s = {
            "state": self.status,
            "node": self.node,
            "sid": self.sid,
            "role": self.role,
            "peer": self.peer_node,
            "peer_sid": self.peer_sid,
            "generation": self.generation,
            "tx_seq": self.tx_seq,
            "rx_next": self.state.get("rx_next"),
            "pending_calls": len(self._pending),
            "proxies": routes.count(self),
            "last_error": self.last_error,
            "acking": self._acking,
            "spool": self.spool_stats(),
            "counters": dict(self.counters),
        }
        if self._journal is not None:
            s["journal"] = self._journal.stats()
        t = self._transport
        if t is not None and hasattr(t, "stats"):
            s["transport"] = t.stats()
        return s

    def spool_stats(self):
        """The spool's depth, bytes, oldest entry's age and losses."""
        return self._spool.stats()

    def publish_status(self):
        """Retain stats() at status_topic() now (if status publication is on)."""
        self._dirty = False
        if self._status_on and not self._conn.is_disconnected():
            self._conn.retain(self.status_topic(), self.stats())

    def end_session(self, why):
        """End the session: pending calls fail, proxies go, state is kept; what
        each owner keeps per session goes back to its start (its reset())."""
        was = self.status
        self._set_state(wire.DOWN)
        for p in list(self._pending.values()):
            p[0].abandon("session_reset")
        tx.reset(self)
        rx.reset(self)
        calls.reset(self)
        self._freed.set()
        routes.withdraw(self)
        if self._offered:
            presence.offered(self, ())
        if self._journal is not None:
            self._journal.flush()  # an outage is when it matters
        if was == wire.UP:
            self.count("session_ends")
            self.last_error = self.last_error or why

    # -- functions over the link, in their owners' modules, as methods (no wrapper) --
    retry_later = handshake.retry_later
    peer_presence = handshake.peer_presence  # the transport's word on the peer
    rx_mark = rx.rx_mark  # acknowledgements: what this side received
    acknowledge = rx.acknowledge
    _gap = rx.gap  # for hist.py too, which cannot import rx.py
    _hold_back = rx.hold_back
    next_body = tx.next_body
    refuse = tx.refuse
    window = tx.window

    def _doubt(self):
        """Word anyone could send that the peer is gone (an unsealed ERROR, an MQTT
        "offline"): PING, and end the session unless a sealed frame answers within
        min(2 s, heartbeat). At most once a second."""
        now = compat.now()
        if now - self._t_doubt < 1.0:
            return
        self._t_doubt = now
        tx.control(self, wire.PING, int(now * 1000))
        self._t_rx = min(self._t_rx, now - 3 * self.heartbeat + min(2.0, self.heartbeat))

    # -- frames ----------------------------------------------------------
    def feed(self, body):
        """Handle one received frame body (never raises)."""
        self.count("frames_in")
        if self._seal is not None or self.status != wire.UP:
            body = seal.opened(self, body)
            if body is None:  # refused, counted: not even a sign of life
                return
        # A sealed session lives on sealed frames alone: a handshake beside it is anyone's.
        bad = "bad_frames"
        if self._seal is None or not body or body[0] & wire.TYPE_MASK > wire.AUTH:
            self._t_rx = compat.now()
        elif self.status == wire.UP:
            bad = "forged"  # beside a sealed session: a malformed handshake is anyone's
        t = None
        try:
            t, seq, obj, blob = wire.decode(body)
            rx.handle(self, t, seq, obj, blob)
        except wire.WireError as e:
            self.count(bad)
            self.last_error = "bad frame: %s" % e
            if t is None and len(body) > 2 and body[0] & wire.F_SEQ and self.status == wire.UP:
                rx.undecodable(self, (body[1] << 8) | body[2])
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            self.count(bad)
            self.last_error = "bad %s: %s" % (wire.NAMES[t] if 0 < t < len(wire.NAMES) else t, e)
        except MemoryError:  # a small board under pressure: this frame is lost, not the link
            self.count("memory_errors")
            self.last_error = "out of memory handling a frame"

    # -- timers ----------------------------------------------------------
    def tick(self):
        """Timers: handshake retry, heartbeats, liveness, routes, acks, status."""
        now = compat.now()
        s = self.status
        if s == wire.ACK_SENT and now - self._t_state > handshake.HOLD * self.handshake_timeout:
            self.count("handshake_timeouts")
            self.end_session("handshake timeout")
        elif s == wire.HELLO_SENT and now - self._t_state > self._hello_wait:
            self.count("hello_retries")
            handshake.hello(self)
        elif (
            s == wire.DOWN
            and self.role == "initiator"
            and self._transport is not None
            and now >= self._retry_at
        ):
            handshake.hello(self)
        elif s == wire.UP:
            if now - self._t_rx > 3 * self.heartbeat:
                self.count("liveness_timeouts")
                self.end_session("peer silent for %.1fs" % (now - self._t_rx))
            else:
                if now - self._t_tx >= self.heartbeat:
                    tx.control(self, wire.PING, int(now * 1000))
                calls.send_routes(self)
                for cid, p in list(self._pending.items()):
                    if p[0].done():  # the caller gave up; the peer times out too
                        del self._pending[cid]
                        self._freed.set()
                if not self.durable:
                    self.acknowledge(self.rx_mark())
                rx.timers(self, now)
                if self._acking:
                    tx.tail_timeout(self, now)
        # Status goes out on a state change at once, else at most every status_every s.
        if self._dirty and (
            self.status != self._status_seen or now - self._t_status >= self.status_every
        ):
            self._status_seen = self.status
            self._t_status = now
            self.publish_status()

    def start(self):
        """Spool exports from now on, with or without a transport (run()
        calls it; call it earlier so nothing published before the first
        session is lost). Needs a running event loop."""
        if not self._obs and (self.peer is not None or not self._node_rules):
            tx.observe(self, self.peer if self._node_rules else None)
        if self._pump is None:
            self._pump = compat.asyncio.create_task(self._pumping())
            if self._journal is not None:
                from . import journal

                self._tasks.append(compat.asyncio.create_task(journal.flusher(self)))

    async def _pumping(self):
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                tx.pump(self)
            except MemoryError:
                self.count("memory_errors")

    # -- driving a transport -------------------------------------------
    async def run(self, transport):
        """Run the link over one transport until it ends (EOF or close())."""
        self.start()
        self._transport = transport
        self._t_rx = compat.now()
        self._ctl = []
        self.end_session("new transport")
        self._dirty = True
        if self.role == "initiator":
            self._hello_wait = 0
            handshake.hello(self)
        writer = compat.asyncio.create_task(self._writer(transport))
        ticker = compat.asyncio.create_task(self._ticker()) if self.ticks else None
        try:
            while True:
                bodies = await transport.recv()
                if bodies is None:
                    break
                for b in bodies:
                    self.feed(b)
                # ACK once 16 numbers or 10 ms wait, tick() the rest (BENCHMARKS.md 3)
                if (
                    not self.durable
                    and self._acking
                    and (
                        (self.state.get("rx_next") or 0) - self._rx_acked >= 16
                        or compat.now() - self._t_ack >= 0.01
                    )
                ):
                    self.acknowledge(self.rx_mark())
                if self._ctl or self._calls or self._snap is not None:
                    self._wake.set()
        finally:
            writer.cancel()
            if ticker is not None:
                ticker.cancel()
            self._transport = None
            self.end_session("transport closed")
            self.publish_status()

    async def _writer(self, transport):
        # No memory (a small board): the frame is tried again, not skipped (a
        # RESEND livelock), dropped if its session ends. The writer never dies.
        body = None
        while True:
            try:
                if body is None:
                    body = self.next_body()
                    if body is None:
                        self._wake.clear()
                        await self._wake.wait()
                        continue
                    s, st = self._session, self.status
                b, tl = seal.out(self, body)  # the seal: counter, tag
                await (transport.send(b) if tl is None else transport.send(b, tl))
            except MemoryError:
                self.count("memory_errors")
                await compat.asyncio.sleep(0.05)
                if body is not None and (self._session != s or self.status != st):
                    body = None
                continue
            except OSError as e:
                self.last_error = "send failed: %s" % e
                self.count("send_errors")
                transport.close()
                return
            except ValueError as e:  # refused: counted, go on
                self.last_error = "send refused: %r" % (e,)
                self.count("send_errors")
            else:
                self._t_tx = compat.now()
                self.count("frames_out")
            body = None

    async def _ticker(self):
        period = min(0.25, self.heartbeat / 4)
        while True:
            try:
                self.tick()
            except MemoryError:
                # A board's heap, briefly full (e.g. a status publish): this
                # tick is skipped, counted; the timers must not die with it.
                self.count("memory_errors")
            await compat.asyncio.sleep(period)

    async def close(self, reason="closed"):
        """Say BYE to the peer, end the session, and disconnect the link's
        connections (its imported retained facts stay on the bus)."""
        t = self._transport
        if t is not None and self.status == wire.UP:
            try:
                # its own tail: the writer may be sending
                b, tl = seal.out(self, wire.encode(wire.BYE, {"reason": reason}), True)
                await (t.send(b) if tl is None else t.send(b, tl))
            except OSError:
                pass
        self.end_session(reason)
        if t is not None:
            t.close()
        for x in self._tasks:
            x.cancel()
        if self._pump is not None:
            self._pump.cancel()
            self._pump = None
        self.publish_status()
        self._conn.disconnect()
