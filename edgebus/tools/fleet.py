"""The fleet simulator: N devices, each the real firmware (firmware/, compiled
to .mpy) on the real MicroPython unix port, with its own node id, key and
uplink: a pseudo-terminal serial line (tools/ptycable.py stands in for the
cable) or MQTT. Used by the demo, the bridge tests and the benchmarks; the
`edgebus fleet` command runs one and prints the bridge configuration that
joins it. Each device the fleet makes gets a random key, new at each run, in
a keystore (bridge/keystore.py, as `edgebus provision` writes it) that the
bridge reads.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Self

from edgebus.bridge.keystore import KeyStore, new_key
from edgebus.tools import boards, devicefiles, mpybuild, mpylib
from edgebus.tools.keys import issue
from edgebus.tools.ptycable import PtyCable

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
        mpybuild.compile_packages(["edgebus", "firmware"], self.bundle)
        notes: list[str] = []  # the board's micropython-lib packages (ntptime), as its bundle has
        for src, rel in mpylib.sources(self.board, micropython, notes.append):
            mpybuild.compile_file(src, os.path.join(self.bundle, rel[:-3] + ".mpy"))
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
        uplink_more = uplink or {}
        cfg: dict[str, Any]
        d: dict[str, Any]
        for i in range(serial + mqtt):
            node = (
                "%s-%d" % (prefix, i + 1) if i < serial else "%s-mqtt-%d" % (prefix, i - serial + 1)
            )
            if i < serial:
                cable = PtyCable(baud)
                self.cables.append(cable)
                uplink = {"kind": "uart", "port": cable.a, "baud": 115200}
                d = {"node": node, "kind": "serial", "port": cable.b, "cable": cable}
            else:
                assert broker is not None, "MQTT devices need a broker"
                uplink = {"kind": "mqtt", "host": broker[0], "port": broker[1]}
                d = {"node": node, "kind": "mqtt"}
            uplink.update({"backoff_min": 0.2, "backoff_max": 2.0})
            uplink.update(uplink_more)
            d["key"] = new_key()
            issue(store, node, d["key"])
            d["dir"] = os.path.join(self.out, "devices", node)
            cfg = {
                "node": node,
                "key": d["key"],
                "board": self.board["name"],
                "uplink": uplink,
                "link": link or {"heartbeat": 1.0},
                "health_period": health_period,
                "services": [{"module": "temp", "period": period}],
            }
            if journal:
                cfg["link"] = dict(cfg["link"], journal="journal")
            d["config"] = self._files(d["dir"], merge(cfg, config or {}))
            d["log"] = os.path.join(self.out, "devices", node + ".log")
            d["restarts"] = 0
            d["exits"] = []  # exit statuses, in order
            self.devices.append(d)
        for path in sorted(glob.glob(os.path.join(provisioned or "", "*", "config.json"))):
            self.devices.append(self._provisioned(path, health_period, period, config or {}))
        if notes and self._timed:
            raise ValueError("the time step needs them: " + notes[0].removeprefix("note: "))

    def _provisioned(
        self, path: str, health_period: float, period: float, over: dict[str, Any]
    ) -> dict[str, Any]:
        """A device `edgebus provision` made: its config over the fleet's
        defaults, and the files beside it (its CA), in a directory of its own."""
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
        d["config"] = self._files(d["dir"], merge(merge(pc, base), over))
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--devices", "-n", type=int, default=3, help="how many devices")
    p.add_argument(
        "--mqtt",
        metavar="HOST:PORT",
        help="connect the devices over MQTT to this broker (default: serial ptys)",
    )
    p.add_argument(
        "--from",
        dest="provisioned",
        metavar="DIR",
        help="run the devices `edgebus provision --board unix --broker ...` made in DIR "
        "(DIR/NODE/config.json), instead of --devices new ones",
    )
    p.add_argument("--out", default="out/fleet", help="device configs and logs")
    p.add_argument(
        "--keys",
        metavar="DIR",
        help="where the devices' keys are kept (default: OUT/keys): a keystore, a file per "
        "node as edgebus provision writes; each device gets a random key, new at each run "
        "(its node's file there is replaced); the bridge reads them with [bridge] keys = "
        "DIR (its default: <state_dir>/keys)",
    )
    p.add_argument("--micropython", metavar="SRC", help=mpylib.SOURCE_HELP)
    p.add_argument("--period", type=float, default=1.0, help="sensor period in seconds")
    p.add_argument(
        "--board",
        default="unix",
        help="the board manifest whose runtime values (queues, spool, heap budget) "
        "the devices run (default: unix)",
    )
    p.add_argument(
        "--journal",
        action="store_true",
        help="each device keeps a flash journal (link.journal) in its directory, "
        "so what it spooled outlives a reboot",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a device config key for every device, dotted for sections "
        "(link.spool=65536, health_period=1); VALUE is JSON, else a string; repeatable",
    )
    p.add_argument("--config-out", help="also write the bridge TOML fragment to this file")


def parse_sets(items: list[str]) -> dict[str, Any]:
    """--set KEY=VALUE items -> a nested config dict; SystemExit on a bad one."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        parts = key.split(".")
        if not eq or not all(parts):
            raise SystemExit(
                "edgebus fleet: --set takes KEY=VALUE (e.g. link.spool=65536), not %r" % item
            )
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        d = out
        for k in parts[:-1]:
            d = d.setdefault(k, {})
            if not isinstance(d, dict):
                raise SystemExit(
                    "edgebus fleet: --set %s: %s is set to a value already" % (item, k)
                )
        d[parts[-1]] = value
    return out


EXIT_MEANING = {
    3: "sys/reboot",
    2: "config error",
    SLEEP_EXIT: "deep sleep (simulated), woken at its time",
    -9: "killed",
}


def run(args: argparse.Namespace) -> int:
    broker = None
    if args.mqtt:
        host, _, port = args.mqtt.rpartition(":")
        if not host or not port.isdigit():
            raise SystemExit("edgebus fleet: --mqtt takes HOST:PORT")
        broker = (host, int(port))
    n = 0 if args.provisioned else args.devices
    if n < 1 and not args.provisioned:
        raise SystemExit("edgebus fleet: --devices must be at least 1")
    if args.provisioned and args.keys:
        raise SystemExit(
            "edgebus fleet: --keys is for the devices the fleet makes; those of --from have "
            "their keys in the keystore edgebus provision wrote them to"
        )
    try:
        fleet = Fleet(
            args.out,
            serial=0 if broker else n,
            mqtt=n if broker else 0,
            broker=broker,
            period=args.period,
            board=args.board,
            journal=args.journal,
            config=parse_sets(args.set),
            provisioned=args.provisioned,
            micropython=args.micropython,
            keys=args.keys,
        )
    except (boards.BoardError, mpylib.SourceError, ValueError, OSError) as e:
        raise SystemExit("edgebus fleet: %s" % e) from None
    n = len(fleet.devices)
    if not n:
        raise SystemExit("edgebus fleet: no DIR/NODE/config.json in %s" % args.provisioned)
    # Before anything is printed: a caller that read "Ctrl-C stops the fleet"
    # may send SIGTERM at once, which must stop the devices, not kill us.
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    fleet.start()
    # Provisioned devices' keys are in the bridge's keystore already.
    frag = "" if args.provisioned else bridge_toml(fleet.bridge_config(broker))
    if args.config_out:
        with open(args.config_out, "w") as f:
            f.write(frag)
    q = fleet.board["queues"]
    print(
        "edgebus fleet: %d simulated devices (MicroPython unix port, board %s: spool %d B, "
        "bus queue %d%s) running; logs in %s"
        % (
            n,
            fleet.board["name"],
            q["spool"],
            q["bus"],
            ", flash journal" if args.journal else "",
            fleet.out,
        )
    )
    if frag:
        print("edgebus fleet: " + KEYS_NOTE % {"keys": fleet.keys})
        print("join them with edgebus-bridge using:\n\n" + frag)
    print("Ctrl-C stops the fleet. A device that exits is started again.", flush=True)
    seen = 0
    try:
        while not stop:
            time.sleep(0.5)
            for _t, node, what in fleet.events[seen:]:
                code = what.split()[-1]
                why = EXIT_MEANING.get(int(code)) if what.startswith("exit") else None
                print(
                    "edgebus fleet: %s: %s%s" % (node, what, " (%s)" % why if why else ""),
                    flush=True,
                )
            seen = len(fleet.events)
            if len(fleet.failed()) == n:
                print(
                    "edgebus fleet: every device exited %d times within %.0f s and is left "
                    "stopped (see their logs in %s)" % (START_LIMIT, START_WINDOW_S, fleet.out)
                )
                return 1
    except KeyboardInterrupt:
        pass
    finally:
        fleet.stop()
    return 0


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m edgebus.tools.fleet")
    add_arguments(ap)
    sys.exit(run(ap.parse_args()))
