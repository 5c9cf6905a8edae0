"""A device that floods past its window is muted for a while, longer each
time (bridge/links/quota.py Mutes); an honest device never is. Real Links, with
their counters moved as their receive path moves them, and a given clock."""

import edgebus
from edgebus.bridge.links.quota import FORGIVE, MUTE_AT, MUTE_FIRST, MUTE_MAX, Mutes
from edgebus.link.link import Link


def _links(*nodes):
    bus = edgebus.Bus()
    return {n: Link(bus, "gw", link_id="mqtt:" + n, peer=n, status=False) for n in nodes}


def test_an_honest_device_past_its_window_now_and_then_is_never_muted():
    links = _links("honest")
    m = Mutes()
    for i in range(100):  # a window shrunk under it, every check: 256 frames past it
        links["honest"].count("over_window", 256)
        assert m.check(links, now=i * 0.25) == ([], [])
    assert m.until == {} and "muted" not in links["honest"].counters


def test_a_flood_is_muted_for_longer_each_time_and_forgiven_after_a_while():
    links = _links("evil", "honest")
    m = Mutes()
    assert m.check(links, now=0.0) == ([], [])
    links["evil"].count("over_share", MUTE_AT)
    assert m.check(links, now=0.25) == (["evil"], [])
    assert m.until == {"evil": 0.25 + MUTE_FIRST}
    links["evil"].count("over_window", 10 * MUTE_AT)  # what was on its way: no new mute
    assert m.check(links, now=1.0) == ([], [])
    assert m.check(links, now=0.25 + MUTE_FIRST) == ([], ["evil"])
    links["evil"].count("over_window", MUTE_AT)
    t = 1 + MUTE_FIRST
    assert m.check(links, now=t) == (["evil"], [])
    assert m.until["evil"] == t + 2 * MUTE_FIRST  # doubled
    for _ in range(10):  # doubling stops at MUTE_MAX
        t = m.until["evil"]
        assert m.check(links, now=t)[1] == ["evil"]
        links["evil"].count("over_window", MUTE_AT)
        m.check(links, now=t + 0.25)
    assert m.until["evil"] - (t + 0.25) == MUTE_MAX
    t = m.until["evil"]
    m.check(links, now=t)
    links["evil"].count("over_window", MUTE_AT)
    m.check(links, now=t + FORGIVE + 1)
    assert m.until["evil"] == t + FORGIVE + 1 + MUTE_FIRST  # forgiven: from the start
    assert links["evil"].counters["muted"] == 13
    assert "muted" not in links["honest"].counters


def test_a_device_gone_from_the_bridge_is_unmuted_and_forgotten():
    links = _links("evil")
    m = Mutes()
    m.check(links, now=0.0)
    links["evil"].count("over_share", MUTE_AT)
    assert m.check(links, now=0.25) == (["evil"], [])
    assert m.check({}, now=0.5) == ([], ["evil"])
    assert m.until == {}
    # back with a new link (its counters from zero): no delta from the old one's
    links = _links("evil")
    assert m.check(links, now=0.75) == ([], [])
