"""sys/config/get, sys/config/set and sys/key/set: the device config over the bus.

get: null -> the whole config (key and passwords redacted), "section" -> that part.
set: an object of changes (sections merged one level deep, null removes a key),
validated, then saved atomically. node stays unless the config has
"allow_identity_change": true (which itself cannot be set remotely); key
never changes here: it moves only wrapped, through sys/key/set.
key/set: null -> {"kid"} of the key in use; {"nonce", "wrapped", "check"}
(edgebus.link.keywrap, loaded for the call) -> the new key saved like a
config change, {"kid"} of it. The running session goes on; the next
handshake uses the new key.
"""

import asyncio

from firmware import ConfigError, opt, transient, unload

# Keys whose change takes effect at the next start (sys/reboot).
RESTART = ("uplink", "link", "queues", "services", "watchdog_ms", "board", "node", "key", "network")


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


def _serve(ctx, req, fn, last):
    """True when req is done with. Each request on its own: a failure fails
    that request, counted, and never ends the endpoint's task; a MemoryError
    before the ``last`` try is left to be tried again (False). No default
    argument: a default is a tuple on a board's heap."""
    try:
        fn(ctx, req)
    except Exception as e:
        if not last and type(e) is MemoryError:
            return False
        ctx.count("service_errors")
        try:
            req.fail("config service: %s: %s" % (type(e).__name__, e))
        except Exception:
            pass  # the caller times out; the error is counted
    return True


async def serve(ctx, ep, fn):
    """Answer the requests on endpoint ``ep`` with handler ``fn`` (ctx, req)."""
    async for req in ep:
        # A request that found the heap full is tried again after a moment:
        # on a small board that is often brief (frames in flight, a report
        # being made), and a change loads the validator, which needs a few KB
        # at once. Every handler is safe to run again (a change is saved
        # whole or not at all). One local, no loop iterator: each of the
        # service's three tasks holds this frame on a board's heap.
        n = 0
        while not _serve(ctx, req, fn, n == 2):
            n += 1
            await asyncio.sleep(0.05 * n * n)  # 0.05 s, then 0.2 s


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
        return req.fail(
            "invalid config change: this device's bundle is built for board %s "
            "(its board.json): deploy the bundle for %s to change its board"
            % (b["name"], ch["board"])
        )
    if type(ch) is dict and "key" in ch:
        return req.fail(
            "invalid config change: key moves only wrapped under the key in use "
            "(sys/key/set: edgebus keys rotate)"
        )
    keys = _save(ctx, req, ch, opt(ctx.config, "", "allow_identity_change"))
    if keys is not None:
        req.reply(
            {"saved": True, "changed": keys, "restart_needed": [k for k in keys if k in RESTART]}
        )
        ctx.log("config changed: %s" % ", ".join(keys))


def _save(ctx, req, ch, identity):
    """Apply change ch: merged, validated, saved atomically, live in
    ctx.config; its keys, or None when req failed with the reason."""
    cf = transient("firmware.config")
    try:
        new = cf.merge(ctx.config, ch, identity)
        cf.save(ctx.config_path, new)
    except ConfigError as e:
        return req.fail("invalid config change: %s" % e)
    except OSError as e:
        return req.fail("cannot save the config: %s" % e)
    finally:
        cf = None
        unload("firmware.config")
    ctx.config.clear()
    ctx.config.update(new)  # services reading ctx.config see it at once
    return sorted(ch)


def _key(ctx, req):
    from edgebus.link.handshake import kid  # resident: the uplink's link uses it

    old = ctx.config.get("key")
    if not old:
        return req.fail(
            "this device has no key (its link is unauthenticated); a first key "
            "is written into its config.json (edgebus keys new)"
        )
    if req.payload is None:
        return req.reply({"kid": kid(old.encode())})
    kw = transient("edgebus.link.keywrap")
    try:
        new = kw.unwrap(old.encode(), req.payload)
    except ValueError as e:
        return req.fail("key unchanged: %s" % e)
    finally:
        kw = None
        unload("edgebus.link.keywrap")
    if _save(ctx, req, {"key": new}, True) is not None:
        k = kid(new.encode())
        req.reply({"kid": k})
        ctx.log("key changed: kid %s; the next session uses it" % k)


def start(ctx, opts):
    c = ctx.connect("sys")
    asyncio.create_task(serve(ctx, c.bind("sys/config/get", queue_len=2), _get))
    asyncio.create_task(serve(ctx, c.bind("sys/config/set", queue_len=2), _set))
    asyncio.create_task(serve(ctx, c.bind("sys/key/set", queue_len=2), _key))
