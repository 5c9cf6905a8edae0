"""Property tests: the tries agree with a brute-force matcher (CPython, Hypothesis)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import edgebus
from edgebus.memo_cpython import RoutedTrie
from edgebus.topic import ANY, REST, key, pattern
from edgebus.trie import KeyTrie, PatternTrie

# A small alphabet so that random patterns and topics collide often; includes
# int tokens that render like str ones, and the wildcard characters as text.
TOKENS = st.sampled_from(["a", "b", "", "3", 3, 0, "+", "#"])
PAT_TOKENS = st.one_of(
    TOKENS, st.sampled_from([ANY]), st.sampled_from(["+", "#"]).map(edgebus.literal)
)


def _same(a, b):
    return type(a) is type(b) and a == b


def brute_match(pat, topic):
    """Does key-form pattern pat match concrete topic? (reference definition)"""
    for i, p in enumerate(pat):
        if p is REST:
            return True  # '#' matches the rest, zero levels included
        if i >= len(topic):
            return False
        if p is not ANY and not _same(p, topic[i]):
            return False
    return len(pat) == len(topic)


@st.composite
def patterns(draw):
    toks = draw(st.lists(PAT_TOKENS, min_size=0, max_size=4))
    if draw(st.booleans()):
        toks.append(REST)
    if not toks:
        toks = [REST]
    # literal objects become their text in the key form
    return tuple(t.value if isinstance(t, edgebus.literal) else t for t in toks)


topics = st.lists(TOKENS, min_size=1, max_size=5).map(tuple)


class Rec:
    def __init__(self, i):
        self.i = i
        self.got = []

    def offer(self, item):
        self.got.append(item)
        return True


@pytest.mark.slow
def _agrees(trie, pats, recs, removed, tops):
    for t in tops:
        for r in recs:
            r.got.clear()
        trie.match(t, t)
        for p, r in zip(pats, recs):
            want = 0 if r.i in removed else int(brute_match(p, t))
            assert len(r.got) == want, (p, t)


# RoutedTrie (CPython's) remembers each topic's route: matching before and after
# the removals checks that a change forgets what it made wrong.
@pytest.mark.parametrize("trie_class", [PatternTrie, RoutedTrie])
@settings(max_examples=300, deadline=None)
@given(
    st.lists(patterns(), min_size=1, max_size=12),
    st.lists(topics, min_size=1, max_size=8),
    st.data(),
)
def test_pattern_trie_matches_brute_force(trie_class, pats, tops, data):
    trie = trie_class()
    recs = [Rec(i) for i in range(len(pats))]
    for p, r in zip(pats, recs):
        trie.insert(p, r)
    _agrees(trie, pats, recs, set(), tops)
    # remove a random subset again: removal must prune without disturbing others
    removed = set(data.draw(st.lists(st.integers(0, len(pats) - 1), max_size=4)))
    for i in removed:
        assert trie.remove(pats[i], recs[i])
    _agrees(trie, pats, recs, removed, tops)
    for i in removed:  # and back: an insert forgets the routes too
        trie.insert(pats[i], recs[i])
    _agrees(trie, pats, recs, set(), tops)
    removed = set()
    for i in set(range(len(pats))) - removed:
        trie.remove(pats[i], recs[i])
    assert trie.root == {} and trie.count == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(topics, min_size=1, max_size=12), patterns(), st.data())
def test_key_trie_query_matches_brute_force(keys, pat, data):
    store = KeyTrie()
    for i, k in enumerate(keys):
        store.set(k, (k, i))
    gone = data.draw(st.lists(st.sampled_from(keys), max_size=3))
    for k in gone:
        store.pop(k)
    live = {k for k in keys if k not in gone}
    got = sorted(store.query(pat, []), key=repr)
    want = sorted(
        ((k, max(i for i, kk in enumerate(keys) if kk == k)) for k in live if brute_match(pat, k)),
        key=repr,
    )
    assert got == want
    assert store.count == len(live)


@settings(max_examples=150, deadline=None)
@given(st.lists(patterns(), min_size=1, max_size=8), st.lists(topics, min_size=1, max_size=6))
def test_bus_subscriptions_agree_with_brute_force(pats, tops):
    """The same property through the public API: subscribe, publish, recv."""
    bus = edgebus.Bus(q_length=64)
    c = bus.connect()

    def user(p):  # key form back to a user pattern (text wildcards, literal text)
        return tuple(
            "+"
            if t is ANY
            else "#"
            if t is REST
            else edgebus.literal(t)
            if t in ("+", "#") and type(t) is str
            else t
            for t in p
        )

    subs = [c.subscribe(user(p)) for p in pats]
    for t in tops:
        c.publish(t, None)
    for p, s in zip(pats, subs):
        got = []
        while (m := s.recv_nowait()) is not None:
            got.append(m.topic)
        assert got == [t for t in tops if brute_match(p, t)]


def test_pattern_normalisation_round_trip():
    n, k = pattern(("a", "+", edgebus.literal("#"), "#"), "+", "#")
    assert k == ("a", ANY, "#", REST)
    assert n[2] == edgebus.literal("#")
    assert key(("a", edgebus.literal("+"))) == ("a", "+")
