"""The Link's public names other packages use: publish_status() and
end_session(why); and a session's proxies seen through bus.endpoints();
a max_len with no room for the handshake refused."""

import asyncio

import edgebus
from edgebus.link.link import Link
from edgebus.link.pipe import pair
from tests.portable.linkkit import Joined, synced, until
from tests.portable.support import run

# Two buses and two links in one interpreter (64-bit unix port).
MPY_HEAP = "288K"  # two links, their pipes and the route table


def test_publish_status_retains_the_stats_at_once():
    bus = edgebus.Bus()
    link = Link(bus, "d1", link_id="line")
    view = bus.connect().retained_view("link/#")
    assert link.status_topic() == ("link", "line")
    link.count("port_errors")
    link.publish_status()
    st = view.get(("link", "line")).payload
    assert st["state"] == "down" and st["node"] == "d1"
    assert st["counters"] == {"port_errors": 1}
    quiet = Link(bus, "d2", link_id="quiet", status=False)
    quiet.publish_status()
    assert view.get(("link", "quiet")) is None


def test_a_max_len_too_small_for_the_handshake_is_refused_clearly():
    bus = edgebus.Bus()
    try:
        Link(bus, "d1", max_len=256)
    except ValueError as e:
        assert "handshake" in str(e) and "256" in str(e)
    else:
        raise AssertionError("a link that could never say HELLO_ACK was made")
    assert Link(bus, "d2", max_len=400).opts.max_len == 400


def test_a_frame_past_max_len_from_the_peer_is_counted_and_said():
    """A program whose max_len is shorter than the frames its peer sends (a
    bridge's ROUTES of many endpoints) hears of it in last_error, not only in
    its transport's counters: its calls would otherwise fail no_route."""

    async def main():
        j = Joined(dev_kw={"max_len": 1024}, host_kw={"max_len": 4096})
        c = j.host.connect()
        eps = [c.bind("host/a-long-endpoint-name-%03d" % i, queue_len=1) for i in range(40)]
        j.ta, j.tb = pair(1024, 4096)
        j.tasks = [
            asyncio.create_task(j.dl.run(j.ta)),
            asyncio.create_task(j.hl.run(j.tb)),
        ]
        await until(lambda: j.dl.counters.get("oversize_in", 0) >= 1, 20)
        assert "max_len 1024" in j.dl.last_error, j.dl.last_error
        assert j.ta.stats()["oversize"] == j.dl.counters["oversize_in"]
        assert j.hl.counters.get("routes_sent", 0) >= 1
        for ep in eps:
            ep.close()
        await j.stop()

    run(main())


def test_end_session_drops_the_session_keeps_the_state():
    async def main():
        async def serve(ep):
            while True:
                req = await ep.recv()
                if req is None:
                    return
                # Held: the call stays pending until the session ends.

        j = Joined()
        ep = j.dev.connect().bind("sys/hold", queue_len=4)
        task = asyncio.create_task(serve(ep))
        j.start()
        hold = ("dev", "dev1", "sys", "hold")
        await until(lambda: synced(j) and hold in j.host.endpoints())
        assert not any("#" in k for k in j.host.endpoints())
        call = asyncio.create_task(j.host.connect().call("dev/dev1/sys/hold", 1, timeout=5))
        await until(lambda: j.hl.stats()["pending_calls"] == 1)
        gen = j.hl.generation
        ends = j.hl.counters.get("session_ends", 0)
        j.hl.end_session("ended by test")
        assert j.hl.status == "down"
        assert j.hl.counters["session_ends"] == ends + 1
        assert j.hl.last_error == "ended by test"
        assert j.hl.stats()["pending_calls"] == 0 and j.hl.stats()["proxies"] == 0
        assert hold not in j.host.endpoints()
        try:
            await call
            raise AssertionError("the held call did not end with the session")
        except edgebus.Closed as e:
            assert "session_reset" in str(e)
        assert j.hl.state["generation"] == gen  # the peer's continuity is kept
        j.hl.end_session("again")  # already down: nothing more to count
        assert j.hl.counters["session_ends"] == ends + 1
        await j.stop()
        task.cancel()

    run(main())
