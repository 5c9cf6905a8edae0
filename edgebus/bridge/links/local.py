"""Device links of the bridge: serial ports and local unix-socket clients.

Each keeps one Link object per device for the bridge's life, so the peer's
generation and sequence state survive reconnections (and, through the state
file, restarts of the bridge)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from typing import TYPE_CHECKING, Callable, Iterable

from edgebus.bridge import textmode
from edgebus.bridge.links.ticker import retry_backoff
from edgebus.client.local import LOCAL_MAX_LEN, host_spool
from edgebus.link.frame import DELIM
from edgebus.link.link import Link
from edgebus.link.stream import StreamTransport

if TYPE_CHECKING:
    from edgebus.bridge.config import Device
    from edgebus.bridge.context import BridgeView

    # A Link's rules: (pattern, prefix) pairs.
    Rules = Iterable[tuple[str, str]]

log = logging.getLogger("edgebus.bridge")


async def run_serial(bridge: BridgeView, dev: Device) -> Link | None:
    """Keep a serial device joined: open the port, run the link, and when the
    port vanishes (USB unplug) or fails, retry with backoff until it returns."""
    try:
        # Imported here: the shell commands and a bridge without serial
        # devices use this module too, and need no pyserial.
        import serial
        import serial_asyncio
    except ImportError as e:
        log.error(
            "serial %s: cannot open serial ports: %s (pip install 'edgebus[bridge]')", dev.node, e
        )
        return None
    link_id = "serial:" + dev.node
    link = Link(
        bridge.bus,
        bridge.cfg.node,
        key=bridge.keystore.source(dev.node, dev.key),
        role="responder",
        link_id=link_id,
        peer=dev.node,
        state=bridge.state.for_link(link_id),
        opts=bridge.link_options.device("serial", dev.seal, dev.paced),
    )
    bridge.add_link(link)
    backoff = retry_backoff()
    while not bridge.stopping:
        try:
            r, w = await serial_asyncio.open_serial_connection(url=dev.port, baudrate=dev.baud)
        except (serial.SerialException, OSError) as e:
            link.last_error = "port %s: %s" % (dev.port, e)
            link.count("port_errors")
            link.publish_status()
            d = backoff.next()
            log.warning("serial %s: cannot open %s (%s); retry in %.1fs", dev.node, dev.port, e, d)
            await bridge.sleep(d)
            continue
        log.info("serial %s: opened %s", dev.node, dev.port)
        t = StreamTransport(r, w)
        bridge.transports[link_id] = t
        try:
            await link.run(t)
        except (serial.SerialException, OSError) as e:
            link.last_error = "port %s: %s" % (dev.port, e)
        finally:
            t.close()
            bridge.state.save()
        if link.counters.get("sessions"):
            backoff.reset()
        if not bridge.stopping:
            log.warning("serial %s: link ended (%s); reopening", dev.node, link.last_error)
            await bridge.sleep(backoff.next())
    return link


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of a unix socket's peer (SO_PEERCRED, Linux)."""
    data = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", data)


# serve_local's second result: what removes its socket file at the stop.
Remover = Callable[[], None]


async def serve_local(bridge: BridgeView, path: str) -> tuple[asyncio.Server, Remover]:
    """Local processes join the host bus over a unix socket; each connection's
    unix credentials are its principal, so the authoriser scopes it."""
    if os.path.exists(path):
        os.unlink(path)  # a stale socket from a previous run
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    n = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n[0] += 1
        try:
            await _serve_client(bridge, n[0], reader, writer)
        finally:
            writer.close()  # every way out: a client gone before its first byte too

    server = await asyncio.start_unix_server(handle, path=path)
    os.chmod(path, 0o666)  # access is decided per user by the ACL, not the file mode
    return server, _remover(path)


async def _serve_client(
    bridge: BridgeView, n: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """One connection to the local socket, the ``n``th: a link client, or a
    person or script in text mode."""
    pid, uid, gid = peer_credentials(writer.get_extra_info("socket"))
    # A link client's first byte is a frame delimiter, sent once its
    # connection is up; anything else is a person or script (textmode).
    first = await reader.read(1)
    if not first:
        return
    if first != DELIM:
        return await textmode.serve(
            bridge,
            reader,
            writer,
            first,
            {"uid": uid, "gid": gid, "pid": pid},
            "text:%d:%d" % (pid, n),
        )
    link_id = "local:%d:%d" % (pid, n)
    principal = {"uid": uid, "gid": gid, "pid": pid}
    # Exports follow what the user may read: a local client receives no
    # more than its ACL allows.
    reads = bridge.read_patterns(uid)
    link = Link(
        bridge.bus,
        bridge.cfg.node,
        role="responder",
        link_id=link_id,
        principal=principal,
        opts=bridge.link_options.make(
            "local",
            status=False,
            exports=[(p, "") for p in reads],
            imports=[("#", "")],
            export_calls=[("#", "")],
            import_calls=[("#", "")],
            max_len=LOCAL_MAX_LEN,
            out_queue=bridge.cfg.client_queue,
            spool=host_spool(LOCAL_MAX_LEN, bridge.cfg.client_queue),
        ),
    )
    bridge.add_link(link, "local")
    log.debug("local client %s (uid %d pid %d) connected", link_id, uid, pid)
    try:
        await link.run(StreamTransport(reader, writer, LOCAL_MAX_LEN))
    finally:
        await link.close("client gone")
        bridge.remove_link(link_id)
        log.debug("local client %s gone", link_id)


def _remover(path: str) -> Remover:
    """What removes the socket file at ``path``, made just now, if it is still
    this one at the stop (not a later bridge's on the same path): a command
    then says no bridge is running, not that the connection was refused."""
    made = os.stat(path)

    def remove() -> None:
        try:
            st = os.stat(path)
            if (st.st_dev, st.st_ino) == (made.st_dev, made.st_ino):
                os.unlink(path)
        except FileNotFoundError:  # removed already (Python >= 3.13's server does)
            pass

    return remove
