"""Presence notices (futebus's open/close to a channel's master): an
endpoint's owner subscribes to ``local/presence/<endpoint topic>`` and is
told when a peer that can reach the endpoint comes ("open": a link offered
it to its peer) and goes ("close": the route withdrawn or the session over).
``local/`` never crosses a link, so the notices stay on the owner's bus."""

from .. import errors

PREFIX = ("local", "presence")


def init(link):
    """No endpoints offered yet (Link.__init__)."""
    link._offered = None


def offered(link, keys):
    """The link now offers its peer the endpoints ``keys`` (local keys)."""
    old = link._offered or ()
    opened = [k for k in keys if k not in old]
    closed = [k for k in old if k not in keys]
    link._offered = keys or None
    if not (opened or closed) or link._conn.is_disconnected():
        return
    # Its own principal, not the peer's: what a peer publishes itself is
    # authorised as the peer, and it must not be able to forge a notice.
    c = link._conn.derive(
        principal=("link", link.link_id),
        origin_factory={
            "kind": "link",
            "link_id": link.link_id,
            "peer_node": link.peer_node,
            "peer_sid": link.peer_sid,
        },
    )
    try:
        for ev, ks in (("close", closed), ("open", opened)):
            for k in ks:
                c.publish(PREFIX + k, {"event": ev, "peer": link.peer_node, "link": link.link_id})
    except (errors.BusError, MemoryError):
        # An authoriser that refuses, a full heap: the notices are advice,
        # the session (and its end) must go on without them.
        link.count("presence_lost")
    finally:
        c.disconnect()
