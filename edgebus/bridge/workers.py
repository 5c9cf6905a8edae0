"""``edgebus-bridge --workers N``: one configuration run as N bridge
processes, each a shard of the MQTT fleet (bridge/split.py says who holds
what), under this supervisor, which

- starts them, and starts again one that exits while the bridge runs (its
  devices spool meanwhile and resend what was not acknowledged: nothing is
  lost), after a backoff that grows while it keeps failing; one whose event
  loop hangs (no sign of life for [bridge] worker_hang s) is killed first;
- stops the whole bridge when one cannot start (exit status 2: its
  configuration or a start step is wrong, which a restart would not mend);
- passes SIGTERM/SIGINT (stop) and SIGHUP (reload) on to each, and exits
  once all have stopped;
- serves ``[bridge] metrics`` over all of them: each worker's series with a
  ``worker`` label, and its own (workers up, restarts); and /fleet.json,
  the workers' rows merged (bridge/fleetpage.py);
- keeps STATE_DIR/workers.json (each worker's pid, since, restarts, last
  exit), which worker 0 adds to its status (`edgebus status` shows all).

Each process has its own event loop and interpreter, so N workers use N
cores; one process is bound by one core (BENCHMARKS.md section 8).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
import urllib.request
from typing import TYPE_CHECKING, Any, Iterator

from edgebus.bridge import split
from edgebus.bridge.config import blame
from edgebus.bridge.links.ticker import retry_backoff
from edgebus.tlog import write_atomically

if TYPE_CHECKING:
    from edgebus.bridge.config import Config

log = logging.getLogger("edgebus.bridge")

# A worker that ran this long before it exited starts again at once (its
# backoff is reset): it was not failing in a loop.
HEALTHY_S = 30.0
# A worker that exits with status 2 sooner than this after its start could
# not start (its configuration, a port, a directory): the bridge stops.
START_S = 60.0
# How long a stop waits for the workers (each bounds its own stop: the
# daemon's STOP_* and the log's seal) before it kills those still running.
STOP_WAIT_S = 60.0
CHECK_S = 1.0  # how often the supervisor looks for a worker's sign of life
SCRAPE_TIMEOUT = 10.0  # seconds the supervisor's /metrics waits for a worker's


class Worker:
    """One worker process and what the supervisor knows of it."""

    def __init__(self, i: int) -> None:
        self.i = i
        self.proc: asyncio.subprocess.Process | None = None
        self.since = 0.0  # Unix time of its last start
        self.restarts = 0
        self.hangs = 0  # times it was killed for showing no sign of life
        self.last_exit: int | None = None

    def view(self) -> dict[str, Any]:
        p = self.proc
        return {
            "worker": self.i,
            "pid": p.pid if p is not None and p.returncode is None else None,
            "since": round(self.since, 1),
            "restarts": self.restarts,
            "hangs": self.hangs,
            "last_exit": self.last_exit,
        }


def _die_with_parent() -> None:
    """In the child before it runs: SIGTERM when the supervisor dies (even
    by SIGKILL), so that no worker outlives it holding its devices."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the workers outlive a killed supervisor
        pass


class Supervisor:
    """Runs ``cfg.workers`` workers of the configuration at ``path``."""

    def __init__(self, cfg: Config, path: str, child_args: list[str]) -> None:
        self.cfg = cfg
        self.path = path
        self.child_args = child_args  # --log-format, -v: as given to the supervisor
        self.workers = [Worker(i) for i in range(cfg.workers)]
        self.stopping = False
        self.failed: str | None = None  # why the bridge stops on its own (a worker cannot start)
        self._stop = asyncio.Event()

    def _write_status(self) -> None:
        d = {
            "pid": os.getpid(),
            "workers": [w.view() for w in self.workers],
            "sockets": split.sockets(self.cfg),
        }
        path = os.path.join(self.cfg.state_dir, split.STATUS_FILE)
        data = json.dumps(d).encode()
        write_atomically(path, path + ".tmp", lambda f: f.write(data), durable=False)

    async def _start(self, w: Worker) -> None:
        wd = split.worker_dir(self.cfg.state_dir, w.i)
        for f in (split.METRICS_PORT_FILE, split.ALIVE_FILE):  # its last run's
            try:
                os.unlink(os.path.join(wd, f))
            except FileNotFoundError:
                pass
        cmd = [sys.executable, "-m", "edgebus.bridge.daemon", "--config", self.path]
        cmd += ["--workers", str(self.cfg.workers), "--worker", str(w.i)] + self.child_args
        w.proc = await asyncio.create_subprocess_exec(*cmd, preexec_fn=_die_with_parent)
        w.since = time.time()
        self._write_status()

    async def _keep(self, w: Worker) -> None:
        """Run worker ``w`` until the bridge stops, starting it again when it exits."""
        backoff = retry_backoff()
        while not self.stopping:
            await self._start(w)
            assert w.proc is not None
            t0 = time.monotonic()
            code = await self._watch(w)
            w.last_exit = code
            ran = time.monotonic() - t0
            if self.stopping:
                break
            if code == 2 and ran < START_S:
                self.failed = "worker %d could not start (exit status 2)" % w.i
                log.error("%s: stopping the bridge; the worker said why above", self.failed)
                self.stop()
                break
            if ran > HEALTHY_S:
                backoff.reset()
            delay = backoff.next()
            w.restarts += 1
            log.error(
                "worker %d (pid %d) exited with status %s after %.1f s; starting it again in "
                "%.1f s (restart %d; its devices resend what it had not acknowledged)",
                w.i,
                w.proc.pid,
                code,
                ran,
                delay,
                w.restarts,
            )
            self._write_status()
            try:
                await asyncio.wait_for(self._stop.wait(), delay)
            except asyncio.TimeoutError:
                pass
        self._write_status()

    async def _watch(self, w: Worker) -> int:
        """Worker ``w``'s exit status, once it exits; one whose event loop shows
        no sign of life for [bridge] worker_hang s (split.show_alive; since
        its start, before its first) is killed first, to be started again."""
        assert w.proc is not None
        wd = split.worker_dir(self.cfg.state_dir, w.i)
        while True:
            try:
                return await asyncio.wait_for(w.proc.wait(), CHECK_S)
            except asyncio.TimeoutError:
                pass
            quiet = time.time() - max(split.last_alive(wd) or 0.0, w.since)
            if not self.stopping and quiet > self.cfg.worker_hang:
                log.error(
                    "worker %d (pid %d) showed no sign of life for %.0f s (hung): killed",
                    w.i,
                    w.proc.pid,
                    quiet,
                )
                w.hangs += 1
                w.proc.kill()

    def signal_all(self, sig: int) -> None:
        for w in self.workers:
            if w.proc is not None and w.proc.returncode is None:
                try:
                    w.proc.send_signal(sig)
                except ProcessLookupError:
                    pass

    def stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            self._stop.set()
            self.signal_all(signal.SIGTERM)

    async def run(self) -> int:
        """Start the workers and keep them until a stop; the exit status."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        loop.add_signal_handler(signal.SIGHUP, lambda: self.signal_all(signal.SIGHUP))
        os.makedirs(self.cfg.state_dir, exist_ok=True)
        metrics = None
        if self.cfg.metrics:
            with blame("[bridge]", "metrics", self.cfg.metrics, "cannot listen"):
                metrics = serve_metrics(self, self.cfg.metrics)
            log.info(
                "metrics for Prometheus at http://%s:%d/metrics (every worker's)",
                self.cfg.metrics.rpartition(":")[0],
                metrics[0].server_port,
            )
        log.info(
            "bridge %s: %d workers, its MQTT devices split among them by node id; socket %s",
            self.cfg.node,
            len(self.workers),
            self.cfg.socket,
        )
        keepers = [asyncio.create_task(self._keep(w)) for w in self.workers]
        await self._stop.wait()
        done, late = await asyncio.wait(keepers, timeout=STOP_WAIT_S)
        if late:
            log.error("workers still running %.0f s after the stop: killed", STOP_WAIT_S)
            self.signal_all(signal.SIGKILL)
            await asyncio.wait(late)
        if metrics is not None:
            metrics[0].shutdown()
        if self.failed:
            return 2
        # -SIGTERM: a worker the stop found still starting, before its own
        # handler (which saves its state and exits 0) was there: nothing to save.
        clean = (0, -signal.SIGTERM)
        return 0 if all(w.last_exit in clean for w in self.workers) else 1


# /metrics over every worker.


def _scrape(port: int) -> str:
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=SCRAPE_TIMEOUT) as r:
        text: str = r.read().decode()
        return text


class WorkersCollector:
    """Each worker's series (scraped from its loopback /metrics, parsed with
    prometheus-client's parser) with a ``worker`` label, one family per
    name; and the supervisor's own: workers up and restarts."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        from prometheus_client.parser import text_string_to_metric_families

        up = GaugeMetricFamily(
            "edgebus_worker_up",
            "Whether the bridge's worker process answered this scrape (1) or not (0)",
            labels=["worker"],
        )
        restarts = CounterMetricFamily(
            "edgebus_worker_restarts",
            "Times the supervisor started the worker again after it exited",
            labels=["worker"],
        )
        families: dict[str, Any] = {}
        for w in self.sup.workers:
            i = str(w.i)
            restarts.add_metric([i], w.restarts)
            port = split.metrics_port(split.worker_dir(self.sup.cfg.state_dir, w.i))
            try:
                if port is None:
                    raise OSError("not serving yet")
                text = _scrape(port)
            except OSError:
                up.add_metric([i], 0)
                continue
            up.add_metric([i], 1)
            for fam in text_string_to_metric_families(text):
                merged = families.get(fam.name)
                if merged is None:
                    merged = families[fam.name] = type(fam)(fam.name, fam.documentation, fam.type)
                for s in fam.samples:
                    merged.add_sample(s.name, dict(s.labels, worker=i), s.value)
        yield up
        yield restarts
        yield from families.values()


def serve_metrics(sup: Supervisor, addr: str) -> tuple[Any, Any]:
    """Serve the supervisor's /metrics and /fleet on ``addr`` ("host:port"): (server, thread)."""
    from prometheus_client import CollectorRegistry, make_wsgi_app

    from edgebus.bridge import fleetpage

    reg = CollectorRegistry()
    reg.register(WorkersCollector(sup))

    def fleet(qs: str) -> dict[str, Any]:  # every worker's rows (fleetpage.merged)
        ports = [split.metrics_port(split.worker_dir(sup.cfg.state_dir, w.i)) for w in sup.workers]
        return fleetpage.merged(ports, qs, sup.cfg.node, SCRAPE_TIMEOUT)

    return fleetpage.start_server(addr, fleetpage.app(make_wsgi_app(reg), fleet))
