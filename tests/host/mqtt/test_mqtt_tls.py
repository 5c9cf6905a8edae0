"""TLS to the broker, with real parts: mosquitto with a TLS-only listener and
a certificate from a CA made for the test, the bridge through mqtts://, and
real-firmware devices (the MicroPython unix port, mbedTLS) verifying the
broker against the CA in their config; one given another CA is refused with
one clear line and gets no session."""

import asyncio
import json

import pytest

from dev.broker import Mosquitto
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.link.mqtt import MqttError, MqttTransport
from edgebus.tools.sim.fleet import Fleet, merge
from firmware import uplink_mqtt
from tests.host.mqtt.tlskit import TestCA

pytestmark = [pytest.mark.mosquitto, pytest.mark.micropython]


def test_devices_reach_a_tls_broker_and_a_wrong_ca_is_refused(tmp_path):
    (tmp_path / "ca").mkdir()
    (tmp_path / "other").mkdir()
    ca = TestCA(tmp_path / "ca")
    cert, key = ca.issue("localhost")
    stranger = TestCA(tmp_path / "other", cn="someone else's CA")
    tls = {"ca": ca.ca, "server_name": "localhost"}
    with (
        Mosquitto(tls={"ca": ca.ca, "cert": cert, "key": key}) as broker,
        Fleet(
            tmp_path / "fleet",
            mqtt=2,
            broker=("127.0.0.1", broker.port),
            period=0.2,
            config={"uplink": {"tls": tls}},
        ) as fleet,
    ):
        good, bad = fleet.devices
        with open(bad["config"]) as f:
            c = json.load(f)
        c["uplink"]["tls"]["ca"] = stranger.ca
        with open(bad["config"], "w") as f:
            json.dump(c, f)
        fleet.start()
        parts = fleet.bridge_config(("127.0.0.1", broker.port))
        parts["mqtt"].update(url="mqtts://127.0.0.1:%d" % broker.port, tls_ca=ca.ca)
        cfg = bridge_config.parse(merge(parts, {"bridge": {"state_dir": str(tmp_path / "state")}}))

        async def main():
            b = Bridge(cfg)
            t = asyncio.create_task(b.run())
            temps = b.bus.connect().subscribe("dev/%s/sensor/temp" % good["node"], queue_len=64)
            m = await asyncio.wait_for(temps.recv(), 40)
            refused = b.links["mqtt:" + bad["node"]]
            sessions = refused.counters.get("sessions", 0)
            # the same uplink code on CPython (a Linux edge device): its ssl module
            for ca_path, ok in ((ca.ca, True), (stranger.ca, False)):
                ctx, name = uplink_mqtt.tls({"tls": dict(tls, ca=ca_path)})
                edge = MqttTransport(
                    "127.0.0.1", broker.port, node="edge", ssl=ctx, server_hostname=name
                )
                if ok:
                    await edge.open()
                    await edge.disconnect()
                else:
                    with pytest.raises(
                        MqttError,
                        match="TLS with 127.0.0.1:%d \\(as "
                        "localhost\\) failed: .*certificate verify failed" % broker.port,
                    ):
                        await edge.open()
            b.stop()
            await t
            return m, sessions

        m, sessions = asyncio.run(main())
    assert m.payload["n"] == 0 and m.origin.peer_node == good["node"]
    assert sessions == 0
    with open(bad["log"]) as f:
        text = f.read()
    assert "open: MqttError: TLS with 127.0.0.1:%d (as localhost) failed: " % broker.port in text, (
        text
    )
