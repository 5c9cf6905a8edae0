"""Authoriser forms, Denied and a raising authoriser (docs/api.md: Authoriser)."""

import edgebus
from tests.portable.support import raises


def _bus(a):
    return edgebus.Bus(authoriser=a)


def test_callable_returning_bool():
    raises(edgebus.Denied, _bus(lambda ctx: False).connect().publish, "t", 1)
    assert _bus(lambda ctx: True).connect().publish("t", 1) is True


def test_tuple_result_and_reason_in_message():
    e = raises(edgebus.Denied, _bus(lambda ctx: (False, "quota spent")).connect().publish, "t", 1)
    assert isinstance(e, edgebus.BusError)
    assert "permission denied" in str(e) and "quota spent" in str(e)
    assert _bus(lambda ctx: (True, "fine")).connect().publish("t", 1) is True
    e = raises(edgebus.Denied, _bus(lambda ctx: False).connect().subscribe, "t")
    assert "permission denied" in str(e)


class Allow:
    def __init__(self, ok):
        self.ok = ok
        self.seen = []

    def allow(self, ctx):
        self.seen.append(ctx["action"])
        return self.ok


class Authorize:
    def authorize(self, ctx):
        return ctx["action"] != "retain", "no retains"


def test_objects_with_allow_or_authorize():
    a = Allow(True)
    c = _bus(a).connect()
    c.publish("t", 1)
    assert a.seen == ["publish"]
    raises(edgebus.Denied, _bus(Allow(False)).connect().publish, "t", 1)
    c = _bus(Authorize()).connect()
    c.publish("t", 1)
    e = raises(edgebus.Denied, c.retain, "t", 1)
    assert "no retains" in str(e)


class Oops(Exception):
    pass


def _oops(ctx):
    if ctx["principal"] == "bad":
        raise Oops()
    return True


def test_raising_authoriser_propagates_and_nothing_happens():
    bus = _bus(_oops)
    good = bus.connect()
    bad = bus.connect(principal="bad")
    s = good.subscribe("t")
    raises(Oops, bad.publish, "t", 1)
    raises(Oops, bad.retain, "t", 1)
    raises(Oops, bad.subscribe, "t")
    raises(Oops, bad.bind, "rpc")
    assert s.recv_nowait() is None
    st = bus.stats()
    assert st["retained"] == 0 and st["subscriptions"] == 1 and st["endpoints"] == 0
