"""Options: a link's settings, the same for many links (docs/api.md). The
defaults are class attributes and an instance holds only what it changes, so
a link reads its settings from one shared object instead of copying each into
fields of its own: the bridge's thousands of device links share a few (a
field fewer per link is a slot fewer in each link's attribute table, which on
a board grows by 480 B past 97). Treat one as read-only once a link has it."""

from .. import topic
from . import wire
from .seal import check as seal_check


class Options:
    """Settings by name, the rest their defaults; ``Options(base, **changes)``:
    ``base``'s with ``changes``. TypeError for an unknown name, ValueError for a
    bad value (seal, max_len).

    ``exports``/``imports``: data rules, lists of (pattern, prefix): exported local topics lose
    ``prefix`` on the wire; imported wire topics gain it; a third item in an export rule is its
    delivery class, "reliable" (publishes' default: spooled until acknowledged) or "latest"
    (sent once). ``export_calls``/``import_calls``: the same for endpoints. ``{node}`` in a rule
    is the peer's node id. ``spool``: bytes for what waits to be sent or acknowledged,
    ``spool_policy`` when full. ``ack``: offer acknowledgements; ``durable``: acknowledge only
    what the owner confirms (Link.acknowledge()). ``journal``: a directory for the flash spool
    (journal.py), of ``journal_bytes`` in blocks of ``journal_block``; None: off. ``priority``:
    the rank of routes learned here (routes.py). ``seal`` (with a key; seal.py): "auto" seals
    (refusing a peer that cannot) and encrypts where both can, "encrypt" always encrypts, "mac"
    never does, "offer" seals where the peer offers it, "off".
    """

    exports = imports = export_calls = import_calls = ()
    local_only = ("link/#", "local/#")  # patterns that never cross
    heartbeat = 5.0  # s of silence before a PING; 3x ends the session
    handshake_timeout = 5.0
    max_pending = 8  # calls in flight per direction
    max_sync = 512  # retained facts in one snapshot in
    out_queue = 32  # each export observer's queue
    status = True  # retain stats() at the link's status topic
    max_len = 1024  # the largest frame body; the transport's limit too
    spool = 2048
    spool_policy = "drop_oldest"
    ack = True
    durable = False
    journal = None
    journal_bytes = 262144
    journal_block = 4096
    priority = 0
    seal = "auto"
    ticks = True  # run() ticks the link; False: its owner calls tick() (thousands of links)
    status_every = 1.0  # s between status publications while only counters change
    claims = True  # False drops a sender's relay claims (src, via: rx.extra_in)
    paced = False  # True refuses a peer without acknowledgements and a window (handshake)
    max_retained = None  # the facts the peer may retain here (rx.room)
    # s between two ACKs while numbers keep coming, unless half the window
    # waits: ACKs are cumulative, and each one wakes the sender (a device).
    ack_gap = 0.5
    NAMES = (
        "exports",
        "imports",
        "export_calls",
        "import_calls",
        "local_only",
        "heartbeat",
        "handshake_timeout",
        "max_pending",
        "max_sync",
        "out_queue",
        "status",
        "max_len",
        "spool",
        "spool_policy",
        "ack",
        "durable",
        "journal",
        "journal_bytes",
        "journal_block",
        "priority",
        "seal",
        "ticks",
        "status_every",
        "claims",
        "paced",
        "max_retained",
        "ack_gap",
    )
    # Derived, once per object: do the export rules name {node}? (tx.observe);
    # local_only parsed for a bus's wildcards (local_patterns()).
    node_rules = False
    _local = None

    def __init__(self, base=None, **settings):
        if base is not None:
            for k in self.NAMES:
                self._set(k, getattr(base, k))
        for k, v in settings.items():
            if k not in self.NAMES:
                raise TypeError("no link option %r (%s)" % (k, ", ".join(self.NAMES)))
            self._set(k, v)
        seal_check(self.seal)
        g = self.ack_gap
        if type(g) not in (int, float) or not 0 <= g <= 1:
            # past half the sender's 2 s tail timeout it would send again
            # what waits for the held ACK (tx.RTO)
            raise ValueError("ack_gap must be a number of seconds from 0 to 1, not %r" % (g,))
        if self.max_len < wire.MIN_LEN:
            raise ValueError(
                "max_len %d leaves no room for the handshake: at least %d"
                % (self.max_len, wire.MIN_LEN)
            )
        for r in self.exports:
            for x in r[:2]:
                if type(x) is str and "{node}" in x:
                    self.node_rules = True

    def _set(self, k, v):
        # A default stays the class's: an instance entry fewer (a board's heap).
        d = getattr(Options, k)
        if v != d or type(v) is not type(d):
            setattr(self, k, v)

    def local_patterns(self, bus):
        """local_only parsed for ``bus``'s wildcards: one list for every link
        of these options on buses alike."""
        w = (bus.s_wild, bus.m_wild)
        if self._local is None or self._local[0] != w:
            self._local = (w, [topic.pattern(p, w[0], w[1])[1] for p in self.local_only])
        return self._local[1]


DEFAULT = Options()  # for a link given none
