"""Link: joins a bus to a peer bus over a transport (docs/protocol.md). It
lives as long as its node's boot (its ``sid``); ``run()`` drives one transport
at a time, feeding the session logic frame bodies and sending what it makes.
The Link holds the state; functions over it do the work, a module per concern
(cheaper on MicroPython than mixins): ``rules``, ``handshake``, ``tx``, ``rx``,
``calls``. Each field has one owner, the concern that writes it: ``__init__``
sets link.py's (and a few others', a block per owner) and calls each owner's
``init(link)``; an owner's ``reset(link)`` sets what a session's end resets,
at the start and in ``end_session``. The settings are an ``Options`` object
(options.py), shared by links alike; the owner's hooks are named attributes."""

from .. import compat
from . import calls, handshake, presence, routes, rules, rx, seal, tx, wire
from .options import DEFAULT, Options
from .seal import TAIL as SEAL_TAIL
from .spool import Spool


def _journal(opts, sid):
    """The flash spool of ``opts`` for boot ``sid`` (journal.py, imported only
    when on), or None."""
    if opts.journal is None:
        return None
    from .journal import Journal

    return Journal(opts.journal, sid, opts.journal_bytes, opts.journal_block)


class Link:
    """A federation link for ``bus``; see docs/protocol.md for the rules.

    ``key``: bytes, a list (newest first; the peer's kid picks), a callable(node) -> either, or
    None (no auth on both sides). ``principal``: who the link acts as on this bus; ``state``:
    the peer's generation, for the owner to persist. ``opts``: its settings (options.py), one
    object for many links; keywords named there make the link its own (``opts`` with them).
    """

    # -- hooks: the owner's, set by assignment (class attributes: a link without one pays
    # nothing; a comment's type lets a typed owner assign any callable) --
    on_gap = None  # type: object  # on_gap(link, first, last, why, sid): each gap (rx.gap)
    on_export = None  # type: object  # on_export(seq, item): each item spooled (tx.spool_item)
    # hold(link, size) -> bool: the owner's admission of a numbered frame of size bytes
    # (0: may any pass now; nothing taken) (rx.py, protocol 11)
    hold = None  # type: object
    HOOKS = ("on_gap", "on_export", "hold")

    def __init__(
        self,
        bus,
        node,
        key=None,
        role="initiator",
        link_id=None,
        peer=None,
        sid=None,
        state=None,
        principal=None,
        opts=None,
        **settings,
    ):
        if role not in ("initiator", "responder"):
            raise ValueError("role must be 'initiator' or 'responder'")
        opts = Options(opts, **settings) if settings else opts or DEFAULT
        rules.resolve(opts.exports, bus, None)  # a bad rule or class fails here, not at a session
        # The state, by owner, who alone writes it: a "-- NAME.py:" block here, or NAME.init();
        # an owner's reset() sets what a session's end resets, at the start and in end_session
        # (tests/host/project/test_layout_link.py holds both).
        # -- link.py: identity, settings, status, the transport, liveness, timers --
        self.bus = bus
        self.node = node
        self.role = role
        self.link_id = link_id or ("%s:%s" % (node, peer or role))
        self.peer = peer
        self.sid = sid or wire.nonce()[:16]
        self.opts = opts  # the settings, read there (options.py)
        # a body leaves a seal's room (seal.py)
        self._room = opts.max_len - (SEAL_TAIL if key is not None and opts.seal != "off" else 0)
        self.state = state if state is not None else {}  # the peer's generation, next number
        self.counters = {}
        self.status = wire.DOWN
        self._t_state = compat.now()
        self._key = key  # as given (handshake.key_for picks one)
        self._local_only = opts.local_patterns(bus)
        who = ("link", self.link_id) if principal is None else principal  # the authoriser's
        self._conn = bus.connect(principal=who)  # everything the link does on this bus
        self._spool = Spool(opts.spool, opts.spool_policy)  # what waits for an ACK (tx.py)
        self._journal = _journal(opts, self.sid)  # the flash spool, or None
        self._transport = self._pump = None  # the pump: the task spooling exports between them
        self._now, self._idle = None, False  # while the writer waits for work: send_nowait, True
        self._wake, self._freed = compat.Event(), compat.Event()
        self._exported = tx.Exports(self)  # what the export observers wake (the pump waits on it)
        # last frame in, out; status published; the last _doubt()
        self._t_rx = self._t_tx = self._t_status = self._t_doubt = 0.0
        self._status_seen, self._dirty = None, True
        # -- any module: the latest error, said by whichever concern met it --
        self.last_error = None
        # -- handshake.py: the peer (the rest: its init()) --
        self.peer_node = self.peer_sid = self.generation = None
        # -- tx.py: the next number out; every number below tx_acked acknowledged --
        self.tx_seq, self.tx_acked = 1, 0
        # -- rx.py: seconds, from the latest PONG; (first, last) of the latest gap --
        self.rtt = self.last_gap = None
        # -- hist.py: earlier boots' entries in (loaded only for them) --
        self._hist = None
        for owner in (handshake, seal, tx, rx, calls, presence):
            owner.init(self)

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

    def state_age(self):
        """Seconds since the link's state (``status``) last changed."""
        return compat.now() - self._t_state

    def heard_age(self):
        """Seconds since the last frame in from the peer (any session)."""
        return compat.now() - self._t_rx

    def spool_stats(self):
        """The spool's depth, bytes, oldest entry's age and losses."""
        return self._spool.stats()

    def publish_status(self):
        """Retain stats() at status_topic() now (if status publication is on)."""
        self._dirty = False
        if self.opts.status and not self._conn.is_disconnected():
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
        self._t_rx = min(self._t_rx, now - 3 * self.opts.heartbeat + min(2.0, self.opts.heartbeat))

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
            rx.handle(self, t, seq, obj, blob, len(body))
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
        f = getattr(self._transport, "frames", None)
        if f is not None and f.oversize != self._oversize_in:
            rx.oversize_in(self, f.oversize)
        if (
            s == wire.ACK_SENT
            and now - self._t_state > handshake.HOLD * self.opts.handshake_timeout
        ):
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
            if now - self._t_rx > 3 * self.opts.heartbeat:
                self.count("liveness_timeouts")
                self.end_session("peer silent for %.1fs" % (now - self._t_rx))
            else:
                if now - self._t_tx >= self.opts.heartbeat:
                    tx.control(self, wire.PING, int(now * 1000))
                calls.send_routes(self)
                for cid, p in list(self._pending.items()):
                    if p[0].done():  # the caller gave up; the peer times out too
                        del self._pending[cid]
                        self._freed.set()
                if not self.opts.durable:
                    self.acknowledge(self.rx_mark())
                elif self._ack_held is not None:
                    self.acknowledge(self._ack_held)  # its gap has passed, or it waits on
                rx.timers(self, now)
                if self._acking:
                    tx.tail_timeout(self, now)
        # Status goes out on a state change at once, else at most every status_every s.
        if self._dirty and (
            self.status != self._status_seen or now - self._t_status >= self.opts.status_every
        ):
            self._status_seen = self.status
            self._t_status = now
            self.publish_status()

    def start(self):
        """Spool exports from now on, with or without a transport (run()
        calls it; call it earlier so nothing published before the first
        session is lost). Needs a running event loop."""
        if not self._obs and (self.peer is not None or not self.opts.node_rules):
            tx.observe(self, self.peer if self.opts.node_rules else None)
        if self._pump is None:
            self._pump = compat.asyncio.create_task(self._pumping())
            if self._journal is not None:
                from . import journal

                self._tasks.append(compat.asyncio.create_task(journal.flusher(self)))

    async def _pumping(self):
        e = self._exported
        while True:
            await e.wait()
            e.clear()
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
        ticker = compat.asyncio.create_task(self._ticker()) if self.opts.ticks else None
        try:
            while True:
                bodies = await transport.recv()
                if bodies is None:
                    break
                for b in bodies:
                    self.feed(b)
                # What came is acknowledged now, or held for tick() (opts.ack_gap)
                if not self.opts.durable and self._acking:
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

    def send_now(self, body):
        """Send control frame ``body`` at once while the writer waits for
        work and its transport can (tx.control): True when it is done with
        (sent, or refused and counted as the writer would), False when the
        transport cannot take it now (the writer sends it)."""
        send = self._now
        if send is None:
            return False
        b, tl = seal.out(self, body)
        try:
            if not send(b, tl):
                return False
        except OSError as e:
            self.last_error = "send failed: %s" % e
            self.count("send_errors")
            self._transport.close()
            return True
        except ValueError as e:
            self.last_error = "send refused: %r" % (e,)
            self.count("send_errors")
            return True
        self._t_tx = compat.now()
        self.count("frames_out")
        return True

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
                        # Waiting for work: a control frame meanwhile goes at
                        # once (send_now), without waking this task.
                        self._now = getattr(transport, "send_nowait", None)
                        self._idle = True
                        try:
                            await self._wake.wait()
                        finally:
                            self._now = None
                            self._idle = False
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
        period = min(0.25, self.opts.heartbeat / 4)
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
            bodies = [wire.encode(wire.BYE, {"reason": reason})]
            h = self._ack_held
            if h is not None and h[0] == self.peer_sid and h[1] > self._rx_acked and not self._ctl:
                # durable here and held for ack_gap: said before the BYE, so the
                # peer frees it now rather than send it again to the next session
                # (not past a control frame still queued: a REFUSE goes first)
                self._rx_acked = h[1]
                bodies.insert(0, wire.encode(wire.ACK, h[1]))
            try:
                for body in bodies:
                    # its own tail: the writer may be sending
                    b, tl = seal.out(self, body, True)
                    await (t.send(b) if tl is None else t.send(b, tl))
            except OSError:
                pass
        self.end_session(reason)
        if t is not None:
            t.close()
        if self._journal is not None:
            self._journal.close()
        for x in self._tasks:
            x.cancel()
        if self._pump is not None:
            self._pump.cancel()
            self._pump = None
        self.publish_status()
        self._conn.disconnect()
