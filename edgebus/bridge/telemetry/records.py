"""The telemetry log's records: a host-bus message as one record
(tlog.record_from_message), a reading relayed by a trusted [[peer]] logged
under its device's identity, another peer's under the peer's (relay.vouch),
and a local socket client's (the shell) as a host client's, not a device's."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from edgebus.bridge.links.relay import trust, vouch
from edgebus.tlog import record_from_message

# The link ids of the local socket's link clients (links/local.py).
LOCAL_CLIENT = "local:"

if TYPE_CHECKING:
    from edgebus import Message
    from edgebus.bridge.config import Peer


class Records:
    """Makes records (in the log's worker thread), counting the relayed
    ones vouched for and not."""

    def __init__(self, peers: list[Peer]) -> None:
        # [[peer]] links whose relayed readings may carry their device's identity
        self.relays = trust(peers)
        self.vouched = 0  # relayed records logged under their device's identity
        self.unvouched = 0  # ... under their peer's: the claim not trusted (relay.vouch)

    def record(self, m: Message) -> dict[str, Any]:
        """``m`` as a record; raises TypeError or ValueError for a payload
        the log cannot hold."""
        rec = record_from_message(m, ts_host=time.time())
        if (rec["link_id"] or "").startswith(LOCAL_CLIENT):
            return host_client(rec)
        v = vouch(rec, self.relays)
        if v is not None:
            if v:
                self.vouched += 1
            else:
                self.unvouched += 1
        return rec


def host_client(rec: dict[str, Any]) -> dict[str, Any]:
    """A local socket client's record as the text mode's are: origin_kind
    "socket", no device identity. Its node and boot are whatever the client
    named itself (the shell says "cli"): logged as a device's, they would
    make the shell a device in the audit. The name it gave stays in extra's
    ``client``."""
    x = dict(rec["extra"] or {})
    if rec["peer_node"] is not None:
        x["client"] = rec["peer_node"]
    rec.update(origin_kind="socket", extra=x or None)
    rec.update(dict.fromkeys(("peer_node", "peer_sid", "seq", "generation")))
    return rec
