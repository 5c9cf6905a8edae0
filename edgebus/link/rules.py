"""The link's topic rules: ``{node}`` substitution, matching, mapping in."""
from .. import topic
from . import wire


def subst(x, node):
    """``x`` with '{node}' replaced by ``node`` (non-strings as they are)."""
    return x.replace("{node}", node) if node is not None and type(x) is str else x


def resolve(rules, bus, node):
    """[(pattern key, prefix key)] of (pattern, prefix) rules for peer ``node``."""
    out = []
    for pat, prefix in rules:
        pat = subst(pat, node)
        prefix = subst(prefix, node)
        pk = topic.pattern(pat, bus.s_wild, bus.m_wild)[1]
        out.append((pk, topic.key(prefix) if prefix else ()))
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
