"""MQTT uplink: the link's frames over MQTT (edgebus.link.mqtt), reaching the
bridge through a broker over WiFi or Ethernet. On boards the network must be
up first (connect WiFi in boot.py); this module only opens the MQTT session.
The bridge's presence (retained <prefix>/_bridge, its last will "offline")
goes to the link: gone ends the session at once instead of after the
liveness timeout, back makes it say HELLO at once."""
from edgebus.link.mqtt import MqttTransport


async def open(ctx):
    u = ctx.config["uplink"]
    host = u.get("host")
    if not host:
        raise OSError("no broker: set uplink.host (and uplink.port, default 1883)")
    port = u.get("port", 1883)
    if type(port) is not int:
        raise OSError("uplink.port must be the broker's TCP port (an int) for mqtt")
    t = MqttTransport(host, port, node=ctx.config["node"], prefix=u.get("prefix", "edgebus"),
                      keepalive=u.get("keepalive", 30), user=u.get("user"),
                      password=u.get("password"))
    await t.open()
    t.on_peer = ctx.link.peer_presence
    return t
