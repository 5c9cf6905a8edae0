"""python -m dev.presence [--tree DIR]... [--cycles N] [--out FILE]

The recovery figures: outage -> session-up over MQTT, for a bridge restart
(SIGKILL, started again at once) and for a broker restart (mosquitto SIGKILL,
started again at once). Real parts: mosquitto on a free loopback port
(dev/broker.py), the bridge as its own process, one device running the real
firmware on the MicroPython unix port (tools/sim/fleet.py) with the firmware's
default heartbeat (5 s, so a 15 s liveness timeout).

Each --tree is a checkout whose bridge and firmware are run (default: this
one); give main's too to get the baseline in the same run, e.g.
``git archive main | tar -x -C /tmp/edgebus-main`` then
``python -m dev.presence --tree /tmp/edgebus-main --tree .``.
Per case it prints the seconds from the kill to the bridge's session being up
again (``session_s``) and to the device's first HELLO after the kill
(``hello_s``, when the device noticed the outage). Figures, not assertions."""

import argparse
import json
import os
import shutil
import tempfile
import time

from dev.broker import Mosquitto
from dev.harness.bridge import BridgeProcess
from dev.harness.mqtt import Watcher
from dev.harness.poll import wait_until
from edgebus.tools.boardkit import mpybuild
from edgebus.tools.sim.fleet import Fleet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def device_fleet(out, broker_port, tree=ROOT, heartbeat=5.0, health_period=2.0, **kw):
    """One real-firmware MQTT device (tools/sim/fleet.py), its firmware compiled
    from tree."""
    fleet = Fleet(
        out,
        mqtt=1,
        broker=("127.0.0.1", broker_port),
        health_period=health_period,
        link={"heartbeat": heartbeat},
        **kw,
    )
    if os.path.abspath(tree) != ROOT:
        mpybuild.compile_tree(tree, ["edgebus", "firmware"], fleet.bundle)
    return fleet


def measure(tree, cycles, work):
    """[(case, session_s, hello_s)] for a bridge and a broker restart, cycles each."""
    out = []
    with Mosquitto() as broker:
        fleet = device_fleet(os.path.join(work, "fleet"), broker.port, tree)
        d = fleet.devices[0]
        node, up = d["node"], "edgebus/%s/up" % d["node"]
        bridge = BridgeProcess(work, broker.port, {node: d["key"]}, tree)
        watcher = None
        try:
            bridge.start()
            fleet.start()
            watcher = Watcher(broker.port, [up])

            def is_up(more_than=-1):
                """A session up, the more_than-th or a later one."""
                lk = bridge.link(node) or {}
                return (
                    lk.get("state") == "up"
                    and lk.get("counters", {}).get("sessions", 0) > more_than
                )

            wait_until(is_up, 60, "a session at the start (see %s)" % bridge.logpath)
            for case in ("bridge", "broker"):
                for _ in range(cycles):
                    time.sleep(1.0)  # a session that has settled (heartbeats flowing)
                    before = (bridge.link(node) or {}).get("counters", {}).get("sessions", 0)
                    t0 = time.monotonic()
                    if case == "bridge":
                        bridge.kill()
                        bridge.start()
                        after = -1  # a new bridge counts from 0
                    else:
                        broker.stop()
                        broker.start()
                        after = before
                    wait_until(lambda: is_up(after), 90, "a session after the %s restart" % case)
                    t1 = time.monotonic()
                    h = watcher.first_hello(up, t0)
                    out.append((case, round(t1 - t0, 2), round(h - t0, 2) if h else None))
                    print(
                        json.dumps(
                            {
                                "tree": tree,
                                "case": case,
                                "session_s": out[-1][1],
                                "hello_s": out[-1][2],
                            }
                        ),
                        flush=True,
                    )
        finally:
            if watcher is not None:
                watcher.close()
            bridge.close()
            fleet.stop()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m dev.presence", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--tree", action="append", help="a checkout to run (repeatable; default: this one)"
    )
    ap.add_argument("--cycles", type=int, default=3, help="restarts of each kind per tree")
    ap.add_argument("--out", help="also write the figures as JSON to this file")
    args = ap.parse_args(argv)
    res = {}
    for tree in args.tree or [ROOT]:
        work = tempfile.mkdtemp(prefix="edgebus-presence-")
        try:
            res[tree] = measure(tree, args.cycles, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print("\n| tree | restart | outage -> session-up s | outage -> device HELLO s |")
    print("|---|---|---|---|")
    for tree, rows in res.items():
        for case in ("bridge", "broker"):
            rs = [r for r in rows if r[0] == case]
            print("| %s | %s | %s | %s |" % (tree, case, [r[1] for r in rs], [r[2] for r in rs]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({t: [list(r) for r in rows] for t, rows in res.items()}, f, indent=1)


if __name__ == "__main__":
    main()
