"""The telemetry log's records: a host-bus message as one record
(tlog.record_from_message), a reading relayed by a trusted [[peer]] logged
under its device's identity, another peer's under the peer's (relay.vouch)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from edgebus.bridge.links.relay import trust, vouch
from edgebus.tlog import record_from_message

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
        v = vouch(rec, self.relays)
        if v is not None:
            if v:
                self.vouched += 1
            else:
                self.unvouched += 1
        return rec
