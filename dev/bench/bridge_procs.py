"""The processes of the bridge benchmark other than the device
(dev/bench/bridge_device.py): each runs alone, as in a deployment.

usage: python -m dev.bench.bridge_procs bridge CONFIG_JSON PATTERN [--profile FILE]
       python -m dev.bench.bridge_procs paho-sub PORT TOPIC
       python -m dev.bench.bridge_procs lean-sub PORT TOPIC
       python -m dev.bench.bridge_procs paho-pub PORT TOPIC N PACE_MS

Receivers (`bridge`: the real bridge daemon's Bridge with its MQTT links,
subscribed on its host bus; `paho-sub`: a raw paho subscriber; `lean-sub`: the
bridge's own MQTT client, bridge/links/mqtt_conn.py, doing the same work per
message as `paho-sub`, so the two clients compare alone) print "ready",
then obey stdin lines, one JSON result line each:

  expect N SECONDS   receive N stamped messages (payload {"t": send ns, "i"})
  window SECONDS     count every message for SECONDS (the fleet: payload "n")
  up K SECONDS       (bridge) wait until K device links are up
  quit

Results give the rate from the first message's send stamp to the last
arrival, every latency, and the receiver's CPU seconds (process time), which
noise from other processes on the machine does not inflate.
"""

import asyncio
import json
import sys
import threading
import time

ns = time.time_ns


class Tally:
    """What a receiver saw of one `expect` or `window` run."""

    def __init__(self):
        self.lat = []
        self.first_t = None
        self.last_arrival = None
        self.seen = set()
        self.ranges = {}  # node -> [first n, last n, count] (window runs)
        self.count = 0
        self.cpu0 = time.process_time()

    def stamped(self, p, now):
        t = p["t"]
        if self.first_t is None or t < self.first_t:
            self.first_t = t
        self.lat.append((now - t) / 1e9)
        self.seen.add(p["i"])
        self.count += 1
        self.last_arrival = now

    def numbered(self, node, p):
        r = self.ranges.get(node)
        n = p.get("n") if type(p) is dict else None
        if type(n) is not int:
            return
        if r is None:
            self.ranges[node] = [n, n, 1]
        else:
            r[0] = min(r[0], n)
            r[1] = max(r[1], n)
            r[2] += 1
        self.count += 1

    def result(self, expected=None):
        cpu = time.process_time() - self.cpu0
        d = {"received": self.count, "cpu_s": cpu}
        if expected is not None:
            dur = (self.last_arrival - self.first_t) / 1e9 if self.count else 0
            d.update(
                {
                    "expected": expected,
                    "distinct": len(self.seen),
                    "seconds": dur,
                    "rate": self.count / dur if dur > 0 else 0.0,
                    "lat": self.lat,
                }
            )
        if self.ranges:
            d["sent"] = sum(r[1] - r[0] + 1 for r in self.ranges.values())
            d["devices"] = len(self.ranges)
        return d


def _say(obj):
    sys.stdout.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    sys.stdout.flush()


# -- the bridge ----------------------------------------------------------------


async def _sessions_up(b, k, timeout):
    """Wait up to timeout s for k sessions up; returns how many are."""
    limit = time.time() + timeout
    while time.time() < limit:
        if sum(1 for l in b.links.values() if l.status == "up") >= k:
            break
        await asyncio.sleep(0.1)
    return sum(1 for l in b.links.values() if l.status == "up")


async def _commands():
    """The stdin lines of an asyncio receiver, split, until "quit" or the end."""
    loop = asyncio.get_running_loop()
    while True:
        cmd = (await loop.run_in_executor(None, sys.stdin.readline)).split()
        if not cmd or cmd[0] == "quit":
            return
        yield cmd


async def _expect(sub, n, limit):
    """Stamp n messages (or those within limit s of each other)."""
    tally = Tally()
    try:
        while tally.count < n:
            # Waits only when nothing is queued: a wait_for per message
            # would cost this receiver more than the bridge's own work.
            m = sub.recv_nowait() or await asyncio.wait_for(sub.recv(), limit)
            tally.stamped(m.payload, ns())
    except asyncio.TimeoutError:
        pass
    return tally.result(n)


async def _window(sub, seconds):
    """Count the numbered messages that arrive within seconds."""
    tally = Tally()
    end = time.time() + seconds
    while True:
        left = end - time.time()
        if left <= 0:
            break
        try:
            m = await asyncio.wait_for(sub.recv(), left)
        except asyncio.TimeoutError:
            break
        tally.numbered(m.topic[1], m.payload)
    return tally.result()


async def _bridge(cfg_path, pattern, profile):
    from edgebus.bridge import config as bridge_config
    from edgebus.bridge.daemon import Bridge

    with open(cfg_path) as f:
        b = Bridge(bridge_config.parse(json.load(f)))
    bt = asyncio.create_task(b.run())
    sub = b.bus.connect().subscribe(pattern, queue_len=65536)
    while not b.mqtt.connected:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # its subscriptions are in place
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
    _say("ready")
    async for cmd in _commands():
        gaps0 = sum(l.counters.get("gaps", 0) for l in b.links.values())
        drop0 = sum(l.counters.get("over_share", 0) for l in b.links.values())
        while sub.recv_nowait() is not None:  # leftovers of an earlier run
            pass
        if cmd[0] == "up":
            _say({"up": await _sessions_up(b, int(cmd[1]), float(cmd[2]))})
            continue
        if prof:
            prof.enable()
        _say("ok")
        if cmd[0] == "expect":
            res = await _expect(sub, int(cmd[1]), float(cmd[2]))
        else:
            res = await _window(sub, float(cmd[1]))
        if prof:
            prof.disable()
        res["gaps"] = sum(l.counters.get("gaps", 0) for l in b.links.values()) - gaps0
        # Frames dropped past a device's share of the queue: a burst's last
        # ones leave no gap behind them (no later number shows the hole).
        res["dropped"] = sum(l.counters.get("over_share", 0) for l in b.links.values()) - drop0
        _say(res)
    b.stop()
    await bt
    if prof:
        prof.dump_stats(profile)


# -- raw paho ------------------------------------------------------------------


def _client(port, name):
    import paho.mqtt.client as paho

    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=name)
    c.connect("127.0.0.1", port)
    return c


def _paho_sub(port, topic):
    state = {"tally": None, "want": 0}
    done = threading.Event()

    def on_message(cl, ud, msg):
        t = state["tally"]
        if t is None:
            return
        t.stamped(json.loads(msg.payload), ns())
        if t.count >= state["want"]:
            done.set()

    c = _client(port, "bench-sub-%d" % ns())
    c.on_message = on_message
    c.subscribe(topic)
    c.loop_start()
    time.sleep(0.3)
    _say("ready")
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        done.clear()
        state["want"] = int(cmd[1])
        state["tally"] = Tally()
        _say("ok")
        done.wait(float(cmd[2]))
        t, state["tally"] = state["tally"], None
        res = t.result(state["want"])
        res["gaps"] = 0
        _say(res)
    c.loop_stop()
    c.disconnect()


def _lean_sub(port, topic):
    from edgebus.bridge.links import mqtt_conn

    async def main():
        loop = asyncio.get_running_loop()
        state = {"tally": None, "want": 0, "done": None}

        def on_message(t, payload):
            tally = state["tally"]
            if tally is None:
                return
            tally.stamped(json.loads(payload), ns())
            if tally.count >= state["want"] and not state["done"].done():
                state["done"].set_result(None)

        conn = await mqtt_conn.connect(
            "127.0.0.1", port, "bench-lean-%d" % ns(), on_message, [topic]
        )
        conn.resume_reading()
        _say("ready")
        async for cmd in _commands():
            state["want"] = int(cmd[1])
            state["done"] = loop.create_future()
            state["tally"] = Tally()
            _say("ok")
            try:
                await asyncio.wait_for(state["done"], float(cmd[2]))
            except asyncio.TimeoutError:
                pass
            t, state["tally"] = state["tally"], None
            res = t.result(state["want"])
            res["gaps"] = 0
            _say(res)
        conn.close()

    asyncio.run(main())


def _paho_pub(port, topic, n, pace_ms):
    # No network thread: publish() then writes to the socket at once, in this
    # thread, the fastest way paho publishes (a loop_start() thread would
    # contend for the GIL with this loop).
    c = _client(port, "bench-pub-%d" % ns())
    while not c.is_connected():
        c.loop(0.05)
    pad = "x" * 40
    for i in range(n):
        c.publish(topic, json.dumps({"t": ns(), "i": i, "pad": pad}))
        if pace_ms:
            time.sleep(pace_ms / 1000)
    while c.want_write():
        c.loop_write()
    c.disconnect()
    _say("sent %d" % n)


def main(argv):
    role = argv[0]
    if role == "bridge":
        prof = argv[argv.index("--profile") + 1] if "--profile" in argv else None
        asyncio.run(_bridge(argv[1], argv[2], prof))
    elif role == "paho-sub":
        _paho_sub(int(argv[1]), argv[2])
    elif role == "lean-sub":
        _lean_sub(int(argv[1]), argv[2])
    elif role == "paho-pub":
        _paho_pub(int(argv[1]), argv[2], int(argv[3]), float(argv[4]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
