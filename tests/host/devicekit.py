"""A host end for one device on a pty cable: a CPython responder Link over
pyserial-asyncio that imports everything the device publishes under
dev/<node>/ and offers it host/# (test_firmware.py, test_board_values.py,
test_link_pty.py)."""

import asyncio

import serial_asyncio

import edgebus
from edgebus.link.link import Link
from edgebus.link.stream import StreamTransport


async def host(cable, key, body):
    """body(bus, link) run while the host link serves cable.b; its result.
    key: str or bytes."""
    bus = edgebus.Bus(q_length=256)
    link = Link(
        bus,
        "host",
        key=key.encode() if isinstance(key, str) else key,
        role="responder",
        imports=[("#", "dev/{node}")],
        import_calls=[("#", "dev/{node}")],
        exports=[("dev/{node}/cmd/#", "dev/{node}"), ("host/#", "")],
        export_calls=[("host/#", "")],
        heartbeat=0.5,
    )
    r, w = await serial_asyncio.open_serial_connection(url=cable.b, baudrate=115200)
    task = asyncio.create_task(link.run(StreamTransport(r, w)))
    try:
        return await body(bus, link)
    finally:
        await link.close()
        task.cancel()
