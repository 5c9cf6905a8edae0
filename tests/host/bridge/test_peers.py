"""Bridge-to-bridge links ([[peer]] over TCP): a gateway with a real firmware
device on a pty federates up to a site host; the site sees the device's
readings with their relay provenance and calls the device's actions through
the gateway, and the route goes and comes back with the gateway."""

import asyncio
import socket

import pytest

from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.link import routes
from edgebus.tools.sim.fleet import Fleet, merge
from tests.conftest import until

pytestmark = pytest.mark.micropython

KEY = "site-gateway-key"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def site_config(tmp_path, port, key=KEY):
    return bridge_config.parse(
        {
            "bridge": {"node": "site", "state_dir": str(tmp_path / "site"), "heartbeat": 0.5},
            "peer": [
                {
                    "node": "gw",
                    "key": key,
                    "listen": "127.0.0.1:%d" % port,
                    "imports": ["dev/#"],
                    "import_calls": ["dev/#"],
                    "exports": ["site/#"],
                }
            ],
        }
    )


def gateway_config(tmp_path, port, fleet):
    return bridge_config.parse(
        merge(
            fleet.bridge_config(),
            {
                "bridge": {"node": "gw", "state_dir": str(tmp_path / "gw"), "heartbeat": 0.5},
                "peer": [
                    {
                        "node": "site",
                        "key": KEY,
                        "connect": "127.0.0.1:%d" % port,
                        "backoff_max": 0.5,
                        "exports": ["dev/#"],
                        "export_calls": ["dev/+/sys/#"],
                        "imports": ["site/#"],
                    }
                ],
            },
        )
    )


def test_a_site_host_reads_and_calls_a_device_through_its_gateway(tmp_path):
    port = free_port()
    with Fleet(tmp_path / "fleet", serial=1, period=0.2) as fleet:
        fleet.start()
        node = fleet.devices[0]["node"]
        get = ("dev", node, "sys", "config", "get")

        async def main():
            site = Bridge(site_config(tmp_path, port))
            st = asyncio.create_task(site.run())
            gw = Bridge(gateway_config(tmp_path, port, fleet))
            gt = asyncio.create_task(gw.run())
            c = site.bus.connect()
            temps = c.subscribe(("dev", node, "sensor", "temp"), queue_len=8)
            m = await asyncio.wait_for(temps.recv(), 30)
            o = m.origin
            assert (o.kind, o.link_id, o.peer_node) == ("link", "peer:gw", "gw")
            assert o.extra["src"] == node and o.extra["via"] == ["gw"]
            assert "seq" in o.extra and m.payload["simulated"] is True
            await until(lambda: get in site.bus.endpoints(), 20)
            assert await c.call(get, "node", timeout=5) == node
            # Only what the gateway exports (dev/+/sys/#) is routed, with its path.
            offered = routes.table(site.bus)["routes"]
            assert sorted(offered) == sorted(k for k in site.bus.endpoints() if k[0] == "dev")
            # sys/config/get and set, sys/key/set, sys/reboot, sys/ota/op
            assert len(offered) == 5 and offered[get].offers[0][2] == [node, "gw"]
            # The gateway stops: the route goes at the site; it comes back with it.
            gw.stop()
            await gt
            await until(lambda: get not in site.bus.endpoints(), 10)
            gw = Bridge(gateway_config(tmp_path, port, fleet))
            gt = asyncio.create_task(gw.run())
            await until(lambda: get in site.bus.endpoints(), 30)
            assert await c.call(get, "node", timeout=5) == node
            link = site.links["peer:gw"]
            assert link.stats()["state"] == "up" and link.counters["sessions"] == 2
            gw.stop()
            site.stop()
            await gt
            await st

        asyncio.run(main())


def test_a_peer_with_the_wrong_key_gets_no_session_and_says_why(tmp_path):
    port = free_port()

    async def main():
        site = Bridge(site_config(tmp_path, port, key="another-key"))
        st = asyncio.create_task(site.run())
        gw = Bridge(
            bridge_config.parse(
                {
                    "bridge": {"node": "gw", "state_dir": str(tmp_path / "gw"), "heartbeat": 0.5},
                    "peer": [
                        {
                            "node": "site",
                            "key": KEY,
                            "connect": "127.0.0.1:%d" % port,
                            "exports": ["dev/#"],
                        }
                    ],
                }
            )
        )
        gt = asyncio.create_task(gw.run())
        await until(lambda: "peer:site" in gw.links)
        link = gw.links["peer:site"]
        await until(lambda: link.last_error is not None and "auth" in link.last_error, 20)
        assert link.counters.get("sessions", 0) == 0
        assert site.links["peer:gw"].counters.get("sessions", 0) == 0
        gw.stop()
        site.stop()
        await gt
        await st

    asyncio.run(main())


@pytest.mark.parametrize(
    "peer,why",
    [
        ({"node": "x", "key": "k"}, "give connect"),
        ({"node": "x", "key": "k", "connect": "h:1", "listen": "h:2"}, "not both"),
        ({"node": "x", "key": "k", "connect": "nohost"}, "host:port"),
        ({"key": "k", "connect": "h:1"}, "node is required"),
        ({"node": "x", "connect": "h:1"}, "needs key"),
        ({"node": "x", "key": "k", "connect": "h:1", "exports": [3]}, "patterns or [pattern"),
    ],
)
def test_peer_config_errors_say_what_is_wrong(peer, why):
    with pytest.raises(bridge_config.ConfigError) as e:
        bridge_config.parse({"peer": [peer]})
    assert why in str(e.value) and "[[peer]] #1" in str(e.value)


def test_a_dial_that_gets_no_answer_is_given_up_and_tried_again(tmp_path, monkeypatch):
    """A peer whose address takes no connection (its accept queue full, as a
    wedged host's is: the SYN is dropped) costs a dial CONNECT_TIMEOUT, not
    the OS's minutes; the link says why and dials again."""
    from edgebus.bridge.links import peers

    monkeypatch.setattr(peers, "CONNECT_TIMEOUT", 0.5)
    wedged = socket.socket()
    wedged.bind(("127.0.0.1", 0))
    wedged.listen(0)
    port = wedged.getsockname()[1]
    fillers = []
    for _ in range(3):  # fill the queue; a SYN beyond it gets no answer
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        fillers.append(s)
    with Fleet(tmp_path / "fleet", serial=1) as fleet:

        async def main():
            gw = Bridge(gateway_config(tmp_path, port, fleet))
            t = asyncio.create_task(gw.run())
            await until(lambda: "peer:site" in gw.links)
            link = gw.links["peer:site"]
            why = "connect 127.0.0.1:%d: no answer within 0.5 s" % port
            await until(lambda: link.last_error == why, 10)
            link.last_error = None
            await until(lambda: link.last_error == why, 10)  # and again
            gw.stop()
            await t

        try:
            asyncio.run(main())
        finally:
            for s in fillers + [wedged]:
                s.close()
