"""sys/config/get and sys/config/set: the device config over the bus.

get: null -> the whole config (key redacted), "section" -> that part.
set: an object of changes (sections merged one level deep, null removes a key),
validated, then saved atomically. node and key stay unless the config has
"allow_identity_change": true (which itself cannot be set remotely).
"""
import asyncio
from firmware import ConfigError, transient, unload

# Keys whose change takes effect at the next start (sys/reboot).
RESTART = ("uplink", "link", "queues", "services", "watchdog_ms", "board", "node", "key")


def _redacted(cfg):
    out = dict(cfg)
    if out.get("key"):
        out["key"] = "***"
    return out


async def _get(ctx, ep):
    async for req in ep:
        p = req.payload
        cfg = _redacted(ctx.config)
        if p is None:
            req.reply(cfg)
        elif type(p) is str and p in cfg:
            req.reply(cfg[p])
        else:
            req.fail("config/get takes null or a key of the config; no key %r" % (p,))


async def _set(ctx, ep):
    async for req in ep:
        ch = req.payload
        cf = transient("firmware.config")
        try:
            new = cf.merge(ctx.config, ch, ctx.config.get("allow_identity_change", False))
            cf.save(ctx.config_path, new)
        except ConfigError as e:
            req.fail("invalid config change: %s" % e)
            continue
        except OSError as e:
            req.fail("cannot save the config: %s" % e)
            continue
        finally:
            cf = None
            unload("firmware.config")
        keys = sorted(ch)
        ctx.config.clear()
        ctx.config.update(new)     # services reading ctx.config see it at once
        req.reply({"saved": True, "changed": keys,
                   "restart_needed": [k for k in keys if k in RESTART]})
        ctx.log("config changed: %s" % ", ".join(keys))


def start(ctx, opts):
    c = ctx.connect("config")
    asyncio.create_task(_get(ctx, c.bind("sys/config/get", queue_len=2)))
    asyncio.create_task(_set(ctx, c.bind("sys/config/set", queue_len=2)))
