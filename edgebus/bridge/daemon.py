"""edgebus-bridge: the host daemon holding the host bus and joining device
buses to it (serial ports, MQTT, local unix socket), with a telemetry log.

usage: edgebus-bridge --config bridge.toml
(an annotated example configuration is bridge/example.toml, installed with the package)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable

import edgebus
from edgebus.bridge import acl, callerinfo, process, reload, rotation, split, status
from edgebus.bridge import config as bridge_config
from edgebus.bridge.keystore import KeyStore
from edgebus.bridge.links import local
from edgebus.bridge.links.options import LinkOptions
from edgebus.bridge.links.quota import Quota, Watch
from edgebus.bridge.links.statefile import StateFile
from edgebus.bridge.mailbox import Mailbox
from edgebus.bridge.schema import MAX_WORKERS
from edgebus.compat import wait_for

if TYPE_CHECKING:
    from edgebus.bridge.telemetry.appender import Appender
    from edgebus.link.link import Link

log = logging.getLogger("edgebus.bridge")

# A stop's bounds, whatever the fleet's size. BYEs go out for STOP_BYE_S at
# most: a device still to be told then learns of the stop without one (over
# MQTT from the bridge's retained "offline" presence, published as its
# connection closes; a shard's device, which is told no "offline", a serial
# device or a peer by its liveness timeout). A step that waits on lines or
# tasks (a BYE on a stalled line, the tasks' ends) waits STOP_STEP_TIMEOUT at
# most. Sealing the log is bounded by its queue (log_queue), saving the state
# by the file's size.
STOP_BYE_S = 1.0
STOP_STEP_TIMEOUT = 5.0


class Bridge:
    """The host bus and everything joined to it."""

    def __init__(self, cfg: bridge_config.Config, config_path: str | None = None) -> None:
        self.cfg = cfg
        self.config_path = config_path  # read again by a reload (None: the keystore only)
        self.auth = acl.make(cfg)
        self.bus = edgebus.Bus(q_length=cfg.queue_len, authoriser=self.auth)
        self.conn = self.bus.connect(principal=("bridge", cfg.node))
        self.state = StateFile(cfg.state_dir)
        self.keystore = KeyStore(cfg.keys or os.path.join(cfg.state_dir, "keys"))
        self.links: dict[str, Link] = {}
        self.transports: dict[str, Any] = {}
        self.stopping = False
        self.dropped_at_stop = 0  # MQTT frames not taken (their devices send them again)
        # With a log, device links acknowledge only what the log made durable
        # (the appender's group commits); without one, what reached the bus.
        self.durable = cfg.log_dir is not None
        self.link_options = LinkOptions(cfg, self.durable)
        self._stop = asyncio.Event()
        self.remove_socket: Callable[[], None] = lambda: None  # the local socket's, at the stop
        self.appender: Appender | None = None
        self.mqtt: MqttLinks | None = None
        self.started = time.time()
        self.tasks: list[asyncio.Task[Any]] = []
        self.mailbox = Mailbox(self)
        # [quota]: per device link (not a [[peer]], which carries many devices,
        # nor a local client), readings and bytes buckets its hold consults
        self.quota = Quota(cfg.quota_readings, cfg.quota_burst, cfg.quota_bytes)
        self.limited: set[str] = set()  # the link ids under it
        self.watch = Watch()
        if cfg.mqtt is not None:
            from edgebus.bridge.links.mqtt import MqttLinks

            self.mqtt = MqttLinks(self, cfg.mqtt)

    def hold(self, link: Link, size: int) -> bool:
        """Link.hold for a numbered frame of ``size`` bytes (0: may any pass
        now): the log's pushback for durable links (flow.py), then a device's
        readings and bytes quotas (quota.py)."""
        a = self.appender
        if a is not None and link.opts.durable and a.hold(link, size):
            return True
        return link.link_id in self.limited and self.quota.over(link, size)

    def add_link(self, link: Link, kind: str = "device") -> None:
        """Register ``link`` of ``kind`` ("device", "peer" or "local"; its
        options from link_options) in bridge.links (by its id), its gaps told
        to gap(), held back by hold(); a device link is under [quota]."""
        self.links[link.link_id] = link
        link.on_gap = self.gap
        link.hold = self.hold
        if kind == "device":
            self.limited.add(link.link_id)

    def remove_link(self, link_id: str) -> None:
        """Forget the link ``link_id`` (a device released, a client gone)."""
        self.links.pop(link_id, None)
        self.limited.discard(link_id)
        self.quota.forget(link_id)
        self.watch.forget(link_id)

    async def _watching(self, period: float = 5.0) -> None:
        """Name in the log, at most once a minute each, the devices whose
        frames were refused for their own doing (quota.py)."""
        while True:
            await asyncio.sleep(period)
            self.watch.check(list(self.links.values()))

    def gap(self, link: Link, first: int, last: int, why: str, sid: str | None) -> None:
        """Link.on_gap: with a log, one bridge/gaps record (appender.py)."""
        if self.appender is not None:
            self.appender.gap(link, first, last, why, sid)

    def read_patterns(self, uid: int) -> list[str]:
        return acl.read_patterns(self.cfg, uid)

    async def sleep(self, seconds: float) -> None:
        """Sleep, but wake at once when the bridge stops."""
        try:
            await wait_for(self._stop.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def stats(self, links: Iterable[str] | None = None, fleet: bool = True) -> dict[str, Any]:
        """The bridge's state: every link's stats (or those of the ids
        ``links``), the fleet's totals (unless not ``fleet``), the bus, the log."""
        ls = self.links
        cfg = self.cfg
        st = {
            "node": cfg.node,
            "uptime": round(time.time() - self.started, 1),
            "links": {
                k: status.link_stats(self, ls[k]) for k in (sorted(ls) if links is None else links)
            },
            "fleet": status.totals(ls.values(), self.mailbox) if fleet else None,
            "bus": self.bus.stats(),
            "log": self.appender.stats() if self.appender else None,
            "mqtt": self.mqtt.stats() if self.mqtt else None,
            "denied": self.auth.denied if self.auth else 0,
            "mailbox": self.mailbox.stats(),
        }
        if cfg.worker is not None:  # one of several (bridge/workers.py)
            st["worker"] = [cfg.worker, cfg.workers]
            if cfg.worker == 0 and fleet:  # the others', for `edgebus status`
                st["workers"] = split.read_status(os.path.dirname(cfg.state_dir))
        return st

    async def _status_endpoint(self) -> None:
        ep = self.conn.bind("bridge/status", queue_len=4)
        async for req in ep:
            try:
                req.reply(status.page(self, req.payload))
            except ValueError as e:
                req.fail(str(e))

    async def _persist_state(self, period: float = 0.2) -> None:
        """Save the peer state as soon as a session comes up with a new peer
        sid: a bridge killed without a goodbye (SIGKILL, power loss) would
        otherwise restart from an older file and hand the next device boot a
        generation that is already in the log. With a log, the commits also
        write it (before an acknowledgement of the new boot can leave), and
        this goes through the log's worker, in order with them."""
        self.state.saved = self.state.generations
        while True:
            if self.appender is not None:
                self.appender.save_state()
            elif self.state.unsaved():
                self.state.save()
            await asyncio.sleep(period)

    async def run(self) -> set[asyncio.Task[Any]]:
        """Run until stop(); then close the links, seal the log and save the
        state, each step bounded. Returns the tasks that did not end: an
        embedding program decides what to do with them (the daemon exits)."""
        servers = await self._start()
        # What exists now (every configured link, the modules) lives as long
        # as the bridge: out of the collector's sight, a full collection at
        # 10,000 devices scans a third fewer objects (a pause of 100s of ms on
        # the loop, in the ACKs' latency). What comes later is collected as ever.
        gc.freeze()
        await self._stop.wait()
        return await self._wind_down(servers)

    async def _start(self) -> list[asyncio.Server]:
        """Start every part: the log, the bridge's endpoints, the links, the
        listeners (returned, for the stop to close)."""
        cfg = self.cfg
        self.tasks.append(asyncio.create_task(self._persist_state()))
        if self.cfg.worker is not None:  # for the supervisor, which restarts a hung one
            self.tasks.append(asyncio.create_task(split.show_alive(self.cfg.state_dir)))
        self.tasks.append(asyncio.create_task(self._watching()))
        if cfg.log_dir:
            self._open_log(cfg.log_dir)
        self.tasks.append(asyncio.create_task(self._status_endpoint()))
        self.tasks.append(asyncio.create_task(callerinfo.serve(self)))
        self.tasks.append(asyncio.create_task(rotation.serve(self)))
        self.tasks.append(asyncio.create_task(reload.serve(self)))
        self.tasks.append(asyncio.create_task(self.mailbox.run()))
        for dev in cfg.serial:
            self.tasks.append(asyncio.create_task(local.run_serial(self, dev)))
        if self.mqtt is not None:
            self.tasks.append(asyncio.create_task(self.mqtt.run()))
        servers = await self._listen()
        log.info(
            "bridge %s running: %d serial link(s), socket %s, log %s",
            cfg.node,
            len(cfg.serial),
            cfg.socket,
            cfg.log_dir,
        )
        return servers

    def _open_log(self, log_dir: str) -> None:
        """The telemetry log's appender; the links resume from what it holds."""
        from edgebus.bridge.telemetry.appender import Appender
        from edgebus.bridge.telemetry.health import resume_links

        cfg = self.cfg
        with bridge_config.blame("[log]", "dir", log_dir, "cannot open the log"):
            self.appender = Appender(
                self.bus, cfg, links=self.links, queue_len=cfg.log_queue, state=self.state
            )
        resume_links(self.state.data, log_dir)  # the writer has recovered the log
        self.tasks.append(asyncio.create_task(self.appender.run()))

    async def _listen(self) -> list[asyncio.Server]:
        """Dial or listen for each [[peer]], listen on the local socket, serve
        the metrics; a start step that fails names its key (blame)."""
        cfg = self.cfg
        blame = bridge_config.blame
        servers = []
        if cfg.peers:
            from edgebus.bridge.links import peers

            for i, p in enumerate(cfg.peers):
                if p.connect:
                    self.tasks.append(asyncio.create_task(peers.dial(self, p)))
                else:
                    with blame(
                        "[[peer]] #%d" % (i + 1), "listen", "%s:%d" % p.listen, "cannot listen"
                    ):
                        servers.append(await peers.listen(self, p))
        if cfg.socket:
            with blame("[bridge]", "socket", cfg.socket, "cannot listen"):
                server, self.remove_socket = await local.serve_local(self, cfg.socket)
                servers.append(server)
        if cfg.metrics:
            from edgebus.bridge import metrics

            with blame("[bridge]", "metrics", cfg.metrics, "cannot listen"):
                self.metrics = metrics.serve(self, cfg.metrics)
            port = self.metrics[0].server_port
            if cfg.worker is not None:  # for the supervisor's /metrics (workers.py)
                split.write_metrics_port(cfg.state_dir, port)
            else:
                log.info(
                    "metrics for Prometheus at http://%s:%d/metrics",
                    cfg.metrics.rpartition(":")[0],
                    port,
                )
        return servers

    async def _wind_down(self, servers: list[asyncio.Server]) -> set[asyncio.Task[Any]]:
        """The stop: the listeners closed, BYE said, the tasks ended, the log
        sealed and the state saved, each step bounded; the tasks still running."""
        t0 = time.monotonic()
        log.info("bridge stopping")
        self.watch.check(list(self.links.values()))  # what is not said yet
        try:
            for server in servers:
                server.close()
            self.remove_socket()
            # Every step is bounded: a peer that stopped reading (a full pty, a
            # stalled broker) must not keep the bridge from sealing its log.
            said, up = await self._say_bye(t0 + STOP_BYE_S)
            t1 = time.monotonic()
            for t in self.tasks:
                t.cancel()
            stuck = await self._bounded("ending tasks", self.tasks)
            t2 = time.monotonic()
            try:
                if self.appender:
                    # Flushes and seals: nothing appended is lost. A failed log is
                    # left to the next start's recovery, the links rewound to what
                    # it acknowledged: the state saved below promises nothing more.
                    self.appender.close()
            finally:
                self.state.save()  # once, with every link's final state
        finally:
            gc.unfreeze()
        t3 = time.monotonic()
        failed = self.appender.health.failure if self.appender else None
        log.info(
            "bridge stopped in %.2f s: BYE to %d of %d link(s) with a session in %.2f s, "
            "tasks ended in %.2f s, log %s and state saved in %.2f s; %d MQTT frame(s) "
            "not taken (their devices send them again)",
            t3 - t0,
            said,
            up,
            t1 - t0,
            t2 - t1,
            "sealed" if failed is None else "left to recovery (failed: %s)" % failed,
            t3 - t2,
            self.dropped_at_stop,
        )
        return stuck

    async def _say_bye(self, deadline: float) -> tuple[int, int]:
        """Close each link with a session (Link.close: BYE), starting no
        close after ``deadline`` (monotonic); returns (closed, links with a
        session). A link without a session has nothing to say: its task's end
        ends it. The MQTT links share one connection, whose publishes wait
        only while its socket is full: one task closes them in turn. Every
        other link (a serial port, a peer) has its own line, which may be
        stalled: a task each."""
        said = 0

        async def bye(links: list[Link]) -> None:
            nonlocal said
            for link in links:
                if time.monotonic() >= deadline:
                    return
                await link.close("bridge stopping")
                said += 1

        mqtt = set(self.mqtt.links.values()) if self.mqtt is not None else set()
        up = [l for l in self.links.values() if l.status == "up"]
        tasks = [asyncio.ensure_future(bye([l])) for l in up if l not in mqtt]
        tasks.append(asyncio.ensure_future(bye([l for l in up if l in mqtt])))
        await self._bounded("saying BYE", tasks)
        return said, len(up)

    async def _bounded(
        self, what: str, tasks: Iterable[asyncio.Task[Any]], timeout: float = STOP_STEP_TIMEOUT
    ) -> set[asyncio.Task[Any]]:
        """Wait for tasks up to timeout; log the ones that did not end."""
        if not tasks:
            return set()
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                log.warning("stopping: %s: %r", what, t.exception())
        if pending:
            log.error(
                "stopping: %s: %d task(s) still running after %g s; going on without them",
                what,
                len(pending),
                timeout,
            )
            for t in pending:
                log.error(
                    "stopping: still running: %s",
                    "; ".join(
                        "%s:%d %s" % (fr.f_code.co_filename, fr.f_lineno, fr.f_code.co_name)
                        for fr in t.get_stack(limit=3)
                    ),
                )
        return pending

    def stop(self) -> None:
        """Begin the stop, which run() makes: from now on no MQTT frame is taken."""
        if self.stopping:
            return
        # Stopping makes garbage (a BYE, a status, a task per link) that would
        # set off full collections over what the sessions made since run()'s
        # freeze (0.3-2 s each at 10,000 devices); nothing made before the
        # stop is garbage to find. run() unfreezes it all when the stop is made.
        gc.freeze()
        if self.mqtt is not None:
            self.dropped_at_stop += self.mqtt.stop_reading()
        self.stopping = True
        self._stop.set()


def _configuration(
    path: str | None, worker: int | None = None, workers: int | None = None
) -> bridge_config.Config | None:
    """The configuration at ``path`` (run as ``workers`` processes, None: as
    it says; ``worker``: that one's part), loaded and prepared; None when
    there is none or it is wrong (said on stderr)."""
    if not path:
        print(
            "edgebus-bridge: error: --config is required; start from the example "
            "configuration %s (the demo, with simulated devices, is `./do demo` in a "
            "checkout)" % bridge_config.EXAMPLE,
            file=sys.stderr,
        )
        return None
    try:
        cfg = split.load(path, worker, workers)
    except bridge_config.ConfigError as e:
        print("edgebus-bridge: %s" % e, file=sys.stderr)
        return None
    try:
        bridge_config.prepare(cfg)
    except bridge_config.ConfigError as e:
        print("edgebus-bridge: %s: %s" % (path, e), file=sys.stderr)
        return None
    return cfg


async def _serve(cfg: bridge_config.Config, path: str) -> None:
    """Run the bridge until SIGTERM or SIGINT (SIGHUP: a reload), then exit."""
    b = Bridge(cfg, path)
    loop = asyncio.get_running_loop()

    def on_signal(signum: int, frame: Any) -> None:
        # Python runs this at once, between two bytecodes of whatever the
        # loop is doing; a handler of the loop's own waits for its turn,
        # which in a start-up storm comes after every link has been fed
        # its backlog (seconds). The backlog goes here; the stop runs on
        # the loop's next turn.
        if b.mqtt is not None and not b.stopping:
            b.dropped_at_stop += b.mqtt.stop_reading(pause=False)
        loop.call_soon_threadsafe(b.stop)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    reloads = set()  # the event loop keeps only weak references to tasks

    def hup() -> None:
        t = asyncio.ensure_future(reload.on_signal(b))
        reloads.add(t)
        t.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, hup)
    stuck = await b.run()
    # The log is sealed and the state saved: leave now. The rest of a
    # normal exit costs time and keeps nothing: asyncio.run() would wait
    # for stuck tasks forever and join its executor (where a connect to
    # an unreachable broker may be waiting), and the interpreter's last
    # collection goes over every link's objects (~1 s at 10,000 devices).
    # Stuck tasks: exit status 1.
    logging.shutdown()
    sys.stdout.flush()
    os._exit(1 if stuck else 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="edgebus-bridge", description=__doc__.splitlines()[0])
    ap.add_argument("--config", "-c", help="the bridge's TOML configuration")
    ap.add_argument(
        "--log-format",
        choices=("auto", "json", "text"),
        default="auto",
        help="text on a terminal, else one JSON object a line (%(default)s)",
    )
    ap.add_argument("--verbose", "-v", action="store_true")
    ap.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="run as N processes, the MQTT devices split among them by node id, one "
        'core each ([bridge] workers; docs/bridge.md, "One host, all its cores")',
    )
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # the supervisor's children
    args = ap.parse_args(argv)
    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        ap.error("--workers must be between 1 and %d" % MAX_WORKERS)
    if args.worker is not None and args.workers is None:
        ap.error("--worker is the supervisor's, with --workers")
    sys.meta_path.insert(0, process.NoPandas)
    process.log_to_stderr(args.log_format, args.verbose, args.worker)
    cfg = _configuration(args.config, args.worker, args.workers)
    if cfg is None:
        return 2
    if cfg.workers > 1 and cfg.worker is None:
        from edgebus.bridge.workers import Supervisor

        child = ["--log-format", args.log_format] + (["--verbose"] if args.verbose else [])
        try:
            return asyncio.run(Supervisor(cfg, args.config, child).run())
        except bridge_config.ConfigError as e:
            print("edgebus-bridge: %s: %s" % (args.config, e), file=sys.stderr)
            return 2
    try:
        asyncio.run(_serve(cfg, args.config))
    except bridge_config.ConfigError as e:  # a start step's (Bridge.run: blame)
        print("edgebus-bridge: %s: %s" % (args.config, e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
