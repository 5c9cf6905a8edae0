"""The link across runtimes and a real serial line: the device side runs under
the real micropython binary on one end of a pty pair, the host side under
CPython with pyserial-asyncio on the other end (tools/sim/ptycable.py joins them)."""

import asyncio

import pytest

from edgebus.tools.sim.ptycable import PtyCable
from tests.conftest import until
from tests.host import devicekit

DEVICE_HEAP = "192K"  # core + link (sealed) on the 64-bit unix port, plus the script


@pytest.fixture
def device(link_device):
    return lambda tty, key, count: link_device(tty, key, count, heap=DEVICE_HEAP)


async def _host(cable, key, body):
    return await devicekit.host(cable, key, body)


def test_micropython_device_to_cpython_host_over_pty(device):
    count = 200
    with PtyCable() as cable:
        dev = device(cable.a, "k1", count)

        async def body(bus, link):
            c = bus.connect()
            sub = c.subscribe("dev/+/sensor/count", queue_len=count)
            ep = c.bind("host/add")

            async def add():
                async for req in ep:
                    req.reply(sum(req.payload))

            asyncio.create_task(add())
            view = c.retained_view("dev/#")
            await until(lambda: link.status == "up")
            got = []
            while len(got) < count:
                m = await asyncio.wait_for(sub.recv(), 10)
                got.append(m)
            node = link.peer_node
            assert node == "dev-micropython"
            assert [m.payload for m in got] == list(range(count))
            seqs = [m.origin.extra["seq"] for m in got]
            assert seqs == list(range(seqs[0], seqs[0] + count))  # no gap, no duplicate
            assert all(
                m.origin.kind == "link"
                and m.origin.peer_sid == link.peer_sid
                and m.origin.generation == 1
                for m in got
            )
            info = view.get(("dev", node, "sys", "info"))
            assert info.payload == {"fw": "test", "impl": "micropython"}
            # host -> device call through the proxy endpoint
            assert await c.call(("dev", node, "sys", "echo"), "hi", timeout=3) == {"echo": "hi"}
            # device -> host call, result retained on the device and synced here
            await until(lambda: view.get(("dev", node, "sys", "result")) is not None)
            assert view.get(("dev", node, "sys", "result")).payload == 5
            assert link.counters.get("gaps", 0) == 0 and link.counters.get("bad_frames", 0) == 0
            c.publish(("dev", node, "cmd", "stop"), True)
            await asyncio.sleep(0.3)
            return link.stats()

        stats = asyncio.run(_host(cable, b"k1", body))
        out = dev.communicate(timeout=10)[0]
        assert "UP" in out and "CALLED 5" in out and "STOP" in out, out
        assert stats["transport"]["crc_errors"] == 0


def test_wrong_key_over_pty_gives_no_session(device):
    with PtyCable() as cable:
        dev = device(cable.a, "wrong", 5)

        async def body(bus, link):
            await until(lambda: link.counters.get("auth_failures", 0) >= 1)
            await asyncio.sleep(0.3)
            assert link.status != "up"
            assert bus.stats()["retained"] == 1  # only the link status: nothing imported
            return link.last_error

        err = asyncio.run(_host(cable, b"k1", body))
        assert "auth_failed" in err
        dev.kill()
        out = dev.communicate(timeout=5)[0]
        assert "UP" not in out, out
