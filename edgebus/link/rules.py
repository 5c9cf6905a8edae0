"""The link's topic rules: ``{node}`` substitution, matching, mapping in."""

from .. import topic
from . import wire


def subst(x, node):
    """``x`` with '{node}' replaced by ``node`` (non-strings as they are)."""
    return x.replace("{node}", node) if node is not None and type(x) is str else x


CLASSES = (None, "reliable", "latest")


def resolve(rules, bus, node):
    """[(pattern key, prefix key, class)] of (pattern, prefix[, class])
    rules for peer ``node``; class is a delivery class (exports) or None."""
    out = []
    for r in rules:
        pat = subst(r[0], node)
        prefix = subst(r[1], node)
        c = r[2] if len(r) > 2 else None
        if c not in CLASSES:
            raise ValueError("delivery class %r: must be 'reliable' or 'latest'" % (c,))
        pk = topic.pattern(pat, bus.s_wild, bus.m_wild)[1]
        out.append((pk, topic.key(prefix) if prefix else (), c))
    return out


def first(rules, k):
    """The first rule whose pattern matches key ``k``, or None."""
    for r in rules:
        if topic.matches(r[0], k):
            return r
    return None


def local(link, k):
    """True if ``k`` never leaves this bus (the link's local_only patterns)."""
    for lp in link._local_only:
        if topic.matches(lp, k):
            return True
    return False


def wild(bus, k):
    """True if a wire key names a wildcard token: a peer's topic is concrete."""
    for t in k:
        if (t == bus.s_wild or t == bus.m_wild) and type(t) is str:
            return True
    return False


def map_in(link, wt, rules):
    """The local key for wire topic ``wt`` under its first rule, or None (refused)."""
    k = wire.topic_in(wt)
    if wild(link.bus, k):
        link.count("refused")
        return None
    r = first(rules, k)
    if r is None:
        link.count("refused")
        link.last_error = "refused topic %s" % topic.render(k)
        return None
    return r[1] + k
