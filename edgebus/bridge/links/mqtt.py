"""MQTT device links of the bridge: one broker connection carries every
device's link frames on <prefix>/<node>/up and /down; presence comes from the
retained <prefix>/<node>/state that each device's last will sets to
"offline". The bridge's own presence is the retained <prefix>/_bridge:
"online" once the connection is subscribed (it can take frames), "offline"
by its last will or, on a clean stop, published just before DISCONNECT; the
devices subscribe to it (docs/protocol.md, "MQTT presence"). Optionally
mirrors chosen host-bus topics as plain MQTT JSON (bridge/links/mqtt_mirror.py).

The frames' connection is a lean MQTT client on the event loop
(bridge/links/mqtt_conn.py): it hands each frame to its device's transport
(bridge/links/mqtt_transport.py), which the device's Link reads."""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING, Any, Iterable
from urllib.parse import urlparse

from edgebus.bridge import split
from edgebus.bridge.keystore import KeyStoreError
from edgebus.bridge.links import mqtt_conn, mqtt_mirror
from edgebus.bridge.links.broker_drops import TOPIC as DROPS_TOPIC
from edgebus.bridge.links.broker_drops import BrokerDrops
from edgebus.bridge.links.mqtt_transport import Backlog, DeviceTransport
from edgebus.bridge.links.quota import FLOOD_AT, FLOOD_STEP, MUTE_CHECK, Mutes
from edgebus.bridge.links.ticker import Outage, retry_backoff, tick_links
from edgebus.bridge.telemetry.flow import WINDOW_MAX
from edgebus.link.link import Link

if TYPE_CHECKING:
    from ssl import SSLContext

    from edgebus.bridge.config import Mqtt
    from edgebus.bridge.context import BridgeView
    from edgebus.bridge.links.mqtt_conn import Connection

log = logging.getLogger("edgebus.bridge")

# A plain connection the broker drops before it answers is what a TLS port
# does to it (mosquitto hears no TLS hello and closes): say so.
NOT_TLS = " before it answered (if that port takes TLS, the url is mqtts://)"


class MqttLinks:
    """Keeps the broker connection and one Link per configured device."""

    def __init__(self, bridge: BridgeView, mq: Mqtt) -> None:
        self.bridge = bridge
        self.mq = mq
        u = urlparse(mq.url)
        if u.scheme not in ("mqtt", "mqtts"):
            raise ValueError("[mqtt] url must be mqtt://host:port or mqtts://host:port")
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (8883 if u.scheme == "mqtts" else 1883)
        self.tls = u.scheme == "mqtts"
        # Two levels: never one of a device's <prefix>/<node>/<kind> topics.
        self.presence = mq.prefix + "/_bridge"
        self.links: dict[str, Link] = {}
        self.transports: dict[str, DeviceTransport] = {}
        self._up: dict[str, DeviceTransport] = {}  # "<prefix>/<node>/up" -> that device's transport
        self.connected = False
        self.connects = 0
        self.outage = Outage("mqtt: %s:%d" % (self.host, self.port))
        self.unknown = 0
        self.drops = BrokerDrops()
        # while connected: (connection, its backlog, link tasks)
        self._live: tuple[Connection, Backlog, list[asyncio.Task[Any]]] | None = None
        # node -> (key, seal) its link was made with
        self.devices: dict[str, tuple[bytes | None, str | None]] = {}
        self.mutes = Mutes()
        self._syncing = asyncio.Lock()
        for node, entry in self.wanted(mq).items():
            self._add(node, *entry)

    def wanted(self, mq: Mqtt) -> dict[str, tuple[bytes | None, str | None]]:
        """{node: (key, seal)}: the devices ``mq`` gives this bridge: its
        list and, with the keystore on, in a shard every node with a key file,
        else the nodes that arrived (linked on their first frame) while their
        key file lasts."""
        want = {n: (k, mq.seals.get(n)) for n, k in mq.keys.items()}
        if mq.keystore:
            held = self.bridge.keystore.nodes()
            if mq.part is not None:  # a worker: the keystore's devices that hash to it
                held = [n for n in held if split.worker_of(n, mq.part[1]) == mq.part[0]]
            # The mode is the running one's: a reload does not change it.
            for n in held if self.mq.shard else set(self.links) & set(held):
                want.setdefault(n, (None, None))
        for n in [n for n in want if "+" in n or "#" in n]:
            # In a topic it would be a wildcard: every device's frames.
            log.error("mqtt: node id %r has an MQTT wildcard (+ or #): not linked", n)
            del want[n]
        return want

    def _add(self, node: str, key: bytes | None, seal: str | None = None) -> Link:
        """The Link of device ``node`` (its key: the keystore's, else ``key``)."""
        link_id = "mqtt:" + node
        b = self.bridge
        link = self.links[node] = Link(
            b.bus,
            b.cfg.node,
            key=b.keystore.source(node, key),
            role="responder",
            link_id=link_id,
            peer=node,
            state=b.state.for_link(link_id),
            # shared by the devices alike; ticked with the others (_links_forever)
            opts=b.link_options.device("mqtt", seal, self.mq.paced.get(node)),
        )
        if not link.opts.durable:  # with a log, telemetry/flow.py gives the window
            link.window(WINDOW_MAX)  # past its share (SHARE) frames are dropped, all resent
        b.add_link(link)
        self.devices[node] = (key, seal)
        return link

    def _topics(self, nodes: Iterable[str]) -> list[str]:
        """The topics of ``nodes``: frames and presence; a muted one's presence."""
        p = self.mq.prefix
        muted = self.mutes.until
        return [
            t
            for n in nodes
            for t in ("%s/%s/up" % (p, n), "%s/%s/state" % (p, n))
            if n not in muted or t.endswith("/state")
        ]

    def subscriptions(self) -> list[str]:
        """What this bridge subscribes to: all devices' topics, or each of
        its devices' (a shard, or while one is muted: MQTT has no wildcard
        that leaves one out), a muted device's frames not."""
        p = self.mq.prefix
        muted = self.mutes.until
        if not self.mq.shard and not muted:
            return [p + "/+/up", p + "/+/state"]
        nodes = set(self.links)
        if not self.mq.shard and self.mq.keystore:  # who may still arrive
            try:
                nodes.update(self.bridge.keystore.nodes())
            except KeyStoreError:
                pass
        return self._topics(sorted(nodes))

    async def _sync(self, conn: Connection) -> None:
        """Subscribe ``conn`` to subscriptions() and no more. Both packets
        go out at once, the new topics first: the broker takes them in that
        order, so no frame falls in between (one may come twice), and the
        unsubscription does not wait for an answer that a flood queues up
        behind itself."""
        async with self._syncing:
            want = set(self.subscriptions())
            have = conn.topics - {DROPS_TOPIC}
            await asyncio.gather(
                self._resubscribe(conn, sorted(want - have), False),
                self._resubscribe(conn, sorted(have - want), True),
            )

    async def _watch_floods(self, conn: Connection) -> None:
        """Mutes a device that floods, and lifts its mute (quota.Mutes)."""
        while True:
            await asyncio.sleep(MUTE_CHECK)
            for t in self.transports.values():
                t.recent = 0
                t.flood_at = FLOOD_AT
            if not self.bridge.cfg.quota_mute:  # [quota] mute = false
                continue
            muted, ended = self.mutes.check(self.links)
            for node in muted + ended:
                mt = self.transports.get(node)
                if mt is not None:
                    mt.muted = node in self.mutes.until
            if muted or ended:
                await self._sync(conn)

    def _flooded(self, node: str) -> None:
        """Device ``node``'s messages reached the flood mark in this check:
        muted from this message on if more than a window of them wait for
        its link, else looked at again FLOOD_STEP messages on."""
        t = self.transports.get(node)
        link = self.links.get(node)
        if t is None or link is None or self._live is None:
            return
        if len(t.pending) <= WINDOW_MAX or not self.bridge.cfg.quota_mute:
            t.flood_at += FLOOD_STEP
            return
        why = "%d messages in under %.2f s, %d of them waiting" % (
            t.recent,
            MUTE_CHECK,
            len(t.pending),
        )
        if self.mutes.mute(node, link, why):
            t.muted = True
            conn, _, tasks = self._live
            tasks.append(asyncio.get_running_loop().create_task(self._sync(conn)))

    async def update(self, mq: Mqtt) -> dict[str, Any]:
        """Apply ``mq``, a reloaded [mqtt] (the same url, prefix and mode):
        links for new devices, BYE and no link for removed ones, a new link
        for one whose key or seal changed. Returns {"added", "removed",
        "changed"}: node lists."""
        want = self.wanted(mq)
        old = self.devices
        gone = [n for n in old if n not in want or want[n] != old[n]]
        new = [n for n in want if n not in old or want[n] != old[n]]
        changed = sorted(set(gone) & set(new))
        self.mq.keys, self.mq.seals, self.mq.keystore = mq.keys, mq.seals, mq.keystore
        self.mq.paced = mq.paced
        live = self._live
        await asyncio.gather(
            *(self._drop(n, "changed" if n in changed else "released") for n in gone)
        )
        for n in new:
            link = self._add(n, *want[n])
            if self._live is not None:
                self._attach(n, link)
            if n not in changed:
                log.info("mqtt: %s linked (added)", n)
        live = self._live
        if live is not None and (gone or new):
            await self._sync(live[0])
        if live is not None and self.mq.shard and new:
            try:  # devices still waiting for an answer to their HELLO say it again now
                await live[0].publish(self.presence, b"online", retain=True)
            except OSError:
                pass  # the connection ended: the next one says it
        if gone or new:
            self.bridge.state.save()
        return {
            "added": sorted(set(new) - set(changed)),
            "removed": sorted(set(gone) - set(changed)),
            "changed": changed,
        }

    async def _resubscribe(self, conn: Connection, topics: list[str], unsub: bool) -> None:
        if not topics:
            return
        try:
            if unsub:
                await conn.unsubscribe(topics)
            else:
                refused = await conn.subscribe(topics)
                if refused:
                    log.error(
                        "mqtt: the broker refused a subscription to %s: those devices "
                        "get no session here",
                        ", ".join(refused),
                    )
        except OSError:
            pass  # the connection ended: the next one subscribes to what is wanted then

    async def _drop(self, node: str, why: str) -> None:
        """End device ``node``'s session with a BYE and forget its link (its
        peer state stays in the state file, for when it comes back)."""
        link = self.links.pop(node)
        del self.devices[node]
        self.bridge.remove_link(link.link_id)
        t = self.transports.pop(node, None)
        if t is not None:
            self._up.pop("%s/%s/up" % (self.mq.prefix, node), None)
        up = link.status == "up"
        await link.close(
            "device moved off this bridge" if why == "released" else "device re-linked"
        )
        log.info(
            "mqtt: %s %s",
            node,
            "re-linked (its key or seal changed)"
            if why != "released"
            else "released (removed): %s, link dropped" % ("BYE sent" if up else "no session"),
        )

    def _attach(self, node: str, link: Link) -> DeviceTransport:
        """Run ``link`` over the live connection: its transport and task."""
        assert self._live is not None  # for mypy: called only while connected
        conn, backlog, tasks = self._live
        p = self.mq.prefix
        t = DeviceTransport(conn, "%s/%s/down" % (p, node), link.opts.max_len, backlog, link.count)
        t.flood_at = FLOOD_AT
        t.on_flood = lambda: self._flooded(node)
        t.muted = node in self.mutes.until
        self.transports[node] = t
        self._up["%s/%s/up" % (p, node)] = t
        tasks[:] = [x for x in tasks if not x.done()]  # released devices' runs
        tasks.append(asyncio.create_task(link.run(t)))
        return t

    def _arrived(self, node: str) -> DeviceTransport | None:
        """A device the configuration does not list, taken on its first frame
        when [mqtt] keystore is on and the keystore holds its key (so a
        device provisioned with `edgebus keys new` needs no restart)."""
        ks = self.bridge.keystore
        try:
            if self._live is None or not self.mq.keystore or ks.read(node) is None:
                return None
        except KeyStoreError:  # a name that cannot be a key file, or a bad file
            return None
        log.info("mqtt: %s has a key in the keystore: linking it", node)
        return self._attach(node, self._add(node, None, None))

    def tls_context(self) -> SSLContext | None:
        """The SSL context for the broker (mqtts://), or None."""
        return ssl.create_default_context(cafile=self.mq.tls_ca) if self.tls else None

    async def run(self) -> None:
        tasks = []
        if self.mq.mirror:
            tasks.append(
                asyncio.create_task(
                    mqtt_mirror.run(self.bridge, self.mq, self.host, self.port, self.tls_context())
                )
            )
        try:
            await self._links_forever()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _links_forever(self) -> None:
        backoff = retry_backoff()
        # Shards share the broker's presence topic: one going must not say
        # "offline" to every shard's devices (they find a gone bridge by
        # their liveness timeout instead).
        bye = None if self.mq.shard else (self.presence, b"offline")
        while not self.bridge.stopping:
            conn = None
            try:
                conn = await self._connect(bye)
                backoff.reset()
                await self._session(conn)
            except (OSError, asyncio.TimeoutError) as e:
                # Bad credentials, a refused subscription, an unreachable or
                # vanished broker: a line when the reason changes (Outage),
                # the reason in status, then the backoff.
                why = str(e) or type(e).__name__
                if conn is None and not self.tls and why.startswith(mqtt_conn.LOST):
                    why += NOT_TLS
                self.outage.failed(why)
            finally:
                if conn is not None:
                    # Leaving with the connection up (a stop): say "offline"
                    # ourselves, as a clean DISCONNECT drops the last will.
                    conn.close(goodbye=bye)
            self.connected = False
            self.bridge.state.save()
            await self.bridge.sleep(backoff.next())

    async def _connect(self, bye: tuple[str, bytes] | None) -> Connection:
        """A connection to the broker, ``bye`` its last will; connect() returns
        once the broker accepted the client and the subscriptions."""
        return await mqtt_conn.connect(
            self.host,
            self.port,
            self.mq.client_id,
            self._on_message,
            self.subscriptions(),
            self.mq.username,
            self.mq.password,
            self.tls_context(),
            keepalive=30,
            will=bye,
            on_oversize=self._on_oversize,
        )

    async def _session(self, conn: Connection) -> None:
        """One connection's life: every link attached to it, ticked, its
        floods and the broker's drops watched, "online" said; until it
        closes (raising why, if it failed)."""
        tasks: list[asyncio.Task[Any]] = []
        try:
            self.connected = True
            self.connects += 1
            self.outage.over()
            log.info("mqtt: connected to %s:%d", self.host, self.port)
            self._live = (conn, Backlog(conn), tasks)
            for node, link in list(self.links.items()):
                self._attach(node, link)
            tasks.append(asyncio.create_task(tick_links(self.links, self.bridge.cfg.heartbeat)))
            conn.resume_reading()  # paused by connect() until now
            # devices a reload changed, or mutes that ended, while connecting
            # (after resume_reading: the acknowledgements are read too)
            await self._sync(conn)
            tasks.append(asyncio.create_task(self._watch_floods(conn)))
            self.drops.connected()
            tasks.append(asyncio.create_task(self._watch_broker(conn)))
            # Subscribed and reading: the devices may come (back) now.
            await conn.publish(self.presence, b"online", retain=True)
            why = await conn.closed
            if why is not None:
                raise why
        finally:
            self._up = {}
            self._live = None
            for t in self.transports.values():
                t.close()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch_broker(self, conn: Connection) -> None:
        """Best effort: the broker's dropped-message count (broker_drops.py)."""
        try:
            await conn.subscribe([DROPS_TOPIC])
        except OSError:
            pass  # the connection ended; a refusal is an answer too (no figure)

    def stop_reading(self, pause: bool = True) -> int:
        """The bridge is stopping: drop the frames the links have not taken
        (unacknowledged: their devices send them again; a storm's backlog
        would keep the stop from its turn), returns how many, and read no
        more. List swaps only with ``pause`` false: safe in a signal handler."""
        n = 0
        for t in list(self.transports.values()):
            n += t.drop_pending()
        if pause and self._live is not None:
            self._live[1].stopped = True  # no transport's recv() resumes reading now
            self._live[0].pause_reading()
        return n

    def _on_message(self, topic: str, payload: bytes | bytearray) -> None:
        t = self._up.get(topic)
        if t is not None:  # the hot path: a frame from a known device
            t.deliver(payload)
            return
        if topic == DROPS_TOPIC:
            self.drops.heard(payload)
            return
        parts = topic.split("/")
        if len(parts) != 3:
            return
        node, kind = parts[1], parts[2]
        link = self.links.get(node)
        if link is None:
            if kind != "up":
                return  # presence of a device not linked (yet): its first frame decides
            t = self._arrived(node)
            if t is None:
                self.unknown += 1  # a device without a key never gets in
            else:
                t.deliver(payload)
            return
        if kind == "state":
            online = payload == b"online"
            link.count("presence_online" if online else "presence_offline")
            if not online:
                # The device's last will, or anyone's word on the broker: a
                # sealed session ends only if the device does not answer now.
                link.peer_presence(False)

    def _on_oversize(self, topic: str, length: int) -> None:
        """A message too long for any frame, skipped unread by the connection."""
        t = self._up.get(topic)
        if t is not None:
            t.frames.oversize += 1

    def subscribed(self) -> list[str]:
        """The topics the live connection is subscribed to (none while down)."""
        return sorted(self._live[0].topics - {DROPS_TOPIC}) if self._live else []

    def stats(self) -> dict[str, Any]:
        return {
            "connected": self.connected,
            "connects": self.connects,
            "last_error": self.outage.last,
            "unknown_devices": self.unknown,
            "devices": len(self.links),
            "broker_dropped": self.drops.count,
            "shard": self.mq.shard,
            "subscriptions": len(self._live[0].topics - {DROPS_TOPIC}) if self._live else 0,
            "muted": sorted(self.mutes.until),
        }
