"""Presence notices to an endpoint's owner: a peer that can reach it comes
("open") and goes ("close") (docs/api.md: Presence notices)."""

import edgebus
from tests.portable.linkkit import Joined, until, up
from tests.portable.support import run

MPY_HEAP = "224K"


def test_owner_told_when_a_peer_comes_and_goes():
    async def main():
        j = Joined()
        owner = j.host.connect()
        ep = owner.bind("host/time")
        notes = owner.subscribe("local/presence/host/time", queue_len=8)
        other = owner.subscribe("local/presence/#", queue_len=8)
        j.start()
        await until(lambda: up(j) and notes.stats()["queued"] >= 1)
        m = notes.recv_nowait()
        assert m.payload == {"event": "open", "peer": "dev1", "link": j.hl.link_id}
        assert m.origin.link_id == j.hl.link_id and m.origin.peer_node == "dev1"
        # The device bus's own endpoints are not the host owner's business.
        assert other.recv_nowait().topic == ("local", "presence", "host", "time")
        assert other.recv_nowait() is None
        await j.stop()
        await until(lambda: notes.stats()["queued"] >= 1)
        assert notes.recv_nowait().payload["event"] == "close"
        ep.unbind()

    run(main())


def test_route_withdrawn_and_notices_never_cross():
    async def main():
        j = Joined()
        owner = j.host.connect()
        notes = owner.subscribe("local/presence/#", queue_len=8)
        far = j.dev.connect().subscribe("#", queue_len=32)
        j.start()
        await until(lambda: up(j))
        ep = owner.bind("host/late")
        await until(lambda: notes.stats()["queued"] >= 1)
        assert notes.recv_nowait().payload["event"] == "open"
        ep.unbind()
        await until(lambda: notes.stats()["queued"] >= 1)
        assert notes.recv_nowait().payload["event"] == "close"
        while True:
            m = far.recv_nowait()
            if m is None:
                break
            assert m.topic[0] != "local", m.topic
        await j.stop()

    run(main())


def test_a_refused_notice_is_counted_and_the_session_goes_on():
    async def main():
        def auth(ctx):
            return ctx["topic"][0] != "local"  # this bus refuses every notice

        j = Joined(host_bus=edgebus.Bus(authoriser=auth))
        j.host.connect().bind("host/time")
        j.start()
        await until(lambda: up(j) and j.hl.counters.get("presence_lost", 0) == 1)
        await j.stop()
        assert j.hl.counters["presence_lost"] == 2 and j.hl.status == "down"

    run(main())
