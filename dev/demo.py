"""The demo: the whole pipeline on one machine, no hardware.

- a real mosquitto on a free loopback port (started here, stopped at the end);
- simulated devices (tools/fleet.py): the real firmware running under the real
  MicroPython unix port, three on pseudo-terminal serial lines and one over MQTT;
- the bridge daemon joining them to the host bus and writing the telemetry log;
- then Spark: `edgebus ingest --once` into a Parquet table, and `edgebus report`.

usage: python -m dev.demo [--seconds N] [--out DIR] [--no-spark]   (or ./do demo)
Output goes to out/demo/ under the current directory.
"""
import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time

from bridge import config as bridge_config
from bridge.daemon import Bridge
from bridge.status import render
from dev.broker import Mosquitto
from tools.fleet import Fleet

# The checkout, so the `edgebus` commands run from it (dev/ is never installed).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


async def _run_bridge(cfg, seconds):
    b = Bridge(cfg)
    task = asyncio.create_task(b.run())
    t0 = time.monotonic()
    next_print = 3.0
    while time.monotonic() - t0 < seconds:
        await asyncio.sleep(0.5)
        if time.monotonic() - t0 >= next_print:
            next_print += 5.0
            print("\n" + render(b.stats()), flush=True)
    st = b.stats()
    b.stop()
    await task
    return st


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tools.cli"] + list(args), cwd=ROOT)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m dev.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the devices run")
    ap.add_argument("--out", default=os.path.join("out", "demo"),
                    help="where the log, table, report and device logs go")
    ap.add_argument("--serial-devices", type=int, default=3)
    ap.add_argument("--no-spark", action="store_true", help="stop after the telemetry log")
    args = ap.parse_args(argv)
    out = os.path.abspath(args.out)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    broker = Mosquitto().start()
    print("demo: mosquitto on 127.0.0.1:%d" % broker.port)
    fleet = None
    try:
        fleet = Fleet(out, serial=args.serial_devices, mqtt=1, broker=("127.0.0.1", broker.port))
        print("demo: firmware compiled with mpy-cross; %d devices on serial ptys + 1 over MQTT"
              % args.serial_devices)
        fleet.start()
        parts = fleet.bridge_config(("127.0.0.1", broker.port))
        parts["mqtt"].update({"client_id": "demo-bridge", "mirror": ["dev/+/sys/#"]})
        cfg = bridge_config.parse(dict(parts, **{
            "bridge": {"node": "demo-gateway", "state_dir": os.path.join(out, "state"),
                       "socket": os.path.join(out, "state", "bridge.sock"), "heartbeat": 1.0},
            "log": {"dir": os.path.join(out, "telemetry"), "patterns": ["dev/#"],
                    "segment_seconds": 5}}))
        print("demo: running %.0fs; `edgebus status --socket %s` works meanwhile"
              % (args.seconds, cfg.socket))
        st = asyncio.run(_run_bridge(cfg, args.seconds))
    finally:
        if fleet is not None:
            fleet.stop()
        broker.close()
    print("\n== final bridge status\n" + render(st))
    up = [k for k, s in st["links"].items() if s["counters"].get("sessions")]
    print("\ndemo: %d of %d device links had a session; %d records in the telemetry log at %s"
          % (len(up), len(st["links"]), st["log"]["appended"], cfg.log_dir))
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
    return _cli("report", "--table", table, "--plot", os.path.join(out, "rates.png")).returncode


if __name__ == "__main__":
    sys.exit(main())
