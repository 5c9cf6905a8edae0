"""docs/security.md's recipe for a trial CA and a TLS broker, run as written:
its OpenSSL commands make the files, mosquitto serves TLS with them, and a
device's TLS settings (the firmware's uplink, here on CPython) verify the
broker by name and by address; a stranger's CA is refused."""

import asyncio
import os
import re
import subprocess

import pytest

from dev.broker import Mosquitto
from edgebus.link.mqtt import MqttError, MqttTransport
from firmware import uplink_mqtt
from tests.conftest import ROOT

pytestmark = pytest.mark.mosquitto


def _recipe():
    with open(os.path.join(ROOT, "docs", "security.md")) as f:
        text = f.read()
    m = re.search(
        r"<!-- run by tests/host/mqtt/test_tls_recipe.py -->\n```sh\n(.*?)```", text, re.S
    )
    assert m, "docs/security.md no longer has the recipe this test runs"
    return m.group(1)


async def _connect(port, ca, name):
    ctx, server_name = uplink_mqtt.tls({"tls": {"ca": ca, "server_name": name}})
    t = MqttTransport("127.0.0.1", port, node="trial", ssl=ctx, server_hostname=server_name)
    await t.open()
    await t.disconnect()


def test_the_docs_trial_ca_serves_a_tls_broker_devices_verify(tmp_path):
    r = subprocess.run(["bash", "-e", "-c", _recipe()], cwd=tmp_path, capture_output=True)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    files = {k: str(tmp_path / (k + ".pem")) for k in ("ca", "broker")}
    other = tmp_path / "other"
    other.mkdir()
    r = subprocess.run(["bash", "-e", "-c", _recipe()], cwd=other, capture_output=True)
    assert r.returncode == 0
    tls = {"ca": files["ca"], "cert": files["broker"], "key": str(tmp_path / "broker.key")}
    with Mosquitto(tls=tls) as broker:
        for name in ("broker.lan", "127.0.0.1"):
            asyncio.run(_connect(broker.port, files["ca"], name))
        with pytest.raises(MqttError, match="certificate verify failed"):
            asyncio.run(_connect(broker.port, str(other / "ca.pem"), "broker.lan"))
