"""A refused operation leaves nothing behind (docs/api.md: Precise edge cases: Authoriser)."""

import edgebus
from tests.portable.support import araises, raises, run


def _bus():
    # Only principal "admin" may do anything.
    return edgebus.Bus(authoriser=lambda ctx: (ctx["principal"] == "admin", "admins only"))


def test_refused_state_operations_change_nothing():
    bus = _bus()
    admin = bus.connect(principal="admin")
    user = bus.connect(principal="user")
    admin.retain("t", "old")
    s = admin.subscribe("t")
    s.recv_nowait()
    w = admin.watch_retained("t")
    v = admin.retained_view("t")
    n = v.version
    for fn, args in (
        (user.publish, ("t", 1)),
        (user.retain, ("t", 2)),
        (user.retain, ("u", 2)),
        (user.unretain, ("t",)),
    ):
        e = raises(edgebus.Denied, fn, *args)
        assert "admins only" in str(e)
    assert s.recv_nowait() is None and w.recv_nowait() is None
    assert v.version == n and v.get("t").payload == "old"
    assert bus.stats()["retained"] == 1


def test_refused_registrations_leave_nothing():
    bus = _bus()
    user = bus.connect(principal="user")
    raises(edgebus.Denied, user.subscribe, "t")
    raises(edgebus.Denied, user.watch_retained, "t", replay=True)
    raises(edgebus.Denied, user.retained_view, "t")
    raises(edgebus.Denied, user.bind, "rpc")
    st = user.stats()
    assert st["subscriptions"] == 0 and st["retained_watches"] == 0
    assert st["retained_views"] == 0 and st["endpoints"] == 0
    st = bus.stats()
    assert st["retained_watches"] == 0 and st["retained_views"] == 0
    assert st["endpoints"] == 0
    bus.connect(principal="admin").bind("rpc")  # the topic is still free


def test_refused_call_sends_nothing():
    async def main():
        bus = _bus()
        ep = bus.connect(principal="admin").bind("rpc")
        user = bus.connect(principal="user")
        e = await araises(edgebus.Denied, user.call("rpc", 1))
        assert "permission denied" in str(e)
        assert ep.recv_nowait() is None and ep.dropped() == 0
        # Refused before routing: no NoRoute for an unbound topic either.
        await araises(edgebus.Denied, user.call("nothing", 1))

    run(main())
