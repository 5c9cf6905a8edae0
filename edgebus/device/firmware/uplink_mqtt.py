"""MQTT uplink: the link's frames over MQTT (edgebus.link.mqtt), reaching the
bridge through a broker over WiFi or Ethernet. On boards the network must be
up first (connect WiFi in boot.py); this module only opens the MQTT session.
The bridge's presence (retained <prefix>/_bridge, its last will "offline")
goes to the link: gone ends the session at once instead of after the
liveness timeout, back makes it say HELLO at once. probe() asks a gateway's
broker for that presence without a session, for failback (firmware/failover.py)."""

from edgebus.compat import MICROPYTHON, wait_for
from edgebus.link.mqtt import MqttTransport
from firmware import opt


def der(path):
    """The DER bytes of a PEM or DER certificate or key file: MicroPython's
    mbedTLS takes PEM only where the build has PEM parsing (the unix port
    from PyPI has not), DER everywhere. A PEM file's first block is taken."""
    import builtins  # this module's open() is the uplink's

    try:
        with builtins.open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise OSError("uplink.tls: cannot read %s: %s" % (path, e))
    i = data.find(b"-----BEGIN")
    if i < 0:
        return data
    from binascii import a2b_base64

    body = data[data.index(b"\n", i) + 1 : data.index(b"-----END", i)]
    return a2b_base64(body.replace(b"\n", b"").replace(b"\r", b""))


def tls(u):
    """(SSLContext, server name) for uplink config u's "tls", or (None, None).
    The broker's certificate must chain to tls.ca (a boards has no CA store;
    CPython falls back to the system's) and carry server_name (default: the
    host); tls.cert and tls.key: the device's own, for brokers that ask."""
    t = u.get("tls")
    if not t:
        return None, None
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.verify_mode = ssl.CERT_REQUIRED  # MicroPython's default is CERT_NONE
    if t.get("ca"):
        ctx.load_verify_locations(cadata=der(t["ca"]))
    elif MICROPYTHON:
        raise OSError("uplink.tls.ca is required: a device has no CA store")
    else:
        ctx.load_default_certs()
    if t.get("cert"):
        if MICROPYTHON:
            ctx.load_cert_chain(der(t["cert"]), der(t["key"]))
        else:
            ctx.load_cert_chain(t["cert"], t["key"])
    return ctx, t.get("server_name")


def _transport(ctx, u, client_id=None, presence=True):
    host = u.get("host")
    if not host:
        raise OSError("no broker: set uplink.host (and uplink.port, default 1883)")
    port = opt(u, "mqtt", "port")
    if type(port) is not int:
        raise OSError("uplink.port must be the broker's TCP port (an int) for mqtt")
    sslctx, name = tls(u)
    return MqttTransport(
        host,
        port,
        node=ctx.config["node"],
        prefix=opt(u, "mqtt", "prefix"),
        client_id=client_id,
        keepalive=opt(u, "mqtt", "keepalive"),
        user=u.get("user"),
        password=u.get("password"),
        presence=presence,
        connect_timeout=opt(u, "mqtt", "connect_timeout"),
        ssl=sslctx,
        server_hostname=name,
    )


async def open(ctx, u=None):
    """The link's transport through the broker of gateway config u (default:
    the uplink config itself)."""
    t = _transport(ctx, ctx.config["uplink"] if u is None else u)
    await t.open()
    t.on_peer = ctx.link.peer_presence
    return t


async def probe(ctx, u, timeout):
    """True when the broker of gateway u answers within timeout s and holds
    its bridge's presence as "online". A connection of its own (client id
    edgebus-<node>-probe, without presence: no will, nothing retained left on
    the broker), so the link's session elsewhere goes on meanwhile."""
    t = _transport(ctx, u, "edgebus-%s-probe" % ctx.config["node"], False)
    seen = []

    def on_peer(online):
        seen.append(online)
        t.close()  # the answer is in: recv() returns

    try:
        await wait_for(t.open(), timeout)
        t.on_peer = on_peer
        await wait_for(t.recv(), timeout)
    except Exception:  # refused, unreachable or no answer: not alive
        pass
    finally:  # also when the probe is cancelled (the uplink moved on)
        t.close()
        if t.w is not None:  # cut before the CONNACK, the transport is not open yet
            try:
                t.w.close()
            except OSError:
                pass
    return seen == [True]
