"""The bridge's local unix socket from both ends: where it is, the largest
frame on it, a host link's spool, joining it (``attach_local``), and the link
counters its status replies count as errors. The bridge serves the socket
(bridge/links/local.py); the shell commands (tools/) join it, and need nothing of
the daemon's."""

from __future__ import annotations

import asyncio
import os
import tomllib
from typing import TYPE_CHECKING, Any, Iterable

from edgebus.link.link import Link
from edgebus.link.stream import StreamTransport

if TYPE_CHECKING:
    from edgebus import Bus

    # A Link's rules: (pattern, prefix) pairs.
    Rules = Iterable[tuple[str, str]]

# The environment variable naming the bridge's socket for the shell commands.
SOCKET_ENV = "EDGEBUS_SOCKET"
# The bridge's [bridge] state_dir when its configuration sets none.
STATE_DIR = "./edgebus-state"
# Local clients are processes on the same host: frames may be as large as a
# status snapshot, unlike a UART's.
LOCAL_MAX_LEN = 65536
# 1 KB bodies a client's own spool holds at once (the bridge's side of a
# client's link holds its [bridge] client_queue).
CLIENT_BURST = 32
# The link counters that count as errors, in `edgebus status` and /metrics.
ERRORS = (
    "bad_frames",
    "auth_failures",
    "errors",
    "refused",
    "denied",
    "forged",
    "replayed",
    # a device's frames refused for its own doing (bridge/links/quota.py)
    "over_quota",
    "over_bytes",
    "over_window",
    "over_share",
    "retained_refused",
    "unpaced_refused",
    # frames longer than the link's max_len, dropped on arrival (link/rx.py oversize_in)
    "oversize_in",
)


def default_socket() -> str:
    """The socket the host commands reach by default: $EDGEBUS_SOCKET, else
    bridge.sock in the default state directory."""
    return os.environ.get(SOCKET_ENV) or os.path.join(STATE_DIR, "bridge.sock")


def config_socket(path: str) -> str | None:
    """The [bridge] socket the configuration at ``path`` sets (relative to the
    file's directory), None when it sets none, read without the rest of the
    file; ValueError naming the file when it cannot be read."""
    try:
        with open(path, "rb") as f:
            b = tomllib.load(f).get("bridge", {})
    except OSError as e:
        raise ValueError("%s: %s" % (path, e.strerror)) from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError("%s: not valid TOML: %s" % (path, e)) from None
    except RecursionError:  # tomllib recurses per level of nesting
        raise ValueError("%s: not valid TOML: nested too deeply" % path) from None
    sock = b.get("socket") if isinstance(b, dict) else None
    if sock is None:
        return None
    if not isinstance(sock, str):
        raise ValueError("%s: [bridge]: socket must be a string, got %r" % (path, sock))
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)), sock))


def host_spool(max_len: int, burst: int) -> int:
    """Spool bytes for a link between hosts whose bodies reach max_len: the
    largest body twice over and a burst of ``burst`` 1 KB ones. A spool
    refuses a body it cannot hold (Link's default, 2 KB, is a board's)."""
    return 2 * (max_len + 16) + burst * 1024


async def attach_local(
    bus: Bus,
    path: str,
    node: str = "local",
    exports: Rules = (("#", ""),),
    imports: Rules = (("#", ""),),
    export_calls: Rules = (("#", ""),),
    import_calls: Rules = (("#", ""),),
    heartbeat: float = 5.0,
) -> tuple[Link, asyncio.Task[Any]]:
    """Join ``bus`` to the bridge's host bus over its unix socket (the client
    side of the bridge's serve_local). Returns (link, task); await
    link.close() to leave."""
    r, w = await asyncio.open_unix_connection(path)
    link = Link(
        bus,
        node,
        key=None,
        role="initiator",
        exports=list(exports),
        imports=list(imports),
        export_calls=list(export_calls),
        import_calls=list(import_calls),
        heartbeat=heartbeat,
        status=False,
        max_len=LOCAL_MAX_LEN,
        spool=host_spool(LOCAL_MAX_LEN, CLIENT_BURST),
    )
    task = asyncio.create_task(link.run(StreamTransport(r, w, LOCAL_MAX_LEN)))
    return link, task
