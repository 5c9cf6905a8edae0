"""``bridge/devices/reload``: the bridge reads its configuration and keystore
again and applies its MQTT devices without a restart (SIGHUP asks the same;
`edgebus devices reload`, docs/bridge.md "Running 10,000 devices on one or several
bridges").

New devices get a link (and, in a shard, their subscriptions); removed ones
get a BYE, lose their link and their subscriptions; one whose key or seal
changed gets a new link. A configuration that does not load changes nothing:
the bridge runs on with the one it has, and says why in one line. Other
changes (serial ports, peers, the log, the ACL, the broker) wait for a
restart, which one line says too. Local users reach it through the ACL
(bridge/acl.py): without an [[acl]] entry only root and the bridge's own user.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

import edgebus
from edgebus.bridge import config as bridge_config
from edgebus.bridge import split

if TYPE_CHECKING:
    from edgebus.bridge.config import Config
    from edgebus.bridge.context import BridgeView

log = logging.getLogger("edgebus.bridge")

RELOAD = "bridge/devices/reload"
# Generous: the BYEs of thousands of released devices go out first.
CALL_TIMEOUT = 60.0


class Refused(Exception):
    """A reload that changed nothing; says why."""


def _rest(cfg: Config) -> Config:
    """cfg without what a reload applies (the MQTT devices and the keystore switch)."""
    mq = cfg.mqtt and dataclasses.replace(cfg.mqtt, keys={}, seals={}, keystore=False)
    return dataclasses.replace(cfg, mqtt=mq)


async def reload(bridge: BridgeView) -> dict[str, Any]:
    """Apply the configuration file's MQTT devices (and the keystore's); the
    changes as {"added", "removed", "changed", "devices"}, or Refused."""
    path = bridge.config_path
    try:
        w = bridge.cfg.worker  # a worker reloads its own part (bridge/split.py)
        cfg = (
            split.load(path, w, bridge.cfg.workers if w is not None else None)
            if path
            else bridge.cfg
        )
    except bridge_config.ConfigError as e:
        log.error("reload: %s; running on with the configuration loaded before", e)
        raise Refused("configuration not reloaded: %s" % e) from None
    if bridge.mqtt is None or cfg.mqtt is None:
        why = "an [mqtt] section %s takes a restart" % ("added" if cfg.mqtt else "removed")
        log.error("reload: %s; running on with the configuration loaded before", why)
        raise Refused("configuration not reloaded: %s" % why)
    if _rest(cfg) != _rest(bridge.cfg):
        log.warning(
            "reload: changes outside [mqtt] devices and keystore take effect at the next restart"
        )
    changes = await bridge.mqtt.update(cfg.mqtt)
    changes["devices"] = len(bridge.mqtt.links)
    log.info(
        "reload: %d device(s): %d added, %d removed, %d changed",
        changes["devices"],
        len(changes["added"]),
        len(changes["removed"]),
        len(changes["changed"]),
    )
    return changes


async def serve(bridge: BridgeView) -> None:
    """Serve bridge/devices/reload until cancelled, one reload at a time."""
    async for req in bridge.conn.bind(RELOAD, queue_len=8):
        try:
            req.reply(await reload(bridge))
        except Refused as e:
            req.fail(str(e))
        except Exception as e:  # the keystore's disk, say: the caller hears why
            log.exception("reload failed")
            req.fail("reload failed: %s: %s" % (type(e).__name__, e))


async def on_signal(bridge: BridgeView) -> None:
    """SIGHUP: the same reload, in turn with the calls (its outcome is logged)."""
    try:
        await bridge.conn.call(RELOAD, None, timeout=CALL_TIMEOUT)
    except edgebus.Failed:  # refused or failed: reload() has logged why
        pass
    except edgebus.CallError as e:  # not served yet (starting), or stopping
        log.warning("reload on SIGHUP: %s", e.reason)
