"""What the shell-typable bus commands (pub, sub, watch, call, whoami) share:
the socket argument, joining the bridge over its unix socket, VALUE parsing,
output lines, and one exit code per kind of failure (status finds the bridge
and reports failures with the same pieces)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Iterable, Self

import edgebus
from edgebus.bridge import split
from edgebus.client.local import SOCKET_ENV, attach_local, config_socket, default_socket

if TYPE_CHECKING:
    import argparse

    from edgebus import Origin
    from edgebus.link.link import Link

# Exit codes (docs/shell.md); 2 is argparse's usage error.
DENIED, NO_ROUTE, TIMEOUT, UNREACHABLE, GONE, FAILED, OVERFLOW = 3, 4, 5, 6, 7, 8, 9
EPILOG = (
    'VALUE is parsed as JSON if it parses (42, true, null, "quoted", {"a": 1}), '
    "else taken as a string. Exit codes: 0 ok, 2 usage, 3 denied by the bridge's ACL, "
    "4 no route (nothing serves the topic), 5 timeout, 6 bridge unreachable, "
    "7 bridge went away, 8 call failed, 9 could not keep up (--full disconnect)."
)
ROUTE_WAIT = 5.0  # s for the session and the bridge's routes to come up


class Fail(Exception):
    """A failure the command reports as one line and exits with ``code``."""

    def __init__(self, code: int, msg: str) -> None:
        super().__init__(msg)
        self.code = code


def add_socket(p: argparse.ArgumentParser, epilog: str | None = EPILOG) -> None:
    """--socket and --config, the ways a command finds the bridge (socket_path)."""
    p.add_argument(
        "--socket",
        "-s",
        help="the bridge's unix socket (default: $%s, else %s)" % (SOCKET_ENV, default_socket()),
    )
    p.add_argument("--config", "-c", help="take the socket from this bridge configuration")
    p.epilog = epilog


def unreachable(path: str, e: OSError) -> Fail:
    """The Fail (UNREACHABLE) for a connection to the socket that failed: no
    socket, or one nobody listens on, is no bridge running (a bridge removes
    its socket as it stops; a killed one leaves it)."""
    if isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
        return Fail(
            UNREACHABLE,
            "no bridge is running at %s (start one: edgebus-bridge --config FILE)" % path,
        )
    return Fail(UNREACHABLE, "cannot reach the bridge at %s: %s" % (path, e.strerror or e))


def socket_path(args: argparse.Namespace) -> str:
    if args.socket:
        return args.socket
    if args.config:
        try:
            sock = config_socket(args.config)
        except ValueError as e:
            raise Fail(2, str(e)) from None
        if sock:
            return sock
        raise Fail(UNREACHABLE, "%s sets no [bridge] socket" % args.config)
    return default_socket()


def value(text: str) -> Any:
    """VALUE as JSON if it parses, else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def render(v: Any) -> str:
    """A payload for a text line: strings as they are, the rest as JSON."""
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        return "0x" + bytes(v).hex()
    return json.dumps(v)


def jsonable(v: Any) -> Any:
    return {"hex": bytes(v).hex()} if isinstance(v, (bytes, bytearray)) else v


def provenance(origin: Origin) -> dict[str, Any]:
    """What the client knows of a message's origin: the bridge it came
    through and the extra fields (sequence number, time...) it carried."""
    return {"bridge": origin.peer_node, "extra": dict(origin.extra or {})}


def holder(topic: str | None, n: int) -> int:
    """The worker (of ``n``) that holds ``topic``'s device: dev/NODE/...'s
    by NODE (bridge/split.py); any other topic, worker 0."""
    words = (topic or "").split("/")
    if n > 1 and len(words) > 1 and words[0] == "dev" and words[1] not in ("+", "#"):
        return split.worker_of(words[1], n)
    return 0


def emit(line: str) -> None:
    print(line, flush=True)


async def worker_sockets(path: str) -> list[str]:
    """The sockets of the bridge at ``path``: [path], or, for a bridge of
    several workers (bridge/workers.py), every worker's, worker 0's (path)
    first, as worker 0 says (a worker's socket file beside path may be one a
    killed bridge left)."""
    if not os.path.exists(split.worker_socket(path, 1)):
        return [path]
    async with Session(path, discover=False) as s:
        st = await s.call("bridge/status", {"links": False}, ROUTE_WAIT)
    sup = st.get("workers")
    return list(sup["sockets"]) if sup else [path]


class Session:
    """A bus joined to the bridge's host bus over its unix socket.

    A bridge of several workers (bridge/workers.py) is joined where it
    matters: ``route``, a topic (dev/NODE/...), puts the session (its
    exports, calls and bridge/ endpoints) on the worker that holds NODE;
    ``everywhere`` adds a link to each other worker for the imports and the
    devices' endpoints (dev/#), so that a watch sees the whole fleet."""

    def __init__(
        self,
        path: str,
        exports: Iterable[tuple[str, str]] = (),
        imports: Iterable[tuple[str, str]] = (),
        q_length: int = 64,
        route: str | None = None,
        everywhere: bool = False,
        discover: bool = True,
    ) -> None:
        self.path = path
        self.bus = edgebus.Bus(q_length=q_length)
        self.conn = self.bus.connect()
        self.exports = list(exports)
        self.imports = list(imports)
        self.route = route
        self.everywhere = everywhere
        self.discover = discover
        self.link: Link | None = None
        self.task: asyncio.Task[Any] | None = None
        self.others: list[tuple[Link, asyncio.Task[Any]]] = []  # the other workers'

    async def _attach(self, path: str, main: bool) -> tuple[Link, asyncio.Task[Any]]:
        try:
            return await attach_local(
                self.bus,
                path,
                node="cli",
                exports=self.exports if main else (),
                imports=self.imports,
                export_calls=(),
                import_calls=[("#", "")] if main else [("dev/#", "")],
            )
        except OSError as e:
            raise unreachable(path, e) from None

    async def __aenter__(self) -> Self:
        socks = await worker_sockets(self.path) if self.discover else [self.path]
        main = socks[holder(self.route, len(socks))]
        self.path = main
        self.link, self.task = await self._attach(main, True)
        if self.everywhere:
            for p in socks:
                if p != main:
                    self.others.append(await self._attach(p, False))
        # The bridge offers its own endpoints to every client: once they are
        # here, the session is up and the routes have arrived.
        await self.until(
            lambda: ("bridge", "whoami") in self.bus.endpoints(),
            ROUTE_WAIT,
            "no session with the bridge at %s within %g s (a bridge older than "
            "these commands offers no bridge/whoami)" % (self.path, ROUTE_WAIT),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.link is not None and self.task is not None  # for mypy: entered
        for link, task in [(self.link, self.task)] + self.others:
            await link.close("done")
            task.cancel()

    async def until(self, cond: Callable[[], Any], timeout: float, what: str) -> None:
        for _ in range(int(timeout / 0.01)):
            if cond():
                return
            if self.task is not None and self.task.done():
                raise Fail(GONE, "the bridge at %s closed the connection" % self.path)
            await asyncio.sleep(0.01)
        raise Fail(UNREACHABLE, what)

    async def synced(self) -> None:
        """Wait for the bridge's snapshot of its retained values, which comes
        first on a session: from then on a view or watch here holds them."""
        assert self.link is not None  # for mypy: entered
        links = [self.link] + [lk for lk, _ in self.others]  # every worker's snapshot
        await self.until(
            lambda: all(lk.counters.get("syncs", 0) >= 1 for lk in links),
            ROUTE_WAIT,
            "no snapshot from the bridge within %g s" % ROUTE_WAIT,
        )

    async def call(self, topic: str, payload: Any, timeout: float) -> Any:
        """The reply, or Fail with the code of what went wrong."""
        try:
            return await self.conn.call(topic, payload, timeout=timeout)
        except edgebus.NoRoute:
            raise Fail(NO_ROUTE, "no route: nothing serves %s" % topic) from None
        except edgebus.Timeout:
            raise Fail(
                TIMEOUT, "timeout: %s did not answer within %g s" % (topic, timeout)
            ) from None
        except edgebus.Failed as e:
            raise Fail(FAILED, "%s failed: %s" % (topic, render(e.reason))) from None
        except edgebus.CallError as e:
            # A refusal at the bridge comes back as the call closed with its reason.
            if e.reason == "denied":
                raise Fail(
                    DENIED, "denied: the bridge's ACL does not let you call %s" % topic
                ) from None
            if e.reason == "no_route":
                raise Fail(NO_ROUTE, "no route: nothing serves %s" % topic) from None
            raise Fail(FAILED, "%s: %s" % (topic, e.reason)) from None

    async def check(self, action: str, topic: str, what: str) -> None:
        """Fail(DENIED) unless the bridge's ACL lets us do action on topic."""
        r = await self.call("bridge/may", {"action": action, "topic": topic}, ROUTE_WAIT)
        if not r["allowed"]:
            raise Fail(DENIED, "denied: %s (%s)" % (what, r.get("reason")))

    async def gone(self) -> None:
        """Wait until the bridge closes the connection."""
        assert self.task is not None  # for mypy: entered
        await asyncio.wait({self.task})


def main(name: str, coro: Coroutine[Any, Any, int | None]) -> int:
    """Run a command's coroutine; its Fail becomes one line and the exit code."""
    try:
        return asyncio.run(coro) or 0
    except Fail as e:
        print("edgebus %s: %s" % (name, e), file=sys.stderr)
        return e.code
    except ValueError as e:  # a topic or pattern the bus refuses
        print("edgebus %s: %s" % (name, e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `edgebus sub ... | head -1`: the reader has what it wanted
        return 0


async def follow(
    s: Session, feed: Any, show: Callable[[Any], bool | None], count: int | None = None
) -> None:
    """Print feed items with show() until count of them, an overflow, or the
    bridge going away (each a Fail)."""
    gone = asyncio.ensure_future(s.gone())
    gone.add_done_callback(lambda _: feed.close())  # what is queued still drains
    n = 0
    while count is None or n < count:
        item = await feed.recv()
        if item is None:
            break
        if show(item):
            n += 1
    if feed.dropped():
        print(
            "edgebus: %d messages dropped: this command could not keep up (--full %s)"
            % (feed.dropped(), feed.stats()["full"]),
            file=sys.stderr,
        )
    if feed.why() == "overflow":
        raise Fail(
            OVERFLOW,
            "could not keep up (%d queued): disconnected as --full "
            "disconnect asks" % feed.stats()["queue_len"],
        )
    if gone.done():
        raise Fail(GONE, "the bridge at %s went away" % s.path)
    gone.cancel()


def add_feed(p: argparse.ArgumentParser) -> None:
    """Options of the commands that print a feed (sub, watch)."""
    from edgebus.feed import POLICIES

    p.add_argument(
        "--json", action="store_true", help="one JSON object per line instead of 'TOPIC VALUE'"
    )
    p.add_argument(
        "--provenance",
        "-p",
        action="store_true",
        help="add where each message came from (the bridge, its extra fields)",
    )
    p.add_argument("--count", "-n", type=int, help="exit after N messages")
    p.add_argument(
        "--queue",
        type=int,
        default=256,
        help="messages held while this command is slower than the bus (%(default)s)",
    )
    p.add_argument(
        "--full",
        choices=POLICIES,
        default="drop_oldest",
        help="when the queue is full: drop_oldest, reject_newest (the new one), "
        "or disconnect (exit 9); drops are counted and reported (%(default)s)",
    )
