"""Plain MQTT clients (paho) that watch what passes through a broker."""

import os
import threading
import time

import paho.mqtt.client as paho

from edgebus.link import frame, wire


class Watcher:
    """A plain MQTT client (paho, its own thread) subscribed to ``topics``,
    recording every message as (monotonic time, topic, payload, retain)."""

    def __init__(self, port, topics, client_id="presence-watcher"):
        self.got = []
        self.lock = threading.Lock()
        self.c = c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id)
        c.on_connect = lambda cl, u, f, r, p: cl.subscribe([(t, 0) for t in topics])
        c.on_message = self._on_message
        c.reconnect_delay_set(0.05, 0.2)  # back soon after a broker restart
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
