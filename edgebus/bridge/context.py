"""What the bridge's parts see of the bridge: the daemon (daemon.Bridge)
passes itself to the modules that serve it (links, peers, MQTT, the mailbox,
status, metrics, reload, rotation, ...), and they depend on this narrow view
instead of on the daemon, so the imports point one way: the daemon imports
the parts, the parts never import the daemon. daemon.Bridge satisfies these
protocols structurally (mypy checks each call)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Iterable, Protocol

if TYPE_CHECKING:
    from edgebus.bridge.acl import Authoriser
    from edgebus.bridge.config import Config, Mqtt
    from edgebus.bridge.keystore import KeyStore
    from edgebus.bridge.links.options import LinkOptions
    from edgebus.bridge.links.statefile import StateFile
    from edgebus.bus import Bus
    from edgebus.conn import Connection
    from edgebus.link.link import Link


class MailboxView(Protocol):
    """The mailbox (mailbox.py) as status and metrics read it."""

    def sleep_of(self, node: str | None) -> dict[str, Any] | None: ...


class MqttView(Protocol):
    """The MQTT links (links/mqtt.py) as reload and key rotation use them."""

    @property
    def links(self) -> dict[str, Link]: ...

    async def update(self, mq: Mqtt) -> dict[str, Any]: ...


class BridgeView(Protocol):
    """The bridge as its parts use it (read-only attributes: a part changes
    what they hold, never which object they are)."""

    @property
    def cfg(self) -> Config: ...
    @property
    def config_path(self) -> str | None: ...
    @property
    def auth(self) -> Authoriser: ...
    @property
    def bus(self) -> Bus: ...
    @property
    def conn(self) -> Connection: ...
    @property
    def state(self) -> StateFile: ...
    @property
    def keystore(self) -> KeyStore: ...
    @property
    def links(self) -> dict[str, Link]: ...
    @property
    def transports(self) -> dict[str, Any]: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def tasks(self) -> list[asyncio.Task[Any]]: ...
    @property
    def mailbox(self) -> MailboxView: ...
    @property
    def mqtt(self) -> MqttView | None: ...
    @property
    def link_options(self) -> LinkOptions: ...

    def add_link(self, link: Link, kind: str = "device") -> None: ...

    def remove_link(self, link_id: str) -> None: ...

    def read_patterns(self, uid: int) -> list[str]: ...

    async def sleep(self, seconds: float) -> None: ...

    def stats(self, links: Iterable[str] | None = None, fleet: bool = True) -> dict[str, Any]: ...
