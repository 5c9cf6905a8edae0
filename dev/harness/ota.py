"""edgebus ota as a user runs it, with the bridge it goes through: the
bridge as a process under the [[acl]] the README gives a user who updates
devices, the command run under that user's environment, the devices'
retained sys/ota read back (tests/host/tools, dev/bench/ota_bench.py)."""

import contextlib
import hashlib
import json
import os
import subprocess

from dev.broker import Mosquitto
from dev.harness.bridge import BridgeProcess
from dev.harness.poll import wait_until
from dev.harness.process import ROOT, python, run_module
from edgebus.tools.sim.fleet import Fleet, bridge_toml

BRIDGE = '[bridge]\nnode = "gw"\nstate_dir = "%s"\nsocket = "%s"\nkeys = "%s"\nheartbeat = 1.0\n'
# docs/devices.md's [[acl]] entry for a user who updates devices; bridge/status besides for the
# harness's look at the links (BridgeProcess.link).
ACL = """
[[acl]]
uid = %d
read = ["dev/+/sys/#"]
call = ["dev/+/sys/ota/#", "bridge/status"]
""" % os.getuid()


def start_bridge(tmp, fleet, broker=None):
    """The bridge for fleet (its MQTT devices on broker's port), as a process
    with its socket and the ACL above; ready."""
    toml = os.path.join(str(tmp), "bridge.toml")
    with open(toml, "w") as f:
        f.write(
            BRIDGE
            % (os.path.join(str(tmp), "state"), os.path.join(str(tmp), "bridge.sock"), fleet.keys)
            + bridge_toml(fleet.bridge_config(("127.0.0.1", broker) if broker else None))
            + ACL
        )
    return BridgeProcess(str(tmp), toml=toml).start().ready()


def ota_args(*args):
    return python("edgebus.tools.cli", "ota", *args)


def ota_env(sock):
    return dict(os.environ, EDGEBUS_SOCKET=sock)


def ota(sock, *args):
    """`edgebus ota ARGS` as a user runs it: CompletedProcess."""
    return run_module("edgebus.tools.cli", "ota", *args, timeout=300, env=ota_env(sock))


def ota_bg(sock, *args):
    """`edgebus ota ARGS` started in the background: a Popen (text pipes)."""
    return subprocess.Popen(
        ota_args(*args),
        cwd=ROOT,
        env=ota_env(sock),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def status(sock):
    """{node: its retained sys/ota (None: no ota service)}, by `ota status --json`."""
    r = ota(sock, "status", "--json")
    return {row["node"]: row["ota"] for row in json.loads(r.stdout)} if r.returncode == 0 else {}


def bundle_hash(d):
    """A bundle's hash: the SHA-256 of its manifest (ota.jsonl)."""
    with open(os.path.join(d, "ota.jsonl"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@contextlib.contextmanager
def ready_bridge(tmp, fleet, broker=None):
    """start_bridge for the started fleet, until every device's retained
    sys/ota is on it; stopped at the end. Yields the BridgeProcess."""
    bridge = start_bridge(tmp, fleet, broker)
    try:
        nodes = [d["node"] for d in fleet.devices]
        wait_until(lambda: all(status(bridge.sock).get(n) for n in nodes), 120)
        yield bridge
    finally:
        bridge.stop()
        bridge.close()


@contextlib.contextmanager
def mqtt_fleet(tmp, n, **fleet):
    """n fleet devices (Fleet's keywords in fleet) over a real mosquitto, and
    their ready bridge: yields (the Fleet, the BridgeProcess)."""
    with (
        Mosquitto() as broker,
        Fleet(
            os.path.join(str(tmp), "fleet"), mqtt=n, broker=("127.0.0.1", broker.port), **fleet
        ) as f,
    ):
        f.start()
        with ready_bridge(tmp, f, broker.port) as bridge:
            yield f, bridge
