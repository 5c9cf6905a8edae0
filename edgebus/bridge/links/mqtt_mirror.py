"""The MQTT mirror: chosen host-bus topics published as plain MQTT JSON for
other MQTT clients ([mqtt] mirror), retained where retained, provenance in
MQTT 5 user properties. It needs MQTT 5 and runs on aiomqtt, on a
connection of its own (<client_id>-mirror) beside the links' connection."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgebus import Message
from edgebus.bridge.links.ticker import Outage, retry_backoff

if TYPE_CHECKING:
    from ssl import SSLContext

    from aiomqtt import Client

    from edgebus.bridge.config import Mqtt
    from edgebus.bridge.context import BridgeView

log = logging.getLogger("edgebus.bridge")


async def run(bridge: BridgeView, mq: Mqtt, host: str, port: int, tls: SSLContext | None) -> None:
    """Mirror ``mq.mirror``'s patterns of ``bridge``'s bus to the broker at
    host:port (``tls``: an SSL context or None), reconnecting like the links'
    connection, until cancelled."""
    backoff = retry_backoff()
    outage = Outage("mqtt mirror (the [mqtt] mirror topics, republished for other MQTT clients)")
    while True:
        try:
            async with aiomqtt.Client(
                host,
                port,
                identifier=mq.client_id + "-mirror",
                username=mq.username,
                password=mq.password,
                tls_context=tls,
                protocol=aiomqtt.ProtocolVersion.V5,
                keepalive=30,
                timeout=2.0,
            ) as client:
                # timeout: aiomqtt waits this long for a disconnect to be
                # confirmed (10 s by default); a stop allows each step 5 s.
                backoff.reset()
                outage.over()
                await _mirror(bridge, mq, client)
        except aiomqtt.MqttError as e:
            outage.failed(str(e))
        await bridge.sleep(backoff.next())


async def _mirror(bridge: BridgeView, mq: Mqtt, client: Client) -> None:
    conn = bridge.bus.connect(principal=("bridge", "mqtt-mirror"))
    wake = asyncio.Event()
    obs = []
    for pat in mq.mirror:
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
                    await _publish(client, item)
            await wake.wait()
    finally:
        conn.disconnect()


async def _publish(client: Client, item: Any) -> None:  # a Message or RetainedEvent
    topic = "/".join(str(t) for t in item.topic)
    retain = type(item) is not Message
    if retain and item.op == "unretain":
        payload: bytes | str = b""  # an empty retained message clears it on the broker
    else:
        p = item.payload
        try:
            payload = json.dumps(p) if not isinstance(p, (bytes, bytearray)) else bytes(p)
        except (TypeError, ValueError, RecursionError):
            return
    o = item.origin
    props = Properties(PacketTypes.PUBLISH)
    props.UserProperty = [
        (k, str(v))
        for k, v in (
            ("origin_kind", o.kind),
            ("link_id", o.link_id),
            ("peer_node", o.peer_node),
            ("peer_sid", o.peer_sid),
            ("generation", o.generation),
            ("seq", (o.extra or {}).get("seq")),
        )
        if v is not None
    ]
    await client.publish(topic, payload, retain=retain, properties=props)
