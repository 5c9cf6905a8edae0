"""Keeps the uplink alive: one Link (one sid per boot) run over transport after
transport, reopened with exponential backoff and jitter, never a crash loop.

An uplink kind K is the module firmware.uplink_K with ``open(ctx, gw)``
returning a transport (``recv``/``send``/``close``/``stats``,
edgebus/link/stream.py) or a coroutine giving one, for the gateway config gw;
it raises OSError (or any Exception) when it cannot. It may offer
``probe(ctx, gw, timeout)``: a coroutine, True when the gateway's bridge is
alive, used to go back to the primary (failover.py, docs/protocol.md
"Failover"); without it the device goes back and sees.
"""

import asyncio
import gc
import sys

from edgebus.backoff import Backoff
from edgebus.compat import now
from edgebus.link import cipher
from edgebus.link.link import Link
from edgebus.link.options import Options
from edgebus.link.wire import F_SEQ
from firmware import ConfigError, opt


def _pairs(rules):
    return [tuple(r) for r in rules]


def _options(ctx, kind):
    """The uplink Link's options from ctx's config ("link" section, the board's)."""
    lc = ctx.config.get("link", {})
    # "auto": insist on encryption over MQTT, where anyone on the broker
    # reads along, if this build has AES; else (a UART, no cryptolib) the
    # link's "auto": sealed, and encrypted where the bridge asks and can.
    seal = opt(lc, "link", "seal")
    if seal == "auto" and kind == "mqtt" and cipher.BACKEND:
        seal = "encrypt"
    journal = lc.get("journal")
    if journal and journal[0] != "/" and sys.platform not in ("linux", "darwin", "win32"):
        journal = "/" + journal  # a board: under the filesystem root
    return Options(
        seal=seal,
        exports=_pairs(opt(lc, "link", "exports")),
        imports=_pairs(opt(lc, "link", "imports")),
        export_calls=_pairs(opt(lc, "link", "export_calls")),
        import_calls=_pairs(opt(lc, "link", "import_calls")),
        heartbeat=opt(lc, "link", "heartbeat"),
        # Its status retained on the device bus (link/uplink) is off unless
        # asked for: sys/health carries the same counters, and the dict
        # rebuilt each second is ~1 KB of a board's heap.
        status=opt(lc, "link", "status"),
        handshake_timeout=opt(lc, "link", "handshake_timeout"),
        out_queue=lc.get("out_queue", ctx.board.get("queues", {}).get("uplink_tx", 16)),
        max_pending=opt(lc, "link", "max_pending"),
        spool=ctx.spool,
        spool_policy=opt(lc, "link", "spool_policy"),
        journal=journal,
        journal_bytes=opt(lc, "link", "journal_bytes"),
        journal_block=ctx.board.get("budget", {}).get("fs_block", 4096),
    )


def _failover(u, heartbeat):
    """A Failover over u's gateways, or None for one gateway (failover.py
    is then not even loaded)."""
    if not u.get("gateways"):
        return None
    from firmware import failover

    return failover.Failover(
        failover.gateways(u),
        opt(u, "uplink", "failover_after") * heartbeat,
        opt(u, "uplink", "failback"),
        opt(u, "uplink", "probe_every"),
        now(),
    )


class Uplink:
    def __init__(self, ctx, sid=None):
        """The uplink of ctx's device; sid: this boot's (firmware.boot.boot_sid),
        else a random one."""
        self.ctx = ctx
        cfg = ctx.config
        u = cfg["uplink"]
        self.kind = k = u["kind"]
        try:
            self.mod = getattr(__import__("firmware.uplink_" + k), "uplink_" + k)
        except ImportError as e:
            raise ConfigError(
                "uplink kind %r is not in this build (firmware/uplink_%s.py): %s" % (k, k, e)
            )
        self.backoff = Backoff(opt(u, "uplink", "backoff_min"), opt(u, "uplink", "backoff_max"))
        self.reopen_after = opt(u, "uplink", "reopen_after")
        opts = _options(ctx, k)
        self.fo = _failover(u, opts.heartbeat)
        self._to = None  # a gateway the watcher chose to move to, and why
        self._why = None
        self._cut = False  # the watcher cancelled the link's run
        # The config's key as it is at each handshake: sys/key/set changes it
        # for the next session without a restart.
        self.link = Link(
            ctx.bus,
            ctx.node,
            key=(lambda node: cfg["key"]) if cfg.get("key") else None,
            sid=sid,
            role="initiator",
            link_id="uplink",
            peer="host",
            opts=opts,
        )
        ctx.link = self.link
        prep = getattr(self.mod, "prepare", None)
        if prep is not None:
            prep(ctx)
        self.opens = 0
        self.open_failures = 0
        self.ends = 0
        self.last_error = None
        self.transport = None
        self._run = None  # the link's run over self.transport
        # Sequenced data frames (publishes, retains, unretains) handed to a
        # transport that did not refuse them: what this device says it sent.
        # Counted when handed over (taken back if the send fails), so that at
        # any instant every sequence number below the link's tx_seq is either
        # counted here or was never sent (dropped, unencodable, oversize).
        self.sent = 0
        self._pending = 0
        self._errors = 0

    def stats(self):
        self._settle()
        s = {
            "kind": self.kind,
            "opens": self.opens,
            "open_failures": self.open_failures,
            "ends": self.ends,
            "backoff": self.backoff.last,
            "last_error": self.last_error,
            "sent": self.sent,
            "tx_seq": self.link.tx_seq,
        }  # not Link.stats(): two dicts per health period
        if self.fo is not None:
            s.update(self.fo.stats())
        t = self.transport
        if t is not None:
            # What the transport refused (an outsider's oversize message, a
            # damaged frame, a silent broker): only once there is some. The
            # names a literal, not a module global: a frozen build keeps it in
            # flash, where a global was 48 bytes more of the board's heap
            refusals = ("crc_errors", "cobs_errors", "oversize", "garbage_bytes", "silent")
            bad = {k: v for k, v in t.stats().items() if v and k in refusals}
            if bad:
                s["transport"] = bad
        return s

    def _counting(self, t):
        """t with its send counting the sequenced data frames (self.sent).

        A plain function returning the transport's own coroutine: no extra
        generator per frame (the heap on a board is that tight).  A send that
        fails is taken back when the link counts it (its send_errors)."""
        send = t.send

        def counted(body, tail=None):
            self._settle()
            self._pending = body[0] & F_SEQ
            if self._pending:
                self.sent += 1
            return send(body, tail)

        t.send = counted
        return t

    def _settle(self):
        # One frame is in flight at a time (the link's writer); when the link
        # counted a send error since, that frame was not sent.
        e = self.link.counters.get("send_errors", 0)
        if e != self._errors:
            self._errors = e
            if self._pending:
                self.sent -= 1
            self._pending = 0

    async def _open(self):
        t = self.mod.open(self.ctx, None if self.fo is None else self.fo.gateway())
        if hasattr(t, "send") and not hasattr(t, "recv"):  # a coroutine
            t = await t
        return t

    def _leave(self, t, run, to, why):
        self._to = to
        self._why = why
        self._cut = True
        t.close()
        run.cancel()  # a read pending on a closed socket may not wake (MicroPython)

    async def _watch(self, t, run):
        """Close a transport on which no session has come up for reopen_after
        seconds (the next open may fix what the link alone cannot), or whose
        gateway went silent, or when a probe finds the primary alive again."""
        link = self.link
        fo = self.fo
        since = now()
        period = min(1.0, link.opts.heartbeat / 4)
        while not getattr(t, "closed", False):
            n = now()
            if link.status == "up":
                since = n
            elif n - since > self.reopen_after:
                self.ctx.log("uplink: no session for %ss, reopening" % self.reopen_after)
                return self._leave(t, run, None, None)
            if fo is not None:
                fo.heard(link.counters.get("frames_in", 0), n)
                why = await fo.check(n, self, t)
                if why is not None:
                    return self._leave(t, run, 0 if why == "failback" else None, why)
            await asyncio.sleep(period)

    def network_lost(self):
        """The access point went (firmware/wifi.py): drop the transport now
        rather than wait for the link's liveness to find it dead."""
        t, run = self.transport, self._run
        if t is not None and run is not None and not run.done():
            self._leave(t, run, None, None)

    async def _session(self, t):
        """Run the link over transport t until it ends."""
        log = self.ctx.log
        self.opens += 1
        self.transport = t
        log("uplink %s: open (#%d)" % (self.kind, self.opens))
        self._cut = False
        self._run = run = asyncio.create_task(self.link.run(t))
        stale = asyncio.create_task(self._watch(t, run))
        try:
            await run
        except asyncio.CancelledError:
            if not self._cut:  # not ours: the device is stopping
                run.cancel()
                stale.cancel()
                raise
        except Exception as e:
            self.last_error = "link: %s: %s" % (type(e).__name__, e)
            log("uplink %s: %s" % (self.kind, self.last_error))
        stale.cancel()
        t.close()
        self.transport = self._run = None
        self.ends += 1
        log("uplink %s: transport ended (%s)" % (self.kind, self.link.last_error))

    async def run(self):
        log = self.ctx.log
        self.link.start()  # spool from now on: nothing before the first session is lost
        bo = self.backoff
        net = self.ctx.net
        while True:
            if net is not None and not net.up.is_set():
                # No network: opening would only fail and grow the backoff.
                log("uplink %s: waiting for the network" % self.kind)
                await net.up.wait()
                bo.reset()
            sessions = self.link.counters.get("sessions", 0)
            gc.collect()  # before allocating a transport: less fragmentation
            try:
                t = self._counting(await self._open())
            except Exception as e:  # never a crash loop: log, count, back off
                self.open_failures += 1
                self.last_error = "open: %s: %s" % (type(e).__name__, e)
                log("uplink %s: %s" % (self.kind, self.last_error))
                t = None
            if t is not None:
                try:
                    await self._session(t)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # a MemoryError starting the tasks: never the end
                    self.last_error = "uplink: %s: %s" % (type(e).__name__, e)
                    log("uplink %s: %s" % (self.kind, self.last_error))
                    t.close()
                    self.transport = self._run = None
            if self.link.counters.get("sessions", 0) > sessions:
                bo.reset()  # a session came up: start the backoff again
            fo = self.fo
            if fo is not None and (self._why is not None or fo.silent(now())):
                # Same Link, same sid: the next gateway gets this boot's
                # unacknowledged tail first (the session start goes back to it).
                fo.move(now(), self._to, self._why or "silent")
                log("uplink %s: gateway %s" % (self.kind, fo.last_move))
                bo.reset()  # the other gateway at once, not after the backoff
            self._to = self._why = None
            await asyncio.sleep(bo.next())
