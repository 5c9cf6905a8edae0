"""The baseline device of dev/bench/device_cost.py: what a MicroPython user
would write instead of edgebus, micropython-lib's umqtt.simple publishing N
readings of the same shape (the JSON of {"t", "i", "pad"}) every PACE_MS, at
QoS 0 or 1 (a PUBACK waited for each), then idling until it is killed.

usage: micropython umqtt_device.py HOST PORT TOPIC N PACE_MS QOS
Prints before "up" (once connected, before the first reading) a "wire" line:
what it wrote ("out") and read ("in") on its socket until then, in hex, and a
"heap" line: gc.mem_alloc() after gc.collect() once connected less before the
client was made ("up"); then {"sent": N} after the last reading.
"""

import gc
import json
import socket
import sys
import time
from binascii import hexlify

from umqtt import simple
from umqtt.simple import MQTTClient

PAD = "x" * 40  # as dev/bench/bridge_device.py's
WIRE = {"out": bytearray(), "in": bytearray()}


class _Counted:
    """The client's socket, its bytes in WIRE too (until the first reading)."""

    def __init__(self, s):
        self._s = s

    def __getattr__(self, k):
        return getattr(self._s, k)

    def write(self, b, n=None):
        b = b if n is None else b[:n]
        WIRE["out"] += b
        return self._s.write(b)

    def read(self, n):
        b = self._s.read(n)
        WIRE["in"] += b
        return b


class _Socket:
    """umqtt.simple's socket module, with its sockets counted."""

    getaddrinfo = staticmethod(socket.getaddrinfo)

    @staticmethod
    def socket():
        return _Counted(socket.socket())


def main(host, port, topic, n, pace_ms, qos):
    simple.socket = _Socket
    gc.collect()
    h0 = gc.mem_alloc()
    c = MQTTClient("umqtt-bench-%d" % qos, host, port=port)
    c.connect()
    c.sock = c.sock._s  # counted until here: its readings go uncounted
    simple.socket = socket
    print("wire", json.dumps({k: hexlify(v).decode() for k, v in WIRE.items()}))
    WIRE["out"], WIRE["in"] = bytearray(), bytearray()  # as before the client: no heap of ours
    gc.collect()
    print("heap", json.dumps({"up": gc.mem_alloc() - h0}))
    print("up")
    for i in range(n):
        c.publish(topic, json.dumps({"t": time.time_ns(), "i": i, "pad": PAD}), qos=qos)
        # time.sleep, not sleep_ms: the unix port's sleep_ms polls and costs
        # ~0.6 ms of CPU a call; sleep waits in the kernel, as a board's WFI
        time.sleep(pace_ms / 1000)
    print(json.dumps({"sent": n}))
    while True:  # as the edgebus device: the benchmark kills it
        time.sleep(1)


a = sys.argv[1:]
main(a[0], int(a[1]), a[2], int(a[3]), int(a[4]), int(a[5]))
