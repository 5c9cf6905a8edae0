"""Topic tokens, literal tokens and the normalisation of topics and patterns.

Three forms of a topic exist:
- the *user* form: a tuple/list of tokens or a ``/``-separated string;
- the *norm* form: a tuple keeping ``literal`` objects (what the authoriser
  and ``feed.topic`` see);
- the *key* form: a tuple of plain tokens, where a pattern's wildcards are the
  sentinels ``ANY`` and ``REST`` (what the tries index).
Sentinels cannot collide with user tokens, so ``literal('+')`` and a published
``'+'`` are plain text while the wildcards stay distinct.
"""

from .compat import type_name

# Wildcards in a key; plain objects, which no user token can equal.
ANY = object()  # single-level
REST = object()  # multi-level (last position only)


class literal:
    """A topic token taken as text even when it spells a wildcard."""

    __slots__ = ("value",)

    def __init__(self, value):
        t = type(value)
        if t is not str and t is not int:
            raise TypeError("literal token must be str or int, not " + type_name(value))
        self.value = value

    def __eq__(self, other):
        return (
            type(other) is literal
            and type(other.value) is type(self.value)
            and other.value == self.value
        )

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(self.value) ^ 0x5A5A

    def __repr__(self):
        return "literal(%r)" % (self.value,)


def _plain(tok):
    t = type(tok)
    if t is str or t is int:
        return tok
    if t is literal:
        return tok.value
    raise TypeError("topic token must be str, int or edgebus.literal, not " + type_name(tok))


def _seq(topic):
    """The token sequence of a user topic, or an error."""
    t = type(topic)
    if t is str:
        # "".split("/") is [""]: test before splitting so "" stays empty.
        topic = topic.split("/") if topic else ()
    elif t is not tuple and t is not list:
        raise TypeError("topic must be a tuple, list or str, not " + type_name(topic))
    if not topic:
        raise ValueError("empty topic")
    return topic


def key(topic):  # mpy: native
    """The concrete key of a published/retained topic (wildcards are text)."""
    if type(topic) is tuple and topic:
        # Fast path: a tuple of plain tokens is its own key (no allocation).
        for tok in topic:
            t = type(tok)
            if t is not str and t is not int:
                break
        else:
            return topic
    return tuple([_plain(tok) for tok in _seq(topic)])


def norm(topic):
    """The validated topic as a tuple, literal tokens kept."""
    seq = _seq(topic)
    for tok in seq:
        _plain(tok)
    return seq if type(seq) is tuple else tuple(seq)


def _is(tok, wild):
    return type(tok) is type(wild) and tok == wild


def pattern(topic, s_wild, m_wild):
    """(norm, key) of a subscription/watch/view pattern."""
    n = norm(topic)
    last = len(n) - 1
    out = []
    same = True
    for i, tok in enumerate(n):
        if _is(tok, s_wild):
            tok = ANY
        elif _is(tok, m_wild):
            if i != last:
                raise ValueError("multi-level wildcard %r must be the last token" % (m_wild,))
            tok = REST
        elif type(tok) is literal:
            tok = tok.value
        else:
            out.append(tok)
            continue
        same = False
        out.append(tok)
    # A plain pattern is its own key: one tuple per feed, not two.
    return n, (n if same else tuple(out))


def concrete(topic, s_wild, m_wild):
    """(norm, key) of a point-to-point topic; raw wildcards are refused."""
    n = norm(topic)
    for tok in n:
        if _is(tok, s_wild) or _is(tok, m_wild):
            raise ValueError(
                "wildcard %r in a concrete topic (wrap it in edgebus.literal)" % (tok,)
            )
    return n, key(n)


def render(k):
    """A key as text, for sorting and messages."""
    return "/".join([str(t) for t in k])


def matches(pkey, k):
    """Does pattern key pkey match concrete key k?"""
    n = len(k)
    for i, p in enumerate(pkey):
        if p is REST:
            return True
        if i >= n or (p is not ANY and (type(p) is not type(k[i]) or p != k[i])):
            return False
    return len(pkey) == n
