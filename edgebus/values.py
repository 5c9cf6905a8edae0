"""The immutable values the bus delivers: Origin, Message, RetainedEvent."""

from collections import namedtuple

from .compat import MICROPYTHON

# namedtuples are immutable and compact on both runtimes: assigning a field
# raises AttributeError, and a Message costs one small tuple per publish.
Origin = namedtuple(
    "Origin",
    ("kind", "conn_id", "principal", "link_id", "peer_node", "peer_sid", "generation", "extra"),
)
Message = namedtuple("Message", ("topic", "payload", "origin"))
RetainedEvent = namedtuple("RetainedEvent", ("op", "topic", "payload", "origin"))

# CPython builds a namedtuple through a Python-level __new__; tuple.__new__ on
# the fields makes the same Message in half the time (a publish's largest
# cost after the matching). MicroPython's is C already and has no
# tuple.__new__: None there, and the caller uses Message(...).
new = None if MICROPYTHON else tuple.__new__

# Fields an origin_factory may supply; everything else is the bus's.
TRUSTED = ("kind", "link_id", "peer_node", "peer_sid", "generation")


def _read_only(*args, **kw):
    raise TypeError("origin.extra is read-only")


class FrozenDict(dict):
    """A dict whose contents cannot change after construction (origin.extra).

    A dict subclass so that it compares, prints and JSON-encodes as a dict.
    """

    __setitem__ = _read_only
    __delitem__ = _read_only
    update = _read_only
    pop = _read_only
    popitem = _read_only
    clear = _read_only
    setdefault = _read_only
    __ior__ = _read_only

    def __hash__(self):
        raise TypeError("unhashable type: 'FrozenDict'")
