"""One configuration split among worker processes (``[bridge] workers``,
``edgebus-bridge --workers N``; the supervisor is bridge/workers.py).

Each worker is a shard of the fleet on the same broker ([mqtt] shard: it
subscribes to its own devices' topics only), holding the MQTT devices whose
node id hashes to it, from ``[mqtt].devices`` and the keystore alike. The
hash is CRC-32 of the node id: the same on every host and every run, so a
device stays with its worker across restarts while N stays the same.

Worker 0 also holds what cannot be split: the serial ports, the [[peer]]
links and the configured socket. Every worker has its own state directory
(STATE_DIR/wI: its devices' sessions), its own log (LOG_DIR/wI, which
``edgebus ingest --log LOG_DIR/w*`` reads as one table), its own MQTT client
id (CLIENT_ID-wI) and a socket of its own beside the configured one
(SOCKET.wI; worker 0's is SOCKET itself). They share the keystore and the
node id (the devices' handshakes name it). /metrics is the supervisor's, over
all of them (each worker serves its own on a loopback port it writes to
STATE_DIR/wI/metrics.port).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import zlib
from typing import TYPE_CHECKING, Any

from edgebus.bridge import config as bridge_config
from edgebus.tlog import write_atomically

if TYPE_CHECKING:
    from edgebus.bridge.config import Config

# The supervisor's account of its workers, in the configured state_dir.
STATUS_FILE = "workers.json"
# A worker's sign of life for its supervisor: this file's time, touched from
# its event loop every ALIVE_EVERY s (a loop that hangs stops touching it).
ALIVE_FILE = "alive"
ALIVE_EVERY = 1.0
# Where a worker writes the loopback port its /metrics listens on.
METRICS_PORT_FILE = "metrics.port"


def worker_of(node: str, n: int) -> int:
    """The worker (0..n-1) that holds device ``node`` among ``n``."""
    return zlib.crc32(node.encode()) % n if n > 1 else 0


def worker_dir(base: str, i: int) -> str:
    """Worker ``i``'s part of directory ``base`` (its state, its log)."""
    return os.path.join(base, "w%d" % i)


def worker_socket(socket: str, i: int) -> str:
    """Worker ``i``'s socket, beside the configured ``socket``."""
    return socket if i == 0 else "%s.w%d" % (socket, i)


def sockets(cfg: Config) -> list[str]:
    """Every worker's socket, worker 0's (the configured one) first; [] without one."""
    if not cfg.socket:
        return []
    return [worker_socket(cfg.socket, i) for i in range(cfg.workers)]


def load(path: str, worker: int | None = None, n: int | None = None) -> Config:
    """config.load(path, n), and of it the part worker ``worker`` holds (None: all)."""
    cfg = bridge_config.load(path, n)
    return cfg if worker is None else for_worker(cfg, worker)


def for_worker(cfg: Config, i: int) -> Config:
    """Worker ``i``'s configuration out of ``cfg`` (cfg.workers of them)."""
    n = cfg.workers
    if not 0 <= i < n:
        raise ValueError("worker %d of %d" % (i, n))
    mq = cfg.mqtt
    if mq is not None:
        mine = {node for node in mq.keys if worker_of(node, n) == i}
        mq = dataclasses.replace(
            mq,
            shard=True,
            client_id="%s-w%d" % (mq.client_id, i),
            part=(i, n),
            keys={k: v for k, v in mq.keys.items() if k in mine},
            seals={k: v for k, v in mq.seals.items() if k in mine},
            paced={k: v for k, v in mq.paced.items() if k in mine},
        )
    return dataclasses.replace(
        cfg,
        worker=i,
        mqtt=mq,
        state_dir=worker_dir(cfg.state_dir, i),
        log_dir=cfg.log_dir and worker_dir(cfg.log_dir, i),
        socket=cfg.socket and worker_socket(cfg.socket, i),
        # the supervisor serves the configured address, over every worker
        metrics="127.0.0.1:0" if cfg.metrics else None,
        serial=cfg.serial if i == 0 else [],
        peers=cfg.peers if i == 0 else [],
    )


def write_metrics_port(state_dir: str, port: int) -> None:
    """Say where this worker's /metrics listens (read by metrics_port)."""
    path = os.path.join(state_dir, METRICS_PORT_FILE)
    write_atomically(path, path + ".tmp", lambda f: f.write(b"%d\n" % port), durable=False)


def metrics_port(state_dir: str) -> int | None:
    """The loopback port worker's /metrics listens on (its state_dir), or None."""
    try:
        with open(os.path.join(state_dir, METRICS_PORT_FILE)) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def read_status(state_dir: str) -> dict[str, Any] | None:
    """The supervisor's STATUS_FILE in the configured ``state_dir``, or None."""
    try:
        with open(os.path.join(state_dir, STATUS_FILE)) as f:
            d: dict[str, Any] = json.load(f)
            return d
    except (OSError, ValueError):
        return None


async def show_alive(state_dir: str) -> None:
    """A worker's task: touch its ALIVE_FILE every ALIVE_EVERY s, for ever."""
    path = os.path.join(state_dir, ALIVE_FILE)
    while True:
        try:
            with open(path, "a"):
                pass
            os.utime(path)
        except OSError:  # a full disk: the supervisor's grace is long enough
            pass
        await asyncio.sleep(ALIVE_EVERY)


def last_alive(state_dir: str) -> float | None:
    """When the worker whose state_dir this is last showed it lives, or None."""
    try:
        return os.stat(os.path.join(state_dir, ALIVE_FILE)).st_mtime
    except OSError:
        return None
