"""sys/config/get and sys/config/set: the device config over the bus.

get: null -> the whole config (key and passwords redacted), "section" -> that part.
set: an object of changes (sections merged one level deep, null removes a key),
validated, then saved atomically. node and key stay unless the config has
"allow_identity_change": true (which itself cannot be set remotely).
"""
import asyncio
from firmware import ConfigError, transient, unload

# Keys whose change takes effect at the next start (sys/reboot).
RESTART = ("uplink", "link", "queues", "services", "watchdog_ms", "board", "node", "key",
           "network")


def _redacted(cfg):
    """cfg with its secrets shown as ***: the link key and the broker's and
    the access point's passwords."""
    out = dict(cfg)
    if out.get("key"):
        out["key"] = "***"
    for sec in ("uplink", "network"):
        s = out.get(sec)
        if type(s) is dict and s.get("password"):
            out[sec] = dict(s, password="***")
    return out


def _serve(ctx, req, fn):
    # Each request on its own: a failure (a MemoryError on a small board's
    # heap) fails that request, counted, and never ends the endpoint's task.
    try:
        fn(ctx, req)
    except Exception as e:
        ctx.count("service_errors")
        try:
            req.fail("config service: %s: %s" % (type(e).__name__, e))
        except Exception:
            pass   # the caller times out; the error is counted


def _get(ctx, req):
    p = req.payload
    cfg = _redacted(ctx.config)
    if p is None:
        req.reply(cfg)
    elif type(p) is str and p in cfg:
        req.reply(cfg[p])
    else:
        req.fail("config/get takes null or a key of the config; no key %r" % (p,))


def _set(ctx, req):
    ch = req.payload
    b = ctx.board
    if type(ch) is dict and ch.get("board", b["name"]) != b["name"] and b.get("manifest"):
        # The device would stop at its next boot on the bundle's board.json.
        return req.fail("invalid config change: this device's bundle is built for board %s "
                        "(its board.json): deploy the bundle for %s to change its board"
                        % (b["name"], ch["board"]))
    cf = transient("firmware.config")
    try:
        new = cf.merge(ctx.config, ch, ctx.config.get("allow_identity_change", False))
        cf.save(ctx.config_path, new)
    except ConfigError as e:
        return req.fail("invalid config change: %s" % e)
    except OSError as e:
        return req.fail("cannot save the config: %s" % e)
    finally:
        cf = None
        unload("firmware.config")
    keys = sorted(ch)
    ctx.config.clear()
    ctx.config.update(new)     # services reading ctx.config see it at once
    req.reply({"saved": True, "changed": keys,
               "restart_needed": [k for k in keys if k in RESTART]})
    ctx.log("config changed: %s" % ", ".join(keys))


async def _loop(ctx, ep, fn):
    async for req in ep:
        _serve(ctx, req, fn)


def start(ctx, opts):
    c = ctx.connect("sys")
    asyncio.create_task(_loop(ctx, c.bind("sys/config/get", queue_len=2), _get))
    asyncio.create_task(_loop(ctx, c.bind("sys/config/set", queue_len=2), _set))
