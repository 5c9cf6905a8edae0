"""Which gateway the uplink uses, and when it moves (docs/protocol.md,
"Failover"). Pure bookkeeping: the caller passes the clock and the link's
frames_in counter, so the rules run the same on a board, on the unix port and
in a test.

A gateway is the uplink's own keys overlaid with one entry of
``uplink.gateways`` (the first is the primary). Silence is no frame from the
peer for ``failover_after`` heartbeat periods, counted from the last frame
or from the move to this gateway, whether the transport is open or failing to
open; silence moves to the next gateway in the list (after the last, the
first). With ``failback``, a device away from the primary probes it every
``probe_every`` seconds and goes back when the probe finds it alive.
"""

from firmware import opt


def gateways(u):
    """The list of gateway configs for the uplink config u: u itself when it
    names no gateways, else u's keys overlaid with each entry."""
    gws = u.get("gateways")
    if not gws:
        return [u]
    out = []
    for g in gws:
        d = {}
        for k, v in u.items():
            if k != "gateways":
                d[k] = v
        for k, v in g.items():
            d[k] = v
        out.append(d)
    return out


def name(gw, i):
    """What the status calls gateway gw (index i): its "name", else host:port,
    else port, else its index."""
    n = gw.get("name")
    if n is not None:
        return n
    if gw.get("host") is not None:
        return "%s:%s" % (gw["host"], opt(gw, "mqtt", "port"))
    if gw.get("port") is not None:
        return str(gw["port"])
    return str(i)


class Failover:
    """The current gateway (index ``i``) and the silence and failback clocks.

    ``silence``: seconds without a frame that make the gateway silent.
    ``failback``: go back to gateway 0 when a probe finds it alive, probing
    every ``probe_every`` seconds while on another one."""

    def __init__(self, gws, silence, failback=True, probe_every=30.0, t=0.0):
        self.gws = gws
        self.names = [name(g, i) for i, g in enumerate(gws)]
        self.i = 0
        self.silence = silence
        self.failback = failback
        self.probe_every = probe_every
        self.moves = 0  # every change of gateway
        self.failbacks = 0  # those back to the primary after a probe
        self.probes = 0
        self.probe_failures = 0
        self.last_move = None  # "from -> to: why"
        self._frames = None
        self._t_heard = t
        self._t_probe = t

    def gateway(self):
        return self.gws[self.i]

    def heard(self, frames, t):
        """The link's frames_in counter now: a change is a frame heard."""
        if frames != self._frames:
            self._frames = frames
            self._t_heard = t

    def silent(self, t):
        """Is the current gateway silent (and is there another to move to)?"""
        return len(self.gws) > 1 and t - self._t_heard >= self.silence

    def probe_due(self, t):
        """Should the primary be probed now (failback on, away from it)?"""
        if not self.failback or self.i == 0 or t - self._t_probe < self.probe_every:
            return False
        self._t_probe = t
        self.probes += 1
        return True

    def probed(self, alive):
        """The probe's answer: True when the device should go back now."""
        if not alive:
            self.probe_failures += 1
        return bool(alive) and self.i != 0

    def move(self, t, to=None, why="silent"):
        """Move to gateway ``to`` (default: the next one); the new gateway
        gets a whole silence period and the probe clock starts again."""
        j = (self.i + 1) % len(self.gws) if to is None else to
        if j == self.i:
            return self.gws[j]
        self.last_move = "%s -> %s: %s" % (self.names[self.i], self.names[j], why)
        if j == 0 and why == "failback":
            self.failbacks += 1
        self.i = j
        self.moves += 1
        self._t_heard = t
        self._t_probe = t
        return self.gws[j]

    async def check(self, t, up, tr):
        """While transport tr of Uplink up is open: why to move now,
        "silent" (to the next gateway) or "failback" (a probe found the
        primary alive), or None to stay."""
        if self.silent(t):
            return "silent"
        if self.probe_due(t):
            probe = getattr(up.mod, "probe", None)
            alive = True  # no probe: go back and see (silence brings it here again)
            if probe is not None:
                try:
                    alive = await probe(up.ctx, self.gws[0], max(2.0, up.link.opts.heartbeat))
                except Exception as e:
                    up.ctx.log("uplink: probe: %s: %s" % (type(e).__name__, e))
                    alive = False
            if self.probed(alive) and not getattr(tr, "closed", False):
                return "failback"
        return None

    def stats(self):
        return {
            "gateway": self.names[self.i],
            "gateway_index": self.i,
            "moves": self.moves,
            "failbacks": self.failbacks,
            "probes": self.probes,
            "probe_failures": self.probe_failures,
            "last_move": self.last_move,
        }


# What one entry of uplink.gateways may set: where the transport goes, and a name.
GATEWAY = (
    "name",
    "host",
    "port",
    "prefix",
    "user",
    "password",
    "keepalive",
    "baud",
    "tx",
    "rx",
    "poll_ms",
)


def check_config(u, check, schema):
    """Raise ConfigError unless the uplink config u's failover keys are
    usable; check(d, schema, where) is the config validator's type check and
    schema its uplink section (firmware/config.py calls this only for a
    config naming gateways or failover keys)."""
    from firmware import ConfigError

    gws = u.get("gateways") or [{}]
    if len(gws) > 8:
        raise ConfigError("uplink.gateways holds at most 8 gateways, not %d" % len(gws))
    for i, g in enumerate(gws):
        where = "uplink.gateways[%d]." % i
        if type(g) is not dict:
            raise ConfigError(
                "uplink.gateways entries must be objects (a gateway's host, port, ...)"
            )
        for k in g:
            if k not in GATEWAY:
                raise ConfigError("unknown key %s%s (known: %s)" % (where, k, ", ".join(GATEWAY)))
        sub = dict((k, schema[k]) for k in g if k != "name")
        sub["name"] = "s"
        check(g, sub, where)
        if u["kind"] == "mqtt" and not g.get("host", u.get("host")):
            raise ConfigError(
                "uplink.host is required for an mqtt uplink (the broker's "
                "address), in uplink or in each of uplink.gateways"
            )
    fa = opt(u, "uplink", "failover_after")
    if not 1 <= fa <= 100:
        raise ConfigError(
            "uplink.failover_after (heartbeat periods) must be between 1 and 100, not %s" % fa
        )
    if not 1 <= opt(u, "uplink", "probe_every") <= 86400:
        raise ConfigError("uplink.probe_every (seconds) must be between 1 and 86400")
