"""A plain (non-editable) pip install works without the checkout: in a fresh
venv, run from another directory with nothing of the checkout on sys.path and
the venv not activated, `edgebus build`, `edgebus fleet`, `edgebus-bridge` and
`edgebus status` find everything they need (board manifests, firmware sources,
the example configuration, mpy-cross and micropython); the install adds one
import name to site-packages, edgebus, and the development folder is not in it."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from dev.harness.process import Process
from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.slow

# What a clean clone would not have, and setuptools' own output.
NOT_SOURCES = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "out",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
)


class Installed:
    """A venv with the checkout pip-installed, and a directory outside both."""

    def __init__(self, top):
        self.venv = top / "venv"
        self.bin = self.venv / "bin"
        self.cwd = top / "elsewhere"
        self.cwd.mkdir()
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        }
        # Not activated: the commands must find the tools beside the venv's python.
        self.env["PATH"] = os.defpath

    def run(self, *argv, timeout=120):
        return subprocess.run(
            [str(self.bin / argv[0])] + list(argv[1:]),
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *argv, log):
        # A Process: a failed test ends its children too (the fleet's devices).
        return Process(
            [str(self.bin / argv[0])] + list(argv[1:]),
            cwd=self.cwd,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    top = tmp_path_factory.mktemp("install")
    # Built from a copy, so setuptools writes its build/ and egg-info there and
    # no file outside version control (an old build/lib) can reach the wheel.
    src = top / "src"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCES)
    inst = Installed(top)
    subprocess.run([sys.executable, "-m", "venv", str(inst.venv)], check=True, timeout=300)
    r = subprocess.run(
        [
            str(inst.bin / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "%s[bridge,boards,micropython]" % src,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    shutil.rmtree(src)
    return inst


# What the install wrote into site-packages, by first path part (the commands
# land in ../../bin; the metadata in edgebus-<version>.dist-info).
TOP_LEVEL = """
import importlib.metadata, json
files = importlib.metadata.distribution("edgebus").files
print(json.dumps(sorted({f.parts[0] for f in files if f.parts[0] != ".."
                         and not f.parts[0].endswith(".dist-info")})))
"""


def test_only_the_name_edgebus_is_installed(installed):
    r = installed.run("python", "-c", TOP_LEVEL)
    assert r.returncode == 0, r.stderr
    # edgebus-stubs: the core's typed stubs (PEP 561), for type checkers; a
    # hyphen in it, so nothing can import it
    assert json.loads(r.stdout) == ["edgebus", "edgebus-stubs"]
    for module in (
        "dev",
        "dev.bench",
        "tests",
        "tools",
        "bridge",
        "client",
        "tlog",
        "ingest",
        "firmware",
        "boards",
    ):
        r = installed.run("python", "-c", "import " + module)
        assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, (module, r.stderr)
    r = installed.run(
        "python",
        "-c",
        "import edgebus.tools.cli, edgebus.bridge.daemon, "
        "edgebus.client.local, edgebus.tlog, edgebus.ingest.offsets",
    )
    assert r.returncode == 0, r.stderr


def test_build_a_bundle_for_esp32(installed):
    r = installed.run("edgebus", "build", "--board", "esp32", "--out", "bundle")
    assert r.returncode == 0, r.stdout + r.stderr
    out = installed.cwd / "bundle"
    meta = json.loads((out / "bundle.json").read_text())
    assert meta["board"] == "esp32" and meta["mpy"]["arch"] == "xtensawin"
    for f in ("edgebus/bus.mpy", "firmware/main.mpy", "firmware/services/health.mpy", "main.py"):
        assert f in meta["files"] and (out / f).is_file(), f
    # The installed edgebus/ holds the host packages too: none of them is bundled.
    assert sorted(
        {f.split("/")[1] for f in meta["files"] if f.count("/") > 1 and f.startswith("edgebus/")}
    ) == ["link"]
    # Nor are the simulators of what the board has, nor the core's host-only modules.
    assert not [f for f in meta["files"] if f.endswith("sim.mpy")]
    for f in ("edgebus/link/pipe.mpy", "edgebus/compat_cpython.mpy"):
        assert f not in meta["files"]


def test_a_fleet_joined_by_the_bridge_and_stopped(installed, tmp_path):
    state = tmp_path / "state"
    sock = state / "bridge.sock"
    fragment = installed.cwd / "fleet.toml"
    procs = []
    try:
        with open(tmp_path / "fleet.log", "w") as flog, open(tmp_path / "bridge.log", "w") as blog:
            fleet = installed.start(
                "edgebus",
                "fleet",
                "--devices",
                "1",
                "--period",
                "0.2",
                "--out",
                "fleet",
                "--keys",  # the bridge's keystore: its <state_dir>/keys
                str(state / "keys"),
                "--config-out",
                str(fragment),
                log=flog,
            )
            procs.append(fleet)
            wait_until(
                lambda: fragment.exists() and "[[serial]]" in fragment.read_text(),
                90,
                "fleet configuration",
                procs=procs,
            )
            config = tmp_path / "bridge.toml"
            config.write_text(
                '[bridge]\nnode = "gw"\nstate_dir = "%s"\nsocket = "%s"\n'
                "heartbeat = 1.0\n\n%s" % (state, sock, fragment.read_text())
            )
            bridge = installed.start("edgebus-bridge", "--config", str(config), log=blog)
            procs.append(bridge)

            def device_link():
                r = installed.run("edgebus", "status", "--socket", str(sock), "--json")
                if r.returncode != 0:
                    return None
                # The other link listed is edgebus status's own, over the socket.
                serial = [
                    s for s in json.loads(r.stdout)["links"].values() if s.get("peer") == "sim-1"
                ]
                return serial if serial and serial[0]["counters"].get("sessions") else None

            (link,) = wait_until(device_link, 90, "device session through the bridge", procs=procs)
            assert link["state"] == "up" and link["generation"] == 1, link
            assert bridge.stop() == 0
            assert fleet.stop() == 0
    except AssertionError:
        for name in ("fleet.log", "bridge.log"):
            print("--- %s\n%s" % (name, (tmp_path / name).read_text()[-3000:]))
        raise
    finally:
        for p in procs:
            p.close()


def test_the_bridge_without_a_configuration_names_the_example(installed):
    r = installed.run("edgebus-bridge")
    assert r.returncode == 2, r.stdout + r.stderr
    m = re.search(r"(\S+example\.toml)", r.stderr)
    assert m, r.stderr
    assert m.group(1).startswith(str(installed.venv)) and os.path.isfile(m.group(1))
    assert "./do demo" in r.stderr
