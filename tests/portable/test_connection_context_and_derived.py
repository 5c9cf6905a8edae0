"""Connections as context managers; derived connections (docs/api.md: Connection)."""

import edgebus
from tests.portable.support import raises, run


class Boom(Exception):
    pass


def test_with_disconnects_on_exit():
    bus = edgebus.Bus()
    with bus.connect() as c:
        assert type(c).__name__ == "Connection" and not c.is_disconnected()
        s = c.subscribe("t")
        assert bus.stats()["connections"] == 1
    assert c.is_disconnected() and s.why() == "disconnected"
    assert bus.stats()["connections"] == 0


def test_with_disconnects_on_error_and_reraises():
    bus = edgebus.Bus()
    keep = []

    def body():
        with bus.connect() as c:
            keep.append(c)
            raise Boom()

    raises(Boom, body)
    assert keep[0].is_disconnected() and bus.stats()["connections"] == 0


def test_async_with():
    async def main():
        bus = edgebus.Bus()
        async with bus.connect() as c:
            assert not c.is_disconnected()
        assert c.is_disconnected()
        try:
            async with bus.connect() as d:
                raise Boom()
        except Boom:
            pass
        else:
            raise AssertionError("swallowed")
        assert d.is_disconnected() and bus.stats()["connections"] == 0

    run(main())


def test_derived_connections_go_with_their_parent():
    bus = edgebus.Bus()
    p = bus.connect()
    a = p.derive()
    b = a.derive()
    s = b.subscribe("t")
    assert bus.stats()["connections"] == 3
    assert p.disconnect() is True
    assert a.is_disconnected() and b.is_disconnected() and s.why() == "disconnected"
    assert bus.stats()["connections"] == 0


def test_disconnecting_a_derived_connection_leaves_the_parent():
    bus = edgebus.Bus()
    p = bus.connect()
    a = p.derive()
    a.disconnect()
    assert not p.is_disconnected() and bus.stats()["connections"] == 1
    assert p.publish("t", 1) is True
    p.disconnect()
    assert bus.stats()["connections"] == 0
