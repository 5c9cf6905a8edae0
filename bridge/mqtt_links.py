"""MQTT device links of the bridge (aiomqtt): one broker connection carries
every device's link frames on <prefix>/<node>/up and /down; presence comes
from the retained <prefix>/<node>/state that each device's last will sets to
"offline". Optionally mirrors chosen host-bus topics as plain MQTT JSON."""
import asyncio
import json
import logging
import ssl
from urllib.parse import urlparse

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from bridge.links import Backoff, device_rules
from edgebus import Message
from edgebus.link import frame
from edgebus.link.link import Link

log = logging.getLogger("edgebus.bridge")


class _DeviceTransport:
    """The link transport of one device: bodies arrive through a queue the
    broker dispatcher fills; sends are publishes on the device's down topic."""

    def __init__(self, client, down, max_len):
        self.client = client
        self.down = down
        self.max_len = max_len
        self.q = asyncio.Queue(256)
        self.frames = frame.FrameReader(max_len)   # counters only
        self.closed = False

    def deliver(self, payload):
        body = frame.decode(payload, self.max_len)
        if body is None:
            self.frames.crc_errors += 1
            return
        self.frames.frames += 1
        try:
            self.q.put_nowait(body)
        except asyncio.QueueFull:
            self.frames.oversize += 1     # counted: the link sees the gap

    async def recv(self):
        if self.closed:
            return None
        b = await self.q.get()
        if b is None:
            return None
        out = [b]
        while not self.q.empty():
            b = self.q.get_nowait()
            if b is None:
                self.closed = True
                break
            out.append(b)
        return out

    async def send(self, body):
        if self.closed:
            raise OSError("MQTT connection closed")
        try:
            await self.client.publish(self.down, frame.encode(body, self.max_len))
        except aiomqtt.MqttError as e:
            raise OSError(str(e))

    def close(self):
        if not self.closed:
            self.closed = True
            self.q.put_nowait(None)

    def stats(self):
        return self.frames.stats()


class MqttLinks:
    """Keeps the broker connection and one Link per configured device."""

    def __init__(self, bridge, mq):
        self.bridge = bridge
        self.mq = mq
        u = urlparse(mq.url)
        if u.scheme not in ("mqtt", "mqtts"):
            raise ValueError("[mqtt] url must be mqtt://host:port or mqtts://host:port")
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (8883 if u.scheme == "mqtts" else 1883)
        self.tls = u.scheme == "mqtts"
        self.links = {}
        self.transports = {}
        self.connected = False
        self.connects = 0
        self.unknown = 0
        for node, key in mq.keys.items():
            link_id = "mqtt:" + node
            self.links[node] = Link(bridge.bus, bridge.cfg.node, key=key, role="responder",
                                    link_id=link_id, peer=node,
                                    heartbeat=bridge.cfg.heartbeat,
                                    state=bridge.state.for_link(link_id), **device_rules())
            bridge.links[link_id] = self.links[node]

    def _client(self):
        tls = None
        if self.tls:
            tls = ssl.create_default_context(cafile=self.mq.tls_ca)
        return aiomqtt.Client(self.host, self.port, identifier=self.mq.client_id,
                              username=self.mq.username, password=self.mq.password,
                              tls_context=tls, protocol=aiomqtt.ProtocolVersion.V5,
                              keepalive=30)

    async def run(self):
        backoff = Backoff()
        p = self.mq.prefix
        while not self.bridge.stopping:
            try:
                async with self._client() as client:
                    self.connected = True
                    self.connects += 1
                    backoff.reset()
                    log.info("mqtt: connected to %s:%d", self.host, self.port)
                    await client.subscribe(p + "/+/up")
                    await client.subscribe(p + "/+/state")
                    tasks = []
                    for node, link in self.links.items():
                        t = _DeviceTransport(client, "%s/%s/down" % (p, node), link.max_len)
                        self.transports[node] = t
                        tasks.append(asyncio.create_task(link.run(t)))
                    if self.mq.mirror:
                        tasks.append(asyncio.create_task(self._mirror(client)))
                    try:
                        async for m in client.messages:
                            self._dispatch(m)
                    finally:
                        for t in self.transports.values():
                            t.close()
                        for t in tasks:
                            t.cancel()
                        await asyncio.gather(*tasks, return_exceptions=True)
            except aiomqtt.MqttError as e:
                log.warning("mqtt: %s; reconnecting", e)
            self.connected = False
            self.bridge.state.save()
            await self.bridge.sleep(backoff.next())

    def _dispatch(self, m):
        parts = m.topic.value.split("/")
        if len(parts) != 3:
            return
        node, kind = parts[1], parts[2]
        link = self.links.get(node)
        if link is None:
            self.unknown += 1     # a device without a configured key never gets in
            return
        if kind == "up":
            t = self.transports.get(node)
            if t is not None:
                t.deliver(bytes(m.payload))
        elif kind == "state":
            online = bytes(m.payload) == b"online"
            link.count("presence_online" if online else "presence_offline")
            if not online and link.status == "up":
                # The broker delivered the device's last will: no need to wait
                # for the liveness timeout.
                link._session_down("device offline (MQTT last will)")

    async def _mirror(self, client):
        """Publish chosen host-bus topics as plain MQTT: JSON payloads, retained
        where retained, provenance in MQTT 5 user properties."""
        conn = self.bridge.bus.connect(principal=("bridge", "mqtt-mirror"))
        wake = asyncio.Event()
        obs = []
        for pat in self.mq.mirror:
            o = conn.observe(pat, queue_len=1024)
            o.wake_on(wake)
            obs.append(o)
        try:
            while True:
                wake.clear()
                for o in obs:
                    while True:
                        item = o.recv_nowait()
                        if item is None:
                            break
                        await self._mirror_one(client, item)
                await wake.wait()
        finally:
            conn.disconnect()

    async def _mirror_one(self, client, item):
        topic = "/".join(str(t) for t in item.topic)
        retain = type(item) is not Message
        if retain and item.op == "unretain":
            payload = b""          # an empty retained message clears it on the broker
        else:
            p = item.payload
            try:
                payload = json.dumps(p) if not isinstance(p, (bytes, bytearray)) else bytes(p)
            except (TypeError, ValueError, RecursionError):
                return
        o = item.origin
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [(k, str(v)) for k, v in (
            ("origin_kind", o.kind), ("link_id", o.link_id), ("peer_node", o.peer_node),
            ("peer_sid", o.peer_sid), ("generation", o.generation),
            ("seq", (o.extra or {}).get("seq"))) if v is not None]
        await client.publish(topic, payload, retain=retain, properties=props)

    def stats(self):
        return {"connected": self.connected, "connects": self.connects,
                "unknown_devices": self.unknown}
