"""A fleet into the bridge: N simulated devices (tools/sim/fleet.py: the real
firmware on the real MicroPython unix port, one process each) publishing
sensor/temp over MQTT through mosquitto into the bridge, itself a process of
its own (dev/bench/bridge_procs.py). Measures the aggregate device -> host
messages/s on the host bus, what the devices sent (from the readings'
counters), the loss between the two and the bridge's share of a core."""

import json
import os
import shutil
import statistics
import tempfile

from dev.bench.procs import Child
from dev.bench.stats import summary
from dev.broker import Mosquitto
from dev.harness.process import python
from edgebus.tools.sim.fleet import DEVICE_HEAP, Fleet, merge


def run(smoke=False, devices=None, period=0.01):
    """period: each device's sensor period in seconds (0.01: 100 messages/s)."""
    n = devices or (3 if smoke else 50)
    window = 2.0 if smoke else 10.0
    reps = 1 if smoke else 3
    tmp = tempfile.mkdtemp(prefix="edgebus-fleet-bench-")
    try:
        with (
            Mosquitto() as broker,
            Fleet(
                os.path.join(tmp, "fleet"),
                mqtt=n,
                broker=("127.0.0.1", broker.port),
                period=period,
                health_period=5.0,
            ) as fleet,
        ):
            fleet.start()
            cfg = merge(
                fleet.bridge_config(("127.0.0.1", broker.port)),
                {"bridge": {"state_dir": os.path.join(tmp, "state"), "heartbeat": 1.0}},
            )
            path = os.path.join(tmp, "bridge.json")
            with open(path, "w") as f:
                json.dump(cfg, f)
            rx = Child(
                python("dev.bench.bridge_procs", "bridge", path, "dev/+/sensor/temp"),
                log=os.path.join(tmp, "bridge.log"),
            )
            try:
                rx.expect("ready")
                up = rx.ask("up %d 120" % n, 150)["up"]
                if up < n:
                    raise RuntimeError("only %d of %d devices came up" % (up, n))
                rx.ask("window 1", 30)  # settle: every device past its first steps
                runs = [rx.ask("window %s" % window, window + 30) for _ in range(reps)]
            finally:
                rx.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sent = sum(r["sent"] for r in runs)
    got = sum(r["received"] for r in runs)
    return {
        "devices": n,
        "period_s": period,
        "heap": DEVICE_HEAP,
        "window_s": window,
        "offered_per_s": n / period,
        "msgs_per_s": summary([r["received"] / window for r in runs]),
        "sent_per_s": summary([r["sent"] / window for r in runs]),
        "loss": (sent - got) / sent if sent else 0.0,
        "gaps": sum(r["gaps"] for r in runs),
        "bridge_core_share": summary([r["cpu_s"] / window for r in runs]),
        "devices_seen": statistics.median(r.get("devices", 0) for r in runs),
    }


if __name__ == "__main__":
    import sys

    print(json.dumps(run(smoke="--smoke" in sys.argv), indent=1))
