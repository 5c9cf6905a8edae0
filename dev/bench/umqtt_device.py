"""The baseline device of dev/bench/device_cost.py: what a MicroPython user
would write instead of edgebus, micropython-lib's umqtt.simple publishing N
readings of the same shape (the JSON of {"t", "i", "pad"}) every PACE_MS, at
QoS 0 or 1 (a PUBACK waited for each), then idling until it is killed.

usage: micropython umqtt_device.py HOST PORT TOPIC N PACE_MS QOS
Prints "up" once connected and before the first reading, then {"sent": N}.
"""

import json
import sys
import time

from umqtt.simple import MQTTClient

PAD = "x" * 40  # as dev/bench/bridge_device.py's


def main(host, port, topic, n, pace_ms, qos):
    c = MQTTClient("umqtt-bench-%d" % qos, host, port=port)
    c.connect()
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
