"""Trie topic indexes.

``PatternTrie`` stores wildcard patterns (subscriptions, retained watches,
retained views) and is queried with concrete topics. ``KeyTrie`` stores
concrete keys (the retained store) and is queried with patterns.

A node is a plain dict keyed by token. Bookkeeping lives under sentinel keys
in the same dict, which no token can equal, so a node costs one dict.
"""

from .topic import ANY, REST

_HERE = object()  # PatternTrie: entries whose pattern ends at this node
_REST = object()  # PatternTrie: entries whose pattern ends in '#' here
_VAL = object()  # KeyTrie: the value stored at this node


def _walk(root, k, create, path=None):
    """The node reached from root along k (None if absent and not created);
    appends the (node, token) pairs passed to ``path`` when one is given."""
    node = root
    for tok in k:
        if tok is REST:
            break
        child = node.get(tok)
        if child is None:
            if not create:
                return None
            child = node[tok] = {}
        if path is not None:
            path.append((node, tok))
        node = child
    return node


def _prune(node, path):
    while path and not node:
        parent, tok = path.pop()
        del parent[tok]
        node = parent


class PatternTrie:
    """Patterns with ``ANY``/``REST`` -> entries; ``match`` offers an item to every
    entry whose pattern matches a concrete topic.

    A slot holds its entry directly, or a list once a second entry shares the
    pattern: most patterns have one entry, and a list per pattern would cost
    heap on MicroPython."""

    def __init__(self) -> None:
        self.root: dict = {}
        self.count: int = 0

    def insert(self, k, entry):
        node = _walk(self.root, k, True)
        slot = _REST if k and k[-1] is REST else _HERE
        cur = node.get(slot)
        if cur is None:
            node[slot] = entry
        elif type(cur) is list:
            cur.append(entry)
        else:
            node[slot] = [cur, entry]
        self.count += 1

    def remove(self, k, entry):
        path = []
        node = _walk(self.root, k, False, path)
        if node is None:
            return False
        slot = _REST if k and k[-1] is REST else _HERE
        cur = node.get(slot)
        if cur is entry:
            del node[slot]
        elif type(cur) is list and entry in cur:
            # A new list, not cur.remove(): match() may be iterating cur now
            # (a feed closing itself on overflow) and must not skip an entry.
            cur = list(cur)
            cur.remove(entry)
            node[slot] = cur[0] if len(cur) == 1 else cur
        else:
            return False
        _prune(node, path)
        self.count -= 1
        return True

    def match(self, topic, item) -> None:
        """Call ``entry.offer(item)`` for every entry matching ``topic``."""
        if self.count:
            _visit(self.root, topic, 0, len(topic), None, item)


def _found(slot, out, item):  # mpy: native
    """A slot's entries: offered ``item``, or into list ``out`` if given."""
    if out is not None:
        if type(slot) is list:
            out.extend(slot)
        else:
            out.append(slot)
    elif type(slot) is list:
        for e in slot:
            e.offer(item)
    else:
        slot.offer(item)


def _visit(node, topic, i, n, out, item):  # mpy: native
    """The entries matching ``topic`` from ``node`` down, each given to
    _found(). Walks the exact path in a loop and recurses only into '+'
    branches; no temporary lists, so a publish allocates nothing here."""
    while True:
        slot = node.get(_REST)
        if slot is not None:  # 'a/#' matches 'a' and everything below
            _found(slot, out, item)
        if i == n:
            slot = node.get(_HERE)
            if slot is not None:
                _found(slot, out, item)
            return
        child = node.get(ANY)
        if child is not None:
            _visit(child, topic, i + 1, n, out, item)
        node = node.get(topic[i])
        if node is None:
            return
        i += 1


class KeyTrie:
    """Concrete keys -> values; ``query`` finds the values matching a pattern."""

    def __init__(self) -> None:
        self.root: dict = {}
        self.count: int = 0

    def get(self, k):
        node = _walk(self.root, k, False)
        return None if node is None else node.get(_VAL)

    def set(self, k, value):
        node = _walk(self.root, k, True)
        if _VAL not in node:
            self.count += 1
        node[_VAL] = value

    def pop(self, k):
        path = []
        node = _walk(self.root, k, False, path)
        if node is None or _VAL not in node:
            return None
        value = node.pop(_VAL)
        _prune(node, path)
        self.count -= 1
        return value

    def query(self, k, out):
        """Append to ``out`` every value whose key matches pattern ``k``."""
        if self.count:
            _query(self.root, k, 0, out)
        return out


def _query(node, k, i, out):
    if i == len(k):
        v = node.get(_VAL)
        if v is not None:
            out.append(v)
        return
    tok = k[i]
    if tok is REST:
        _all(node, out)
    elif tok is ANY:
        for t in node:
            if t is not _VAL:
                _query(node[t], k, i + 1, out)
    else:
        child = node.get(tok)
        if child is not None:
            _query(child, k, i + 1, out)


def _all(node, out):
    for t in node:
        if t is _VAL:
            out.append(node[t])
        else:
            _all(node[t], out)
