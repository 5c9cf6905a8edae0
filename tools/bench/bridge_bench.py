"""Device -> host through mosquitto: an edgebus device link (edgebus.link.mqtt)
to the bridge's MQTT links and onto the host bus, against raw paho-mqtt
publish -> subscribe through the same broker, in the same run.

Both sides run on CPython in one process; each message carries its send time
so latency is receive time minus send time on one clock."""
import asyncio
import statistics
import threading
import time

import paho.mqtt.client as paho

import edgebus
from bridge import config as C
from bridge.daemon import Bridge
from edgebus.link.link import Link
from edgebus.link.mqtt import MqttTransport
from tools.bench.stats import summary
from tools.broker import Mosquitto

PAYLOAD_PAD = "x" * 40


def _lat(samples):
    s = sorted(samples)
    return {"p50_ms": 1000 * s[len(s) // 2], "p99_ms": 1000 * s[min(len(s) - 1, int(len(s) * 0.99))]}


async def _edgebus(port, n, tmp, pace=0.0):
    cfg = C.parse({"bridge": {"state_dir": tmp, "heartbeat": 2.0},
                   "mqtt": {"url": "mqtt://127.0.0.1:%d" % port, "client_id": "bench-bridge",
                            "devices": [{"node": "b1", "key": "k"}]}})
    b = Bridge(cfg)
    bt = asyncio.create_task(b.run())
    dev = edgebus.Bus(q_length=16)
    dl = Link(dev, "b1", key=b"k", exports=[("sensor/#", "")], heartbeat=2.0, out_queue=n + 16)
    t = await MqttTransport("127.0.0.1", port, node="b1").open()
    dt = asyncio.create_task(dl.run(t))
    sub = b.bus.connect().subscribe("dev/b1/sensor/#", queue_len=n + 16)
    while b.links["mqtt:b1"].status != "up" or b.links["mqtt:b1"].counters.get("syncs", 0) < 1:
        await asyncio.sleep(0.01)
    c = dev.connect()
    lat = []

    async def receive():       # concurrently, so each arrival is timed when it happens
        for _ in range(n):
            m = await asyncio.wait_for(sub.recv(), 30)
            lat.append(time.perf_counter() - m.payload["t"])
    rx = asyncio.create_task(receive())
    t0 = time.perf_counter()
    for i in range(n):
        c.publish("sensor/v", {"t": time.perf_counter(), "pad": PAYLOAD_PAD})
        if pace:
            await asyncio.sleep(pace)
        elif i % 32 == 31:
            await asyncio.sleep(0)
    await rx
    dur = time.perf_counter() - t0
    gaps = b.links["mqtt:b1"].counters.get("gaps", 0)
    await dl.close()
    dt.cancel()
    b.stop()
    await bt
    return n / dur, lat, gaps


def _paho(port, n, pace=0.0):
    done = threading.Event()
    lat = []

    def on_message(cl, ud, msg):
        import json
        lat.append(time.perf_counter() - json.loads(msg.payload)["t"])
        if len(lat) == n:
            done.set()
    sub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="bench-sub")
    sub.on_message = on_message
    sub.connect("127.0.0.1", port)
    sub.subscribe("raw/sensor/v")
    sub.loop_start()
    pub = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="bench-pub")
    pub.connect("127.0.0.1", port)
    pub.loop_start()
    time.sleep(0.3)
    import json
    t0 = time.perf_counter()
    for _ in range(n):
        pub.publish("raw/sensor/v", json.dumps({"t": time.perf_counter(), "pad": PAYLOAD_PAD}))
        if pace:
            time.sleep(pace)
    ok = done.wait(30)
    dur = time.perf_counter() - t0
    for cl in (pub, sub):
        cl.loop_stop()
        cl.disconnect()
    if not ok:
        raise RuntimeError("paho baseline lost messages: %d of %d" % (len(lat), n))
    return n / dur, lat


def run(smoke=False):
    import tempfile
    n = 300 if smoke else 3000
    reps = 1 if smoke else 3
    eb, raw = [], []
    eb_lat, raw_lat = [], []
    gaps = 0
    with Mosquitto() as broker:
        for _ in range(reps):
            with tempfile.TemporaryDirectory() as tmp:
                r, lat, g = asyncio.run(_edgebus(broker.port, n, tmp))
            eb.append(r)
            eb_lat += lat
            gaps += g
            r, lat = _paho(broker.port, n)
            raw.append(r)
            raw_lat += lat
        # Latency with paced sends (200/s), so it is the path's, not a queue's.
        m = 100 if smoke else 600
        with tempfile.TemporaryDirectory() as tmp:
            _, pl_eb, g = asyncio.run(_edgebus(broker.port, m, tmp, pace=0.005))
        gaps += g
        _, pl_raw = _paho(broker.port, m, pace=0.005)
    return {"messages": n, "edgebus_msgs_per_s": summary(eb), "paho_msgs_per_s": summary(raw),
            "ratio": statistics.median(eb) / statistics.median(raw),
            "burst_latency": {"edgebus": _lat(eb_lat), "paho": _lat(raw_lat)},
            "paced_latency": {"edgebus": _lat(pl_eb), "paho": _lat(pl_raw), "rate": 200},
            "gaps": gaps}


if __name__ == "__main__":
    import json
    print(json.dumps(run(smoke=True), indent=1))
