"""The fleet simulator: N devices, each the real firmware (firmware/, compiled
to .mpy) on the real MicroPython unix port, with its own node id, key and
uplink: a pseudo-terminal serial line (tools/sim/ptycable.py stands in for the
cable) or MQTT. Used by the demo, the bridge tests and the benchmarks; the
`edgebus fleet` command runs one and prints the bridge configuration that
joins it. Each device the fleet makes gets a random key, new at each run, in
a keystore (bridge/keystore.py, as `edgebus provision` writes it) that the
bridge reads.
"""

from __future__ import annotations

import copy
import glob
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any, Self

from edgebus.bridge.keystore import KeyStore, new_key
from edgebus.tools.boardkit import boards, devicefiles, mpybuild, mpylib
from edgebus.tools.sim.ptycable import PtyCable

# core + link (sealed) + firmware on the 64-bit unix port, with room for 20
# readings/s through failover (224K ran out of 800-byte blocks) and for an
# update over the bus (its transfer loads ~7 KB of code on this port; 256K
# ran out of 800-byte blocks during one)
DEVICE_HEAP = "320K"
# Restart=always as systemd does it: a device that exits is started again
# after RESTART_S; one that exits START_LIMIT times within START_WINDOW_S is
# left stopped (StartLimitBurst / StartLimitIntervalSec), not restarted in a loop.
RESTART_S = 0.5
START_LIMIT = 5
START_WINDOW_S = 10.0
# A device in duty-cycle mode (firmware/sleep.py) on the deep-sleep simulator
# (firmware/sleepsim.py) exits with this status, leaving its wake time in
# SLEEP_WAKE: started again at that time, a wake, not a failure (no start limit).
SLEEP_EXIT = 4
SLEEP_WAKE = "sleepsim.wake"
# A device resetting itself (sys/reboot, an update's switch, a trial's
# rollback: firmware/loader.py) exits with this status: a board's reset, started
# again and counted in restarts, but not toward the start limit, which is for
# crash loops (three quick updates rolled back left a device stopped).
REBOOT_EXIT = 3
# Where the keys of the devices a fleet makes are, said on its console and in
# the fragment it prints.
KEYS_NOTE = (
    "the devices' keys: random, new at each run, in the keystore %(keys)s "
    '(the bridge reads them there with [bridge] keys = "%(keys)s")'
)


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """base with over's keys set, nested objects merged key by key (a copy)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _device_settings(
    link: dict[str, Any] | None, health_period: float, period: float, journal: bool
) -> dict[str, Any]:
    """A simulated device's link, health period and temp service."""
    rest: dict[str, Any] = {
        "link": link or {"heartbeat": 1.0},
        "health_period": health_period,
        "services": [{"module": "temp", "period": period}],
    }
    if journal:
        rest["link"] = dict(rest["link"], journal="journal")
    return rest


class Fleet:
    """Simulated devices. ``serial`` devices get a PtyCable each (their bridge
    port is ``cable.b``); ``mqtt`` devices connect to ``broker`` (host, port).
    ``board``: the manifest whose runtime values the devices run (its
    board.json is in their bundle). ``uplink``: more uplink config for every
    device (e.g. failover gateways); ``journal``: each device keeps a flash
    journal (``link.journal``) in its own directory; ``config``: any other
    device config, merged over the defaults; ``baud``: serial cables paced to
    that line rate (8N1), else as fast as the ptys go; ``keys``: the keystore
    directory each new device's key goes to (default OUT/keys), a random key
    per device at each run, replacing the file a node had there. Started devices are supervised:
    one that exits (``sys/reboot`` exits with status 3) starts again, counted
    in ``restarts``, while the others run on; one in duty-cycle mode that
    deep-sleeps (status SLEEP_EXIT) starts again at its wake, counted in ``sleeps``."""

    def __init__(
        self,
        out: str,
        serial: int = 0,
        mqtt: int = 0,
        broker: tuple[str, int] | None = None,
        prefix: str = "sim",
        period: float = 0.2,
        health_period: float = 2.0,
        heap: str = DEVICE_HEAP,
        link: dict[str, Any] | None = None,
        uplink: dict[str, Any] | None = None,
        board: str = "unix",
        journal: bool = False,
        config: dict[str, Any] | None = None,
        baud: int | None = None,
        provisioned: str | None = None,
        micropython: str | None = None,
        keys: str | None = None,
    ) -> None:
        if mqtt and broker is None:
            raise ValueError("MQTT devices need a broker (host, port)")
        self.board = boards.load_board(board)
        if self.board["runtime"] != "micropython":
            raise ValueError(
                "board %s runs CPython: the fleet runs the MicroPython unix port"
                % self.board["name"]
            )
        self.out = os.path.abspath(out)
        self.keys = os.path.abspath(keys or os.path.join(self.out, "keys"))
        store = KeyStore(self.keys)
        self.bundle = tempfile.mkdtemp(prefix="edgebus-fleet-")
        notes = self._compile_bundle(micropython)
        # dicts: node, key, kind, port (serial), config, log, proc, restarts
        self.devices: list[dict[str, Any]] = []
        self.cables: list[PtyCable] = []
        self.heap = heap
        # (time, node, what): exits and restarts, in order
        self.events: list[tuple[float, str, str]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._timed = False  # a device has the time step: it needs ntptime
        # Every device's config past its node, key, board and uplink.
        rest = _device_settings(link, health_period, period, journal)
        for i in range(serial + mqtt):
            if i < serial:
                d, up = self._serial("%s-%d" % (prefix, i + 1), baud)
            else:
                assert broker is not None, "MQTT devices need a broker"
                d, up = self._mqtt("%s-mqtt-%d" % (prefix, i - serial + 1), broker)
            up.update({"backoff_min": 0.2, "backoff_max": 2.0})
            up.update(uplink or {})
            self.devices.append(self._simulated(d, up, rest, store, config or {}))
        for path in sorted(glob.glob(os.path.join(provisioned or "", "*", "config.json"))):
            self.devices.append(self._provisioned(path, health_period, period, config or {}))
        if notes and self._timed:
            raise ValueError("the time step needs them: " + notes[0].removeprefix("note: "))

    def _compile_bundle(self, micropython: str | None) -> list[str]:
        """edgebus, firmware and the board's micropython-lib packages (ntptime),
        as its bundle has them, compiled into the fleet's shared bundle; the
        notes on packages that could not be had."""
        mpybuild.compile_packages(["edgebus", "firmware"], self.bundle)
        notes: list[str] = []
        for src, rel in mpylib.sources(self.board, micropython, notes.append):
            mpybuild.compile_file(src, os.path.join(self.bundle, rel[:-3] + ".mpy"))
        return notes

    def _serial(self, node: str, baud: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """A serial device's entry and uplink: a new cable, the device on its a end."""
        cable = PtyCable(baud)
        self.cables.append(cable)
        uplink = {"kind": "uart", "port": cable.a, "baud": 115200}
        return {"node": node, "kind": "serial", "port": cable.b, "cable": cable}, uplink

    def _mqtt(self, node: str, broker: tuple[str, int]) -> tuple[dict[str, Any], dict[str, Any]]:
        """An MQTT device's entry and uplink, to the broker."""
        return {"node": node, "kind": "mqtt"}, {
            "kind": "mqtt",
            "host": broker[0],
            "port": broker[1],
        }

    def _simulated(
        self,
        d: dict[str, Any],
        uplink: dict[str, Any],
        rest: dict[str, Any],
        store: KeyStore,
        over: dict[str, Any],
    ) -> dict[str, Any]:
        """Device d made: a new key, issued in the keystore, and its directory
        with its config (uplink and rest, then over merged in)."""
        node = d["node"]
        d["key"] = new_key()
        store.issue(node, d["key"])
        d["dir"] = os.path.join(self.out, "devices", node)
        cfg = {"node": node, "key": d["key"], "board": self.board["name"], "uplink": uplink}
        cfg.update(copy.deepcopy(rest))  # each device's config its own
        d["config"] = self._files(d["dir"], merge(cfg, over))
        d["log"] = os.path.join(self.out, "devices", node + ".log")
        d["restarts"] = 0
        d["exits"] = []  # exit statuses, in order
        return d

    def _provisioned(
        self, path: str, health_period: float, period: float, over: dict[str, Any]
    ) -> dict[str, Any]:
        """A device `edgebus provision` made: its config over the fleet's
        defaults (what it sets stays as provisioned; ``over``, the --set
        keys, over both), and the files beside it (its CA), in a directory of
        its own."""
        with open(path) as f:
            pc = json.load(f)
        b = self.board["name"]
        if (pc.get("uplink") or {}).get("kind") != "mqtt" or pc.get("board", b) != b:
            raise ValueError(
                "%s: the fleet runs board %s devices over MQTT (edgebus provision NODE "
                "--board %s --broker mqtt://HOST:PORT)" % (path, b, b)
            )
        node = pc["node"]
        d = {"node": node, "kind": "mqtt", "key": pc["key"], "restarts": 0, "exits": []}
        d["provisioned"] = True
        d["dir"] = os.path.join(self.out, "devices", node)
        d["log"] = d["dir"] + ".log"
        shutil.copytree(os.path.dirname(path), d["dir"], dirs_exist_ok=True)
        base = {"health_period": health_period, "services": [{"module": "temp", "period": period}]}
        d["config"] = self._files(d["dir"], merge(merge(base, pc), over))
        return d

    def _files(self, d: str, cfg: dict[str, Any]) -> str:
        """A device's own filesystem, its working directory: config.json and
        the board's board.json (the boot counter and journal go there too)."""
        os.makedirs(d, exist_ok=True)
        self._timed = self._timed or "time" in cfg
        files = boards.runtime_files(self.board)
        files["config.json"] = json.dumps(cfg).encode()
        # The loader as main.py, as on a board: it chooses the bundle an
        # update over the bus installed, else the fleet's shared one.
        files["main.py"] = devicefiles.main_py()
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        return os.path.join(d, "config.json")

    def _spawn(self, d: dict[str, Any]) -> None:
        # The shared bundle on the module path, as frozen modules are on a board.
        env = dict(os.environ, MICROPYPATH=".frozen:" + self.bundle)
        with open(d["log"], "a") as log:
            # A session of its own: a Ctrl-C or SIGTERM for the fleet is the
            # fleet's to handle (it stops them), not a device exit to restart.
            d["proc"] = subprocess.Popen(
                [
                    mpybuild.micropython(),
                    "-X",
                    "heapsize=" + self.heap,
                    "main.py",
                    "config.json",
                ],
                cwd=d["dir"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        d["wanted"] = True

    def start(self, node: str | None = None) -> Self:
        """Start every device (or one): a micropython process each, supervised."""
        with self._lock:
            for d in self.devices:
                if node is None or d["node"] == node:
                    d["starts"] = []
                    self._spawn(d)
        if self._watcher is None:
            self._watcher = threading.Thread(
                target=self._supervise, name="fleet-supervisor", daemon=True
            )
            self._watcher.start()
        return self

    def _supervise(self) -> None:
        while not self._stopping.wait(0.1):
            with self._lock:
                for d in self.devices:
                    p = d.get("proc")
                    if not d.get("wanted") or p is None or p.poll() is None:
                        continue
                    now = time.monotonic()
                    d["exits"].append(p.returncode)
                    self.events.append((now, d["node"], "exit %s" % p.returncode))
                    if p.returncode == SLEEP_EXIT:
                        d["proc"] = None
                        d["restart_at"] = now + self._sleep_left(d)
                        d["sleeps"] = d.get("sleeps", 0) + 1
                        continue
                    d["starts"] = [t for t in d["starts"] if now - t < START_WINDOW_S]
                    if len(d["starts"]) >= START_LIMIT:
                        d["wanted"] = False
                        self.events.append((now, d["node"], "start limit: left stopped"))
                        continue
                    d["proc"] = None
                    d["restart_at"] = now + RESTART_S
                for d in self.devices:
                    if (
                        d.get("wanted")
                        and d.get("proc") is None
                        and time.monotonic() >= d.get("restart_at", 0)
                    ):
                        if d["exits"] and d["exits"][-1] == SLEEP_EXIT:
                            self.events.append((time.monotonic(), d["node"], "wake"))
                        else:
                            if not d["exits"] or d["exits"][-1] != REBOOT_EXIT:
                                d["starts"].append(time.monotonic())
                            d["restarts"] += 1
                            self.events.append((time.monotonic(), d["node"], "restart"))
                        self._spawn(d)

    def _sleep_left(self, d: dict[str, Any]) -> float:
        """Seconds until the wake a device's simulated deep sleep asked for."""
        path = os.path.join(d["dir"], SLEEP_WAKE)
        try:
            with open(path) as f:
                wake = int(f.read().strip()) / 1000
        except (OSError, ValueError):
            return RESTART_S  # no wake time: as any exit
        return max(0.0, wake - time.time())

    def running(self) -> list[str]:
        """Nodes whose process runs now."""
        with self._lock:
            return [
                d["node"]
                for d in self.devices
                if d.get("proc") is not None and d["proc"].poll() is None
            ]

    def failed(self) -> list[str]:
        """Nodes left stopped after exiting too often (the start limit)."""
        return [d["node"] for d in self.devices if d.get("proc") and not d.get("wanted")]

    def kill(self, node: str) -> None:
        """Kill one device as a power cut would (one asleep is not woken);
        it stays off until start(node)."""
        with self._lock:
            for d in self.devices:
                if d["node"] == node:
                    d["wanted"] = False
                    if d.get("proc"):
                        d["proc"].kill()
                        d["proc"].wait()

    def bridge_config(self, broker: tuple[str, int] | None = None) -> dict[str, Any]:
        """The [bridge] keys, [[serial]] and [mqtt] parts of a bridge
        configuration for this fleet: the devices it made have their keys in
        its keystore; those `edgebus provision` made carry the key of their
        config (the fleet does not know the keystore that holds it)."""

        def entry(d: dict[str, Any], **more: Any) -> dict[str, Any]:
            e = dict(node=d["node"], **more)
            if d.get("provisioned"):
                e["key"] = d["key"]
            return e

        cfg: dict[str, Any] = {
            "serial": [entry(d, port=d["port"]) for d in self.devices if d["kind"] == "serial"]
        }
        if not all(d.get("provisioned") for d in self.devices):
            cfg["bridge"] = {"keys": self.keys}
        mq = [entry(d) for d in self.devices if d["kind"] == "mqtt"]
        if mq:
            assert broker is not None, "MQTT devices need a broker"
            cfg["mqtt"] = {"url": "mqtt://%s:%d" % broker, "devices": mq}
        return cfg

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join()
        with self._lock:
            for d in self.devices:
                d["wanted"] = False
                p = d.get("proc")
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
        for c in self.cables:
            c.close()
        shutil.rmtree(self.bundle, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def bridge_toml(cfg: dict[str, Any]) -> str:
    """A bridge TOML fragment for the fleet (what `edgebus fleet` prints): its
    device tables, after a comment naming the keystore that the [bridge] table
    it joins must name (cfg's bridge keys)."""
    L = []
    keys = cfg.get("bridge", {}).get("keys")
    if keys:
        L += ["# " + KEYS_NOTE % {"keys": keys}, ""]
    for s in cfg.get("serial", []):
        L += ["[[serial]]", 'node = "%s"' % s["node"], 'port = "%s"' % s["port"]]
        L += ['key = "%s"' % s["key"]] if "key" in s else []
        L += [""]
    mq = cfg.get("mqtt")
    if mq:
        L += ["[mqtt]", 'url = "%s"' % mq["url"], "devices = ["]
        L += ["  {%s}," % ", ".join('%s = "%s"' % kv for kv in d.items()) for d in mq["devices"]]
        L += ["]", ""]
    return "\n".join(L)
