"""The options of the bridge's links (edgebus.link.options): what the links of
one kind share, and for device links one object per distinct setting, so a
fleet's thousands of MQTT links read theirs from a few objects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from edgebus.link.options import Options

if TYPE_CHECKING:
    from edgebus.bridge.config import Config

# Seconds between an MQTT device link's status publications while only its
# counters move: building and retaining it costs ~27 us, 14 % of a core at
# 5,000 devices. A change of state still goes out at once.
STATUS_EVERY = 10.0


def device_rules(
    relay_calls: Iterable[str] = (), node_placeholder: str = "{node}"
) -> dict[str, list[tuple[str, str]]]:
    """The host side of a device link: everything from the device under
    dev/<node>/, commands and calls back under the same prefix; and the
    host-bus endpoints matching ``relay_calls`` offered as they are named
    here (another device's, relayed: docs/protocol.md, Relay)."""
    p = "dev/" + node_placeholder
    return {
        "imports": [("#", p)],
        "import_calls": [("#", p)],
        "exports": [(p + "/cmd/#", p)],
        "export_calls": [(c, "") for c in relay_calls],
    }


class LinkOptions:
    """The bridge's link options from its configuration; ``durable``: with a
    log, links acknowledge only what the log made durable."""

    def __init__(self, cfg: Config, durable: bool) -> None:
        self.cfg = cfg
        self.durable = durable
        self._devices: dict[tuple[str, str, bool], Options] = {}

    def make(self, kind: str, paced: bool | None = None, **settings: Any) -> Options:
        """New options for a link of ``kind`` ("device", "peer" or "local"),
        with ``settings``. Only a [[peer]] link keeps a sender's relay claims
        (src, src_sid, src_seq, via): a device or a local client claiming them
        would have its readings relayed under another device's identity.
        Device and peer links refuse a peer that cannot be paced (``paced``:
        the entry's word, None: [bridge] paced); a device's retained facts are
        under [quota]."""
        o: dict[str, Any] = {
            "heartbeat": self.cfg.heartbeat,
            "durable": self.durable,
            "claims": kind == "peer",
        }
        if kind != "local":
            o["paced"] = self.cfg.paced_for(paced)
        if kind == "device":
            o["max_retained"] = self.cfg.quota_retained
        o.update(settings)
        return Options(**o)

    def device(self, transport: str, seal: str | None, paced: bool | None) -> Options:
        """A device link's over ``transport`` ("serial" or "mqtt"), its entry's
        ``seal`` and ``paced`` (None: [bridge]'s); the same object for the same
        words. An MQTT one is ticked with the others from one task, and
        retains its status every STATUS_EVERY s."""
        k = (transport, self.cfg.seal_for(transport, seal), self.cfg.paced_for(paced))
        o = self._devices.get(k)
        if o is None:
            more: dict[str, Any] = device_rules(self.cfg.relay_calls)
            if transport == "mqtt":
                more.update(ticks=False, status_every=STATUS_EVERY)
            o = self._devices[k] = self.make("device", k[2], seal=k[1], **more)
        return o
