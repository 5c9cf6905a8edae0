"""Origin fields, immutability and extra
(docs/api.md: Delivered values, Precise edge cases: Origins)."""

import edgebus
from tests.portable.support import raises

FIELDS = ("kind", "conn_id", "principal", "link_id", "peer_node", "peer_sid", "generation", "extra")


def _one(c, **kw):
    s = c.subscribe("t")
    c.publish("t", 0, **kw)
    m = s.recv_nowait()
    s.close()
    return m.origin


def test_default_origin():
    bus = edgebus.Bus()
    c = bus.connect(principal={"user": "u"})
    o = _one(c)
    assert type(o) is edgebus.Origin
    assert o.kind == "local" and o.conn_id == c.conn_id and o.principal == {"user": "u"}
    assert o.link_id is None and o.peer_node is None and o.peer_sid is None
    assert o.generation is None and o.extra is None
    assert bus.connect().conn_id != c.conn_id


def test_origin_is_immutable():
    o = _one(edgebus.Bus().connect(), extra={"a": 1})
    for f in FIELDS + ("other",):
        raises(AttributeError, setattr, o, f, "x")
    assert o.kind == "local"


def test_extra_is_read_only():
    x = _one(edgebus.Bus().connect(), extra={"a": 1}).extra

    def setitem():
        x["b"] = 2

    def delitem():
        del x["a"]

    raises(TypeError, setitem)
    raises(TypeError, delitem)
    raises(TypeError, x.update, {"b": 2})
    raises(TypeError, x.pop, "a")
    raises(TypeError, x.clear)
    raises(TypeError, x.setdefault, "c", 3)
    raises(TypeError, x.popitem)
    assert x == {"a": 1} and x["a"] == 1 and isinstance(x, dict)


def test_extra_must_be_a_dict_and_is_copied():
    c = edgebus.Bus().connect()
    s = c.subscribe("t")
    for bad in ([("a", 1)], "a=1", ("a",), 1):
        raises(TypeError, c.publish, "t", 0, extra=bad)
        raises(TypeError, c.retain, "t", 0, extra=bad)
        raises(TypeError, c.unretain, "t", extra=bad)
    assert s.recv_nowait() is None
    mine = {"trace": 1}
    c.publish("t", 0, extra=mine)
    mine["trace"] = 2
    mine["new"] = 3
    assert s.recv_nowait().origin.extra == {"trace": 1}
    assert _one(c, extra={}).extra is None


def test_extra_travels_on_every_operation():
    c = edgebus.Bus().connect()
    w = c.watch_retained("t")
    v = c.retained_view("t")
    c.retain("t", 1, extra={"op": "r"})
    assert w.recv_nowait().origin.extra == {"op": "r"}
    assert v.get("t").origin.extra == {"op": "r"}
    c.unretain("t", extra={"op": "u"})
    assert w.recv_nowait().origin.extra == {"op": "u"}
    # extra can never change a trusted field
    o = _one(c, extra={"kind": "evil", "conn_id": "x", "principal": "root"})
    assert o.kind == "local" and o.conn_id == c.conn_id and o.principal is None
    assert o.extra["kind"] == "evil"


def test_a_factory_s_fields_with_each_publish_s_own_extra():
    # CPython builds an origin with extra from the fields of the one before:
    # whichever comes first, each keeps the factory's fields and its own extra.
    c = edgebus.Bus().connect(principal="p")
    d = c.derive(
        origin_factory={"kind": "link", "link_id": "l1", "peer_node": "n", "generation": 4}
    )
    s = d.subscribe("t")
    d.publish("t", 0, extra={"seq": 1})
    d.publish("t", 1)
    d.publish("t", 2, extra={"seq": 3, "late": True})
    got = [s.recv_nowait().origin for _ in range(3)]
    for o in got:
        assert (o.kind, o.conn_id, o.principal, o.link_id, o.peer_node, o.peer_sid) == (
            "link",
            d.conn_id,
            "p",
            "l1",
            "n",
            None,
        )
        assert o.generation == 4 and type(o) is edgebus.Origin
    assert [o.extra for o in got] == [{"seq": 1}, None, {"seq": 3, "late": True}]
