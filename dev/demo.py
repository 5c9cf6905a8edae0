"""The demo: the whole pipeline on one machine, no hardware.

- a real mosquitto on a free loopback port (started here, stopped at the end);
- simulated devices (tools/sim/fleet.py): the real firmware running under the real
  MicroPython unix port, three on pseudo-terminal serial lines and one over MQTT;
- the emulated 32-bit board (boards/qemu-mps2-an385: MicroPython firmware with
  edgebus frozen in, in qemu-system-arm) on its emulated UART, when its toolchain
  is installed and its image built (--qemu builds it once; otherwise the demo
  prints the command that adds it);
- the bridge daemon joining them to the host bus and writing the telemetry log;
- a broker outage in the middle (--outage s from --outage-at s, once the
  MQTT device has its session: mosquitto stopped, then restarted on its
  port): the MQTT device spools its readings and delivers them late, and the
  run goes on until it is back;
- then Spark: `edgebus ingest --once` into a Parquet table and its delivery
  audit, and `edgebus report`, whose audit line says what was lost and how
  late the spooled readings came.

usage: python -m dev.demo [--seconds N] [--outage S] [--out DIR] [--no-spark]
                          [--qemu | --no-qemu]
       (or ./do demo)
Output goes to out/demo/ under the current directory.
"""

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time

from dev.broker import Mosquitto
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.bridge.keystore import KeyStore, new_key
from edgebus.tools.commands.status import render
from edgebus.tools.sim.fleet import KEYS_NOTE, Fleet, merge

# The checkout, so the `edgebus` commands run from it (dev/ is never installed).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Outage:
    """The broker stopped at ``at`` s into the run, or later once every MQTT
    device has its session (a slow machine), for ``length`` s, then restarted
    on its port: the MQTT devices spool their readings meanwhile and deliver
    them late, which the delivery audit reports."""

    def __init__(self, broker, at, length):
        self.broker, self.at, self.length = broker, at, length
        self.phase = "before"  # -> "down" -> "after"
        self.sessions = None  # the MQTT links' session counts when it began
        self.began = None  # s into the run

    def step(self, elapsed, st):
        if self.phase == "before" and elapsed >= self.at and _mqtt_up(st):
            self.sessions = _mqtt_sessions(st)
            self.broker.stop()
            self.phase, self.began = "down", elapsed
            print("\ndemo: broker outage: mosquitto stopped for %.0f s" % self.length, flush=True)
        elif self.phase == "down" and elapsed >= self.began + self.length:
            self.broker.start()
            self.phase = "after"
            print("\ndemo: mosquitto restarted on port %d" % self.broker.port, flush=True)

    def over(self, st):
        """True once every MQTT link has had a new session since the outage."""
        if self.phase != "after":
            return self.phase == "before" and self.length <= 0
        now = _mqtt_sessions(st)
        return all(now[k] > self.sessions.get(k, 0) for k in now) and _mqtt_up(st)


def _mqtt_up(st):
    """True when every MQTT device link is up."""
    return all(s["state"] == "up" for k, s in st["links"].items() if k.startswith("mqtt"))


def _mqtt_sessions(st):
    return {
        k: s["counters"].get("sessions", 0) for k, s in st["links"].items() if k.startswith("mqtt")
    }


async def _run_bridge(cfg, seconds, cleanup, outage=None, recover=60.0):
    """Run the bridge for seconds (and, with an outage, until its MQTT
    devices are back, at most recover s more); its final stats."""
    b = Bridge(cfg)
    task = asyncio.create_task(b.run())
    t0 = time.monotonic()
    next_print = 3.0
    while True:
        await asyncio.sleep(0.5)
        elapsed = time.monotonic() - t0
        st = b.stats()
        if outage is not None:
            outage.step(elapsed, st)
        if elapsed >= seconds and (outage is None or outage.over(st)):
            break
        if elapsed >= seconds + recover:
            if outage.phase == "before":
                print("demo: the MQTT devices never had a session: no outage made", flush=True)
            else:
                print("demo: the MQTT devices did not come back after the outage", flush=True)
            break
        if elapsed >= next_print:
            next_print += 5.0
            print("\n" + render(st), flush=True)
    st = b.stats()
    b.stop()
    if await task:
        # asyncio.run() would wait for the stuck tasks forever: stop the
        # devices and the broker here, then leave.
        print("demo: FAILED: the bridge did not stop cleanly (see its log above)", flush=True)
        cleanup()
        os._exit(1)
    return st


# What the JVM itself says at every start under Java 17+ (Spark's launcher adds
# the vector module): not Spark's logging, which ingest/log4j2.properties quiets.
_JVM_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector"


def _cli(*args):
    """An `edgebus` command of this checkout; its stderr passed on but for
    the JVM's start-up notice."""
    r = subprocess.run(
        [sys.executable, "-m", "edgebus.tools.cli"] + list(args),
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    sys.stderr.write("".join(ln for ln in r.stderr.splitlines(True) if ln.strip() != _JVM_NOTICE))
    sys.stderr.flush()
    return r


QEMU_NODE = "mps2-1"


def _qemu_board(choice, out, keys):
    """The emulated board booted, or None with a line saying how to add it.
    choice: True builds the image if needed, None uses it only if already built.
    Its key is random, in the keystore ``keys`` (the fleet's) as the bridge's."""
    from edgebus.tools.boardkit import boards, firmware
    from edgebus.tools.sim import qemuboard

    board = boards.load_board("qemu-mps2-an385")
    src = os.environ.get(firmware.ENV_SOURCE) or os.path.join(
        os.path.dirname(ROOT), "shared", "micropython", "micropython-1.28.0.tar.xz"
    )
    try:
        qemuboard.qemu_binary(board)
        firmware.check_toolchain("arm")
        if not os.path.exists(src):
            raise firmware.FirmwareError("no MicroPython source: set %s" % firmware.ENV_SOURCE)
        meta = firmware.build(board, src, only_cached=not choice)
    except (qemuboard.QemuError, firmware.FirmwareError) as e:
        print("demo: the emulated 32-bit board is left out: %s" % e)
        return None
    if meta is None:
        print(
            "demo: the emulated 32-bit board is left out (its firmware is not built yet): "
            "./do demo --qemu  (builds it once, about a minute)"
        )
        return None
    key = new_key()
    KeyStore(keys).issue(QEMU_NODE, key)
    cfg = {
        "node": QEMU_NODE,
        "key": key,
        "board": board["name"],
        "uplink": {"kind": "uart", "port": 1},
        "services": [{"module": "temp", "period": 1}],
    }
    state = os.path.join(out, "qemu-board")
    qemuboard.prepare_flash(board, state, qemuboard.device_files(board, cfg))
    qb = qemuboard.QemuBoard(
        board,
        meta["image"],
        state,
        uart="pty",
        repl="file:" + os.path.join(out, "devices", QEMU_NODE + ".log"),
    )
    qb.start()
    print(
        "demo: emulated board %s (Cortex-M3, MicroPython %s, edgebus frozen in) in "
        "qemu-system-arm, link UART %s"
        % (QEMU_NODE, board["firmware"]["min_version"], qb.uart_port)
    )
    return qb


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m dev.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the devices run")
    ap.add_argument(
        "--out",
        default=os.path.join("out", "demo"),
        help="where the log, table, report and device logs go",
    )
    ap.add_argument("--serial-devices", type=int, default=3)
    ap.add_argument(
        "--outage",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="stop the broker this long in the middle of the run (0: no outage)",
    )
    ap.add_argument(
        "--outage-at",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="when the outage begins, at the earliest: it waits for the MQTT devices' sessions",
    )
    ap.add_argument("--no-spark", action="store_true", help="stop after the telemetry log")
    ap.add_argument(
        "--qemu",
        action="store_true",
        default=None,
        help="add the emulated 32-bit board, building its firmware if needed "
        "(default: added when already built)",
    )
    ap.add_argument(
        "--no-qemu", dest="qemu", action="store_false", help="leave the emulated board out"
    )
    args = ap.parse_args(argv)
    out = os.path.abspath(args.out)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    broker = Mosquitto().start()
    print("demo: mosquitto on 127.0.0.1:%d" % broker.port)
    fleet = qb = None

    def cleanup():
        if fleet is not None:
            fleet.stop()
        if qb is not None:
            qb.close()
        broker.close()

    try:
        fleet = Fleet(out, serial=args.serial_devices, mqtt=1, broker=("127.0.0.1", broker.port))
        print(
            "demo: firmware compiled with mpy-cross; %d devices on serial ptys + 1 over MQTT"
            % args.serial_devices
        )
        print("demo: " + KEYS_NOTE % {"keys": fleet.keys})
        fleet.start()
        parts = fleet.bridge_config(("127.0.0.1", broker.port))
        if args.qemu is not False:
            qb = _qemu_board(args.qemu, out, fleet.keys)
        if qb is not None:
            parts["serial"].append({"node": QEMU_NODE, "port": qb.uart_port})
        parts["mqtt"].update({"client_id": "demo-bridge", "mirror": ["dev/+/sys/#"]})
        cfg = bridge_config.parse(
            merge(
                parts,
                {
                    "bridge": {
                        "node": "demo-gateway",
                        "state_dir": os.path.join(out, "state"),
                        "socket": os.path.join(out, "state", "bridge.sock"),
                        "heartbeat": 1.0,
                    },
                    "log": {
                        "dir": os.path.join(out, "telemetry"),
                        # bridge/gaps: the gap records the audit gives reasons by
                        "patterns": ["dev/#", "bridge/gaps"],
                        "segment_seconds": 5,
                    },
                },
            )
        )
        print(
            "demo: running %.0fs; `edgebus status --socket %s` works meanwhile"
            % (args.seconds, cfg.socket)
        )
        outage = Outage(broker, args.outage_at, args.outage) if args.outage > 0 else None
        st = asyncio.run(_run_bridge(cfg, args.seconds, cleanup, outage))
    finally:
        cleanup()
    print("\n== final bridge status\n" + render(st))
    up = [k for k, s in st["links"].items() if s["counters"].get("sessions")]
    print(
        "\ndemo: %d of %d device links had a session; %d records in the telemetry log at %s"
        % (len(up), len(st["links"]), st["log"]["appended"], cfg.log_dir)
    )
    if len(up) != len(st["links"]):
        print("demo: FAILED: some devices never came up (see %s/devices/*.log)" % out)
        return 1
    if args.no_spark:
        return 0
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("demo: Spark part skipped: pyspark is not installed (pip install -e '.[spark]')")
        return 0
    table, ck = os.path.join(out, "table"), os.path.join(out, "checkpoint")
    print("\n== edgebus ingest --once (Spark, local[*])", flush=True)
    r = _cli("ingest", "--log", cfg.log_dir, "--table", table, "--checkpoint", ck, "--once")
    if r.returncode:
        return r.returncode
    print("\n== edgebus report", flush=True)
    return _cli("report", "--table", table, "--plot", os.path.join(out, "audit.png")).returncode


if __name__ == "__main__":
    sys.exit(main())
