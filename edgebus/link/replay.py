"""The owner's resend: a message the bus once exported, given to the link
again (a bridge's relayed readings from its log after a restart), numbered
and spooled as the observers' are, with the relay fields from its origin.
Imported only by an owner that resends; a device never loads it."""

from .. import compat
from . import rules, tx


def offer(link, msg):
    """Spool ``msg`` (a Message) for the peer under the first export rule
    whose pattern takes its topic, as if the bus had just exported it; False
    when no rule does, or the loop guard or a local-only topic keeps it here.
    Call after Link.start() (the rules are resolved for the peer then)."""
    rule = rules.first(link._exports, msg.topic)
    if rule is None or not tx.exportable(link, msg.topic, rule, msg.origin):
        return False
    tx.spool_item(link, msg, rule, compat.ms())
    link._wake.set()
    return True
