"""edgebus fleet: run N simulated devices (the real firmware on the MicroPython
unix port, tools/sim/fleet.py) until Ctrl-C, print the bridge configuration that
joins them, and say on the console what each device does (exits, restarts,
sleeps)."""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from edgebus.tools.boardkit import boards, mpylib
from edgebus.tools.sim.fleet import (
    KEYS_NOTE,
    SLEEP_EXIT,
    START_LIMIT,
    START_WINDOW_S,
    Fleet,
    bridge_toml,
)

if TYPE_CHECKING:
    import argparse


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
    p.add_argument(
        "--period",
        type=float,
        help="sensor period in seconds of the devices the fleet makes (default 1); those "
        "of --from run their provisioned configs' own",
    )
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
    broker = _broker(args.mqtt)
    n = 0 if args.provisioned else args.devices
    if n < 1 and not args.provisioned:
        raise SystemExit("edgebus fleet: --devices must be at least 1")
    if args.provisioned and args.keys:
        raise SystemExit(
            "edgebus fleet: --keys is for the devices the fleet makes; those of --from have "
            "their keys in the keystore edgebus provision wrote them to"
        )
    if args.provisioned and args.period is not None:
        raise SystemExit(
            "edgebus fleet: --period is for the devices the fleet makes; those of --from run "
            "their provisioned configs (change a key for all with --set, e.g. health_period=5)"
        )
    try:
        fleet = Fleet(
            args.out,
            serial=0 if broker else n,
            mqtt=n if broker else 0,
            broker=broker,
            period=1.0 if args.period is None else args.period,
            board=args.board,
            journal=args.journal,
            config=parse_sets(args.set),
            provisioned=args.provisioned,
            micropython=args.micropython,
            keys=args.keys,
        )
    except (boards.BoardError, mpylib.SourceError, ValueError, OSError) as e:
        raise SystemExit("edgebus fleet: %s" % e) from None
    if not fleet.devices:
        raise SystemExit("edgebus fleet: no DIR/NODE/config.json in %s" % args.provisioned)
    # Before anything is printed: a caller that read "Ctrl-C stops the fleet"
    # may send SIGTERM at once, which must stop the devices, not kill us.
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    fleet.start()
    _announce(args, fleet, broker)
    try:
        return _follow(fleet, stop)
    except KeyboardInterrupt:
        return 0
    finally:
        fleet.stop()


def _broker(mqtt: str | None) -> tuple[str, int] | None:
    """--mqtt HOST:PORT as (host, port); None without it."""
    if not mqtt:
        return None
    host, _, port = mqtt.rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit("edgebus fleet: --mqtt takes HOST:PORT")
    return host, int(port)


def _announce(args: argparse.Namespace, fleet: Fleet, broker: tuple[str, int] | None) -> None:
    """The running fleet said: its board's values, where its logs are and,
    for devices it made, the bridge configuration that joins them (also
    written to --config-out)."""
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
            len(fleet.devices),
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


# A device log line worth the console: what went wrong, said by the device.
TROUBLE = re.compile(r"error|failed|refused|denied|cannot|out of heap", re.I)
STAMP = re.compile(r"^\[\s*[\d.]+\]\s*")  # the runtime's "[   1.246] " uptime


class _Troubles:
    """Each device's log read as it grows; a line of trouble printed on the
    console the first time its words appear for that device (a failure
    retried each second is one line), so a wrong CA is not found only by
    opening the device's log."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.at: dict[str, int] = {}
        self.said: dict[str, set[str]] = {}

    def news(self) -> None:
        for d in self.fleet.devices:
            node = d["node"]
            try:
                with open(d["log"], "rb") as f:
                    f.seek(self.at.get(node, 0))
                    data = f.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1  # a line still being written waits for its end
            self.at[node] = self.at.get(node, 0) + end
            said = self.said.setdefault(node, set())
            for raw in data[:end].decode(errors="replace").splitlines():
                words = STAMP.sub("", raw).strip()
                if words and TROUBLE.search(words) and words not in said:
                    said.add(words)
                    print("edgebus fleet: %s: %s" % (node, words), flush=True)


def _follow(fleet: Fleet, stop: list[int]) -> int:
    """The devices' exits and restarts, and their logs' lines of trouble,
    printed as they come, until stop has an entry (0) or every device is
    left stopped (1)."""
    seen = 0
    troubles = _Troubles(fleet)
    while not stop:
        time.sleep(0.5)
        troubles.news()
        for _t, node, what in fleet.events[seen:]:
            code = what.split()[-1]
            why = EXIT_MEANING.get(int(code)) if what.startswith("exit") else None
            print(
                "edgebus fleet: %s: %s%s" % (node, what, " (%s)" % why if why else ""),
                flush=True,
            )
        seen = len(fleet.events)
        if len(fleet.failed()) == len(fleet.devices):
            print(
                "edgebus fleet: every device exited %d times within %.0f s and is left "
                "stopped (see their logs in %s)" % (START_LIMIT, START_WINDOW_S, fleet.out)
            )
            return 1
    return 0


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m edgebus.tools.commands.fleet")
    add_arguments(ap)
    sys.exit(run(ap.parse_args()))
