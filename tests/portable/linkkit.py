"""Helpers for the portable link tests: two buses joined by two Links over an
in-process byte pipe (real frames), the same way on CPython and MicroPython."""

import asyncio

import edgebus
from dev.harness.poll import until  # noqa: F401 (the link tests wait with it)
from edgebus.link import seal
from edgebus.link.link import Link
from edgebus.link.pipe import pair

KEY = b"device-key-1"


class Joined:
    """A device bus and a host bus joined by links running over a pipe."""

    def __init__(
        self,
        dev_key=KEY,
        host_key=KEY,
        dev_kw=None,
        host_kw=None,
        dev_bus=None,
        host_bus=None,
        host_link=None,
        hb=1.0,
        dev_node="dev1",
        host_node="host",
    ):
        self.dev = dev_bus or edgebus.Bus()
        self.host = host_bus or edgebus.Bus()
        kw = {
            "exports": [("sensor/#", ""), ("sys/#", "")],
            "imports": [("cmd/#", "")],
            "export_calls": [("sys/#", "")],
            "import_calls": [("host/#", "")],
            "heartbeat": hb,
        }
        kw.update(dev_kw or {})
        self.dl = Link(self.dev, dev_node, key=dev_key, role="initiator", **kw)
        hk = {
            "exports": [("dev/{node}/cmd/#", "dev/{node}"), ("host/#", "")],
            "imports": [("#", "dev/{node}")],
            "import_calls": [("#", "dev/{node}")],
            "export_calls": [("host/#", "")],
            "heartbeat": hb,
            "spool": 1024,
        }
        hk.update(host_kw or {})
        self.hl = host_link or Link(self.host, host_node, key=host_key, role="responder", **hk)
        self.tasks = []

    def start(self):
        self.ta, self.tb = pair()
        self.tasks = [
            asyncio.create_task(self.dl.run(self.ta)),
            asyncio.create_task(self.hl.run(self.tb)),
        ]
        return self

    async def stop(self):
        self.ta.close()
        for t in self.tasks:
            try:
                await t
            except Exception:
                pass


def sealed(link, body):
    """``body`` as ``link`` sends it now (sealed when its session is): what its
    peer takes as genuine, for tests that put frames in by hand."""
    b, t = seal.out(link, body, True)
    return bytes(b) + (bytes(t) if t is not None else b"")


def up(j):
    return j.dl.status == "up" and j.hl.status == "up"


def synced(j):
    return up(j) and j.hl.counters.get("syncs", 0) >= 1 and j.dl.counters.get("syncs", 0) >= 1


async def joined_with(handler_topic, handler, **kw):
    """A started Joined whose device binds handler_topic, served by handler(ep);
    returns once the host has its proxy."""
    j = Joined(**kw)
    ep = j.dev.connect().bind(handler_topic, queue_len=4)
    task = asyncio.create_task(handler(ep))
    j.start()
    await until(
        lambda: (
            synced(j) and ("dev", "dev1") + tuple(handler_topic.split("/")) in j.host.endpoints()
        )
    )
    return j, ep, task
