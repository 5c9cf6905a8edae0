"""retain/unretain: publish, store, notify (docs/api.md: Connection; seed: retained write)."""

import edgebus


def test_retain_publishes_stores_and_notifies():
    bus = edgebus.Bus()
    c = bus.connect()
    sub = c.subscribe("fw/+")
    w = c.watch_retained("fw/#")
    v = c.retained_view("fw/#")
    v0 = v.version
    assert c.retain("fw/version", "1.2.3") is True
    m = sub.recv_nowait()
    assert m.topic == ("fw", "version") and m.payload == "1.2.3"
    ev = w.recv_nowait()
    assert type(ev) is edgebus.RetainedEvent
    assert ev.op == "retain" and ev.topic == ("fw", "version") and ev.payload == "1.2.3"
    assert ev.origin is m.origin and ev.origin.kind == "local"
    assert v.version > v0 and v.get("fw/version").payload == "1.2.3"
    assert bus.stats()["retained"] == 1
    late = c.subscribe("fw/version")
    assert late.recv_nowait().payload == "1.2.3"


def test_retain_replaces_the_stored_value():
    c = edgebus.Bus().connect()
    c.retain("k", 1)
    c.retain("k", 2)
    s = c.subscribe("k")
    assert s.recv_nowait().payload == 2
    assert s.recv_nowait() is None


def test_unretain_removes_and_notifies_but_does_not_publish():
    c = edgebus.Bus().connect()
    c.retain("fw/v", 1)
    sub = c.subscribe("fw/v")
    assert sub.recv_nowait().payload == 1
    w = c.watch_retained("fw/v")
    v = c.retained_view("fw/#")
    v0 = v.version
    assert c.unretain("fw/v") is True
    assert sub.recv_nowait() is None
    ev = w.recv_nowait()
    assert ev.op == "unretain" and ev.topic == ("fw", "v") and ev.payload is None
    assert ev.origin.kind == "local"
    assert v.get("fw/v") is None and v.version > v0
    assert c.subscribe("fw/v").recv_nowait() is None


def test_retained_values_outlive_their_connection():
    bus = edgebus.Bus()
    c1 = bus.connect()
    c1.retain("state", "on")
    c1.disconnect()
    c2 = bus.connect()
    assert c2.subscribe("state").recv_nowait().payload == "on"
    assert c2.retained_view("#").get("state").origin.conn_id == c1.conn_id


def test_retain_of_wildcard_text_is_a_concrete_topic():
    c = edgebus.Bus().connect()
    c.retain("a/b", 1)
    c.retain("a/+", 2)
    v = c.retained_view(("a", edgebus.literal("+")))
    assert [m.payload for m in v.snapshot()] == [2]
    c.unretain("a/+")
    assert c.retained_view("a/b").get("a/b").payload == 1
    assert v.snapshot() == []
