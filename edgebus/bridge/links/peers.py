"""Bridge-to-bridge links over TCP: a gateway federates up to a site host,
or any two bridges join, with the link protocol, keys and rules a device
link has. A ``[[peer]]`` with ``connect`` is dialled (and redialled with
backoff); one with ``listen`` waits for its peer on that address. Routes
and publishes relay across them by their rules (docs/protocol.md §10)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from edgebus.bridge.links.ticker import retry_backoff
from edgebus.client.local import host_spool
from edgebus.compat import wait_for
from edgebus.link.link import Link
from edgebus.link.stream import StreamTransport

if TYPE_CHECKING:
    from edgebus.bridge.config import Peer
    from edgebus.bridge.context import BridgeView

log = logging.getLogger("edgebus.bridge")

# Both ends are hosts: frames as large as a local client's (a status snapshot).
PEER_MAX_LEN = 65536
# A dial that gets no TCP connection within this many seconds is given up and
# tried again after the backoff (the OS's own wait is minutes). Once
# connected, the link's heartbeats and liveness catch a half-open connection.
CONNECT_TIMEOUT = 10.0


def peer_link(bridge: BridgeView, p: Peer) -> Link:
    """The Link for [[peer]] ``p`` (its id is ``peer:<node>``)."""
    link_id = "peer:" + p.node
    link = Link(
        bridge.bus,
        bridge.cfg.node,
        key=bridge.keystore.source(p.node, p.key),
        role="initiator" if p.connect else "responder",
        link_id=link_id,
        peer=p.node,
        state=bridge.state.for_link(link_id),
        # with a log: acknowledged once logged, as a device's
        opts=bridge.link_options.make(
            "peer",
            p.paced,
            seal=bridge.cfg.seal_for("peer", p.seal),
            exports=p.exports,
            imports=p.imports,
            export_calls=p.export_calls,
            import_calls=p.import_calls,
            priority=p.priority,
            max_len=PEER_MAX_LEN,
            spool=host_spool(PEER_MAX_LEN, 64),
        ),
    )
    bridge.add_link(link, "peer")
    if bridge.cfg.log_dir is not None and p.exports:
        # What the log holds and the peer had not acknowledged is given
        # again after a restart (relay.py), beside what comes live.
        from edgebus.bridge.links.relay import Resender, resender_path

        r = Resender(link, bridge.cfg.log_dir, resender_path(bridge.cfg.state_dir, p.node))
        bridge.tasks.append(asyncio.create_task(r.run()))
    return link


async def dial(bridge: BridgeView, p: Peer) -> None:
    """Keep the link to peer ``p`` up: connect, run, reconnect with backoff."""
    link = peer_link(bridge, p)
    assert p.connect is not None  # for mypy: dialled only for a connect address
    host, port = p.connect
    backoff = retry_backoff(p.backoff_max)
    while not bridge.stopping:
        try:
            r, w = await wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as e:
            why = (
                "no answer within %s s" % CONNECT_TIMEOUT
                if isinstance(e, asyncio.TimeoutError)
                else e.strerror or e
            )
            link.last_error = "connect %s:%d: %s" % (host, port, why)
            await bridge.sleep(backoff.next())
            continue
        backoff.reset()
        log.info("peer %s: connected to %s:%d", p.node, host, port)
        try:
            await link.run(StreamTransport(r, w, PEER_MAX_LEN))
        finally:
            w.close()
        if not bridge.stopping:
            log.warning("peer %s: link ended (%s); reconnecting", p.node, link.last_error)
            await bridge.sleep(backoff.next())


async def listen(bridge: BridgeView, p: Peer) -> asyncio.Server:
    """Wait for peer ``p`` on its listen address; a new connection replaces
    the current one (the old may be half-open after a network cut).
    Returns the asyncio server."""
    link = peer_link(bridge, p)
    current: list[tuple[asyncio.StreamWriter, asyncio.Task[Any]]] = []  # the one served

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while current:
            ow, ot = current.pop()
            ow.close()
            try:
                await ot
            except Exception:  # the old connection's end is not this one's concern
                pass
        log.info("peer %s: connection from %s", p.node, w.get_extra_info("peername"))
        task = asyncio.ensure_future(link.run(StreamTransport(r, w, PEER_MAX_LEN)))
        current.append((w, task))
        bridge.tasks.append(task)  # the bridge's stop ends it with the others
        try:
            await task
        except asyncio.CancelledError:
            pass  # the bridge is stopping: a normal end for this connection
        finally:
            w.close()
            if current and current[-1][1] is task:
                current.pop()

    assert p.listen is not None  # for mypy: awaited only at a listen address
    host, port = p.listen
    return await asyncio.start_server(handle, host, port)
