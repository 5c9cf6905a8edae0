"""python -m dev.presence [--tree DIR]... [--cycles N] [--out FILE]

Issue #13's figures: outage -> session-up over MQTT, for a bridge restart
(SIGKILL, started again at once) and for a broker restart (mosquitto SIGKILL,
started again at once). Real parts: mosquitto on a free loopback port
(dev/broker.py), the bridge as its own process, one device running the real
firmware on the MicroPython unix port (tools/fleet.py) with the firmware's
default heartbeat (5 s, so a 15 s liveness timeout).

Each --tree is a checkout whose bridge and firmware are run (default: this
one); give main's too to get the baseline in the same run, e.g.
``git archive main | tar -x -C /tmp/edgebus-main`` then
``python -m dev.presence --tree /tmp/edgebus-main --tree .``.
Per case it prints the seconds from the kill to the bridge's session being up
again (``session_s``) and to the device's first HELLO after the kill
(``hello_s``, when the device noticed the outage). Figures, not assertions.

Also the parts the presence tests use: :class:`BridgeProcess` and
:class:`Watcher` (an MQTT subscriber recording what passes)."""
import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import paho.mqtt.client as paho

from edgebus.tools.status import fetch
from dev.broker import Mosquitto
from edgebus.link import frame, wire
from edgebus.tools import mpybuild
from edgebus.tools.fleet import Fleet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Watcher:
    """A plain MQTT client (paho, its own thread) subscribed to ``topics``,
    recording every message as (monotonic time, topic, payload, retain)."""

    def __init__(self, port, topics, client_id="presence-watcher"):
        self.got = []
        self.lock = threading.Lock()
        self.c = c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id)
        c.on_connect = lambda cl, u, f, r, p: cl.subscribe([(t, 0) for t in topics])
        c.on_message = self._on_message
        c.reconnect_delay_set(0.05, 0.2)   # back soon after a broker restart
        c.connect("127.0.0.1", port)
        c.loop_start()

    def _on_message(self, client, userdata, msg):
        with self.lock:
            self.got.append((time.monotonic(), msg.topic, msg.payload, msg.retain))

    def messages(self, topic=None, since=0.0):
        with self.lock:
            return [m for m in self.got if m[0] >= since and (topic is None or m[1] == topic)]

    def last(self, topic):
        m = self.messages(topic)
        return m[-1][2] if m else None

    def first_hello(self, topic, since):
        """When the first HELLO frame went out on ``topic`` (a device's up) after since."""
        for t, _, payload, _ in self.messages(topic, since):
            body = frame.decode(payload, frame.MAX_LEN)
            if body is not None and body[0] & wire.TYPE_MASK == wire.HELLO:
                return t
        return None

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def retained(port, topic, timeout=5.0):
    """The retained payload at topic now, as a new subscriber gets it (None: none
    within timeout)."""
    got = threading.Event()
    box = []
    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="presence-reader-%d" % os.getpid())
    c.on_connect = lambda cl, u, f, r, p: cl.subscribe(topic, 0)
    c.on_message = lambda cl, u, m: (box.append((m.payload, m.retain)), got.set())
    c.connect("127.0.0.1", port)
    c.loop_start()
    try:
        got.wait(timeout)
    finally:
        c.disconnect()
        c.loop_stop()
    return box[0] if box else None


class BridgeProcess:
    """edgebus-bridge as its own process (``python -m edgebus.bridge.daemon``) from a
    checkout ``tree``, for MQTT devices {node: key}, with a status socket;
    or, given ``toml``, run with that configuration as it is."""

    def __init__(self, workdir, broker_port=None, devices=None, tree=ROOT, heartbeat=5.0,
                 mirror=(), client_id="bridge-presence", toml=None):
        self.tree = os.path.abspath(tree)
        self.sock = os.path.join(workdir, "bridge.sock")
        self.toml = toml or os.path.join(workdir, "bridge.toml")
        self.logpath = os.path.join(workdir, "bridge.log")
        self.proc = None
        if toml:
            return
        with open(self.toml, "w") as f:
            f.write('[bridge]\nnode = "gw"\nstate_dir = "%s"\nsocket = "%s"\nheartbeat = %r\n'
                    '[mqtt]\nurl = "mqtt://127.0.0.1:%d"\nclient_id = "%s"\nmirror = %s\n'
                    'devices = [\n%s]\n'
                    % (os.path.join(workdir, "state"), self.sock, heartbeat, broker_port,
                       client_id, json.dumps(list(mirror)),
                       "".join('  {node = "%s", key = "%s"},\n' % kv for kv in devices.items())))
        self.proc = None

    def start(self):
        env = dict(os.environ, PYTHONPATH=self.tree)
        with open(self.logpath, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "edgebus.bridge.daemon", "--config",
                                          self.toml], cwd=self.tree, env=env, stdout=log,
                                         stderr=subprocess.STDOUT)
        return self

    def kill(self):
        """SIGKILL: no goodbye; the broker publishes its last will."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout=20):
        """SIGTERM: the clean stop; returns the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def link(self, node):
        """The bridge's link to node (Link.stats()), or None if it cannot say."""
        try:
            st = asyncio.run(fetch(self.sock, timeout=2.0))
        except Exception:          # not running (yet), or not answering
            return None
        return st["links"].get("mqtt:" + node)


def wait(cond, timeout, step=0.05):
    """Wait until cond() is true; returns its value or None after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step)
    return None


def device_fleet(out, broker_port, tree=ROOT, heartbeat=5.0, health_period=2.0, **kw):
    """One real-firmware MQTT device (tools/fleet.py), its firmware compiled
    from tree."""
    fleet = Fleet(out, mqtt=1, broker=("127.0.0.1", broker_port), health_period=health_period,
                  link={"heartbeat": heartbeat}, **kw)
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
            is_up = lambda: (bridge.link(node) or {}).get("state") == "up"
            if not wait(is_up, 60):
                raise RuntimeError("no session at the start; see %s" % bridge.logpath)
            for case in ("bridge", "broker"):
                for _ in range(cycles):
                    time.sleep(1.0)          # a session that has settled (heartbeats flowing)
                    before = (bridge.link(node) or {}).get("counters", {}).get("sessions", 0)
                    t0 = time.monotonic()
                    if case == "bridge":
                        bridge.kill()
                        bridge.start()
                        ok = lambda: is_up()
                    else:
                        broker.stop()
                        broker.start()
                        ok = lambda: (lambda l: l and l["state"] == "up"
                                      and l["counters"].get("sessions", 0) > before)(
                                          bridge.link(node))
                    if not wait(ok, 90):
                        raise RuntimeError("no session after the %s restart" % case)
                    t1 = time.monotonic()
                    h = watcher.first_hello(up, t0)
                    out.append((case, round(t1 - t0, 2), round(h - t0, 2) if h else None))
                    print(json.dumps({"tree": tree, "case": case, "session_s": out[-1][1],
                                      "hello_s": out[-1][2]}), flush=True)
        finally:
            if watcher is not None:
                watcher.close()
            bridge.close()
            fleet.stop()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m dev.presence", description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", help="a checkout to run (repeatable; default: this one)")
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
