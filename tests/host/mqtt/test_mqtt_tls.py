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
from tests.conftest import until
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


def test_plain_mqtt_to_a_tls_port_says_mqtts_once_and_in_status(tmp_path, caplog):
    """A newcomer's url without the s: the broker drops the connection before
    it answers. The bridge says what that likely means once, not at every
    retry (those at debug), and its status carries it (NOT CONNECTED, why)."""
    ca = TestCA(tmp_path)
    cert, key = ca.issue("localhost")

    def said(level):
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelname == level and "mqtts://" in r.getMessage()
        ]

    with Mosquitto(tls={"ca": ca.ca, "cert": cert, "key": key}) as broker:
        cfg = bridge_config.parse(
            {
                "bridge": {"state_dir": str(tmp_path / "state")},
                "mqtt": {"url": "mqtt://127.0.0.1:%d" % broker.port, "devices": []},
            }
        )

        async def main():
            b = Bridge(cfg)
            t = asyncio.create_task(b.run())
            await until(lambda: len(said("DEBUG")) >= 2, 30)  # three tries, all refused
            st = b.mqtt.stats()
            b.stop()
            await t
            return st

        with caplog.at_level("DEBUG", logger="edgebus.bridge"):
            st = asyncio.run(main())
    assert not st["connected"] and st["connects"] == 0
    assert "mqtts://" in st["last_error"], st
    assert len(said("WARNING")) == 1, said("WARNING")


# mbedTLS's words (the MicroPython device) for a broker another CA signed
BAD_CA = "failed: The certificate is not correctly signed by the trusted CA"


def test_the_fleet_console_shows_a_devices_tls_failure_once(tmp_path):
    """`edgebus fleet` with a device whose CA is not the broker's: the
    device's clear line reaches the console (once, though it retries), not
    only its log file."""
    from dev.harness.process import Process, env, python
    from tests.conftest import wait_until

    (tmp_path / "ca").mkdir()
    (tmp_path / "other").mkdir()
    ca = TestCA(tmp_path / "ca")
    cert, key = ca.issue("localhost")
    stranger = TestCA(tmp_path / "other", cn="someone else's CA")
    console = tmp_path / "console.txt"
    with Mosquitto(tls={"ca": ca.ca, "cert": cert, "key": key}) as broker:
        tls = json.dumps({"ca": stranger.ca, "server_name": "localhost"})
        argv = python(
            "edgebus.tools.cli",
            *("fleet", "--mqtt", "127.0.0.1:%d" % broker.port, "-n", "1"),
            *("--out", tmp_path / "fleet", "--set", "uplink.tls=" + tls),
        )
        with open(console, "wb") as out, Process(argv, env=env(), stdout=out) as fleet:
            wait_until(lambda: BAD_CA in console.read_text(), 60)
            log = tmp_path / "fleet" / "devices" / "sim-mqtt-1.log"
            wait_until(lambda: log.read_text().count(BAD_CA) >= 2, 60)
            assert fleet.stop() == 0
    said = [ln for ln in console.read_text().splitlines() if BAD_CA in ln]
    assert len(said) == 1 and said[0].startswith("edgebus fleet: sim-mqtt-1: "), said
