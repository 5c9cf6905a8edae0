"""What the core remembers between publishes on CPython: each topic's route
through a PatternTrie (bus.py takes RoutedTrie) and each string topic's key
(topic.key, wrapped once when this module is imported). Never imported on
MicroPython: there this code and what it holds would cost heap that the
64 KB budget has no room for (tests/test_mpy_budget.py), and the tries and
topics work the same without it. bus.py's one import line is all a device
loads of it: each module name and imported name is a string on its heap."""

from . import topic
from .trie import PatternTrie, _visit

# Topics remembered; past them a topic is walked as before (nothing is
# forgotten to make room, which would allocate a route a publish). The
# bridge publishes a few topics for each of thousands of devices. Only a
# topic of at most SHORT characters is remembered: a device that publishes
# ever new topics (hostile, or a bug) makes the bridge hold at most ROUTES
# of them, 13 MB for a subscription and an observer matching them all, and
# slows no publish below a walk (the routes remembered stay, the rest are
# walked as before).
ROUTES = 32768
SHORT = 128
KEYS = 4096  # string topics' keys remembered, after which all are forgotten together
_NONE = ()  # the route of a topic nothing matches: one shared tuple


class RoutedTrie(PatternTrie):
    """A PatternTrie that remembers the entries each concrete topic matched
    (its route) until the next insert or remove: a topic published again
    costs one dict lookup instead of a walk down the trie."""

    def __init__(self) -> None:
        PatternTrie.__init__(self)
        self.routes: dict = {}  # concrete key -> its entries, in the order match() offers

    def insert(self, k, entry):
        PatternTrie.insert(self, k, entry)
        self.routes = {}

    def remove(self, k, entry):
        if not PatternTrie.remove(self, k, entry):
            return False
        # A new dict, not clear(): a route being offered to stays as it was.
        self.routes = {}
        return True

    def match(self, topic, item) -> None:
        """Call ``entry.offer(item)`` for every entry matching ``topic``."""
        if not self.count:
            return
        routes = self.routes
        r: "tuple | None" = routes.get(topic)
        if r is None:
            if len(routes) >= ROUTES or _long(topic):
                _visit(self.root, topic, 0, len(topic), None, item)
                return
            out: list = []
            _visit(self.root, topic, 0, len(topic), out, None)
            r = routes[topic] = tuple(out) if out else _NONE
        for e in r:
            e.offer(item)


def _long(topic):
    """Whether ``topic`` (a key: str and int tokens) is past SHORT characters."""
    n = 0
    for t in topic:
        n += len(t) if type(t) is str else 20
        if n > SHORT:
            return True
    return False


def string_keys(key):
    """``key`` (topic.key) remembering the keys of string topics: a string
    published again is not split and checked again."""
    keys = {}

    def cached(topic):
        """The concrete key of a published/retained topic (wildcards are
        text); a string topic's is remembered."""
        t = type(topic)
        if t is tuple and topic:
            # topic.key's own first test, here too: a tuple topic (every
            # import of a link) then costs one call, not two (596 -> 385 ns)
            for tok in topic:
                t = type(tok)
                if t is not str and t is not int:
                    return key(topic)
            return topic
        if t is not str:
            return key(topic)
        k = keys.get(topic)
        if k is None:
            k = key(topic)
            if len(keys) >= KEYS:
                keys.clear()
            keys[topic] = k
        return k

    return cached


topic.key = string_keys(topic.key)  # every caller of topic.key gets it from now on
