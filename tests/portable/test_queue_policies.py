"""Queue policies and drop accounting (docs/api.md: Feeds, Precise edge cases: Feeds)."""

import edgebus
from tests.portable.support import flooded, raises


def test_drop_oldest_evicts_and_counts():
    bus, pub, c, s = flooded("drop_oldest")
    assert [s.recv_nowait().payload, s.recv_nowait().payload] == [2, 3]
    assert s.dropped() == 2 and c.dropped() == 2
    assert bus.stats()["dropped"] == 2
    assert pub.dropped() == 0 and pub.stats()["dropped"] == 0


def test_reject_newest_refuses_and_counts():
    bus, pub, c, s = flooded("reject_newest")
    assert [s.recv_nowait().payload, s.recv_nowait().payload] == [0, 1]
    assert s.dropped() == 2 and c.stats()["dropped"] == 2
    assert bus.stats()["dropped"] == 2 and pub.dropped() == 0


def test_bus_defaults_apply_to_feeds():
    bus = edgebus.Bus(q_length=1, full="reject_newest")
    s = bus.stats()
    assert s["queue_len"] == 1 and s["full_policy"] == "reject_newest"
    c = bus.connect()
    sub = c.subscribe("t")
    c.publish("t", 1)
    c.publish("t", 2)
    assert sub.recv_nowait().payload == 1 and sub.dropped() == 1
    d = edgebus.Bus().stats()
    assert d["queue_len"] == 10 and d["full_policy"] == "drop_oldest"


def test_bad_queue_options():
    raises(ValueError, edgebus.Bus, full="block")
    raises(ValueError, edgebus.Bus, full="bogus")
    raises(ValueError, edgebus.Bus, q_length=-1)
    raises(TypeError, edgebus.Bus, q_length="3")
    raises(ValueError, edgebus.Bus, full=None)
    raises(TypeError, edgebus.Bus, q_length=None)
    bus = edgebus.Bus()
    c = bus.connect()
    raises(ValueError, c.subscribe, "t", full="block")
    raises(ValueError, c.subscribe, "t", -1)
    raises(TypeError, c.subscribe, "t", 1.5)
    raises(ValueError, c.watch_retained, "t", full="block")
    raises(ValueError, c.watch_retained, "t", queue_len=-2)
    raises(ValueError, c.bind, "t", queue_len=-1)
    s = bus.stats()
    assert s["retained_watches"] == 0 and s["endpoints"] == 0
    assert c.stats()["subscriptions"] == 0


def test_drops_of_closed_feeds_stay_counted():
    bus = edgebus.Bus()
    c = bus.connect()
    s = c.subscribe("t", queue_len=1)
    c.publish("t", 1)
    c.publish("t", 2)
    s.close()
    assert c.stats()["subscriptions"] == 0
    assert c.dropped() == 1 and bus.stats()["dropped"] == 1
    c.disconnect()
    assert c.dropped() == 1 and c.stats()["dropped"] == 1
    assert bus.stats()["dropped"] == 1
