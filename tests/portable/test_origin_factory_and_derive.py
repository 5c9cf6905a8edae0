"""origin_factory, origin sharing and derive
(docs/api.md: Connection, Precise edge cases: Origins)."""

import edgebus

TRUSTED = {
    "kind": "fabric_import",
    "link_id": "link-1",
    "peer_node": "peer-a",
    "peer_sid": "sid-42",
    "generation": 7,
}


def _one(c, **kw):
    s = c.subscribe("t")
    c.publish("t", 0, **kw)
    m = s.recv_nowait()
    s.close()
    return m.origin


def _check_trusted(o):
    assert (o.kind, o.link_id, o.peer_node, o.peer_sid, o.generation) == (
        "fabric_import",
        "link-1",
        "peer-a",
        "sid-42",
        7,
    )


def test_origin_factory_dict_and_callable_and_alias():
    bus = edgebus.Bus()
    _check_trusted(_one(bus.connect(origin_factory=TRUSTED)))
    _check_trusted(_one(bus.connect(origin_factory=lambda: TRUSTED)))
    _check_trusted(_one(bus.connect(origin_base=TRUSTED)))
    _check_trusted(_one(bus.connect(origin_base=lambda: dict(TRUSTED))))


def test_only_trusted_keys_are_taken():
    bus = edgebus.Bus()
    f = {"link_id": "L", "conn_id": "fake", "principal": "root", "extra": {"a": 1}, "other": 1}
    c = bus.connect(principal="p", origin_factory=f)
    o = _one(c)
    assert o.kind == "local" and o.link_id == "L"
    assert o.conn_id == c.conn_id and o.principal == "p" and o.extra is None
    assert not hasattr(o, "other")


def test_origin_is_shared_while_nothing_changes():
    bus = edgebus.Bus()
    for kw in ({}, {"origin_factory": TRUSTED}, {"origin_factory": lambda: TRUSTED}):
        c = bus.connect(**kw)
        t = c.conn_id  # a fresh topic per connection
        s = c.subscribe(t)
        c.publish(t, 1)
        c.retain(t, 2)
        c.publish(t, 3)
        a, b, d = s.recv_nowait(), s.recv_nowait(), s.recv_nowait()
        assert a.origin is b.origin and b.origin is d.origin
        c.publish(t, 4, extra={"x": 1})
        e = s.recv_nowait().origin
        assert e is not a.origin and e.extra == {"x": 1}


def test_derive_inherits_principal_not_factory():
    bus = edgebus.Bus()
    parent = bus.connect(principal="svc", origin_factory=TRUSTED)
    child = parent.derive()
    assert child.principal == "svc" and child.conn_id != parent.conn_id
    o = _one(child)
    assert o.kind == "local" and o.link_id is None and o.principal == "svc"
    assert o.conn_id == child.conn_id
    _check_trusted(_one(parent.derive(origin_factory=TRUSTED)))
    _check_trusted(_one(parent.derive(origin_base=lambda: TRUSTED)))
    assert parent.derive(principal="other").principal == "other"
    assert parent.derive(principal=None).principal is None
