"""Replay overflow and replay_done under the watch's own policy
(docs/api.md: Precise edge cases)."""

import edgebus


def test_queue_zero_replay_closes_with_replay_overflow():
    bus = edgebus.Bus()
    c = bus.connect()
    w = c.watch_retained("#", queue_len=0, replay=True)
    assert w.why() == "replay_overflow"
    assert w.recv_nowait() is None
    assert bus.stats()["retained_watches"] == 0
    assert c.stats()["retained_watches"] == 0
    c.retain("a", 1)
    assert w.recv_nowait() is None
    # Without replay a rendezvous watch stays open.
    assert c.watch_retained("#", queue_len=0).why() is None


def test_reject_newest_replay_overflow_keeps_accepted_events():
    bus = edgebus.Bus()
    c = bus.connect()
    c.retain("a", 1)
    c.retain("b", 2)
    w = c.watch_retained("#", queue_len=2, full="reject_newest", replay=True)
    assert w.why() == "replay_overflow"
    got = sorted([w.recv_nowait().payload, w.recv_nowait().payload])
    assert got == [1, 2]
    assert w.recv_nowait() is None
    assert bus.stats()["retained_watches"] == 0


def test_drop_oldest_evicts_to_fit_replay_done():
    c = edgebus.Bus().connect()
    for t in ("a", "b", "c"):
        c.retain(t, t)
    w = c.watch_retained("#", queue_len=2, full="drop_oldest", replay=True)
    assert w.why() is None
    first = w.recv_nowait()
    assert first.op == "retain"
    assert w.recv_nowait().op == "replay_done"
    assert w.recv_nowait() is None
    assert w.dropped() == 2


def test_replay_that_fits_exactly():
    c = edgebus.Bus().connect()
    c.retain("a", 1)
    w = c.watch_retained("#", queue_len=2, full="reject_newest", replay=True)
    assert w.why() is None
    assert w.recv_nowait().op == "retain"
    assert w.recv_nowait().op == "replay_done"
    assert w.dropped() == 0


def test_watch_queue_policies_apply_to_live_events():
    c = edgebus.Bus().connect()
    wo = c.watch_retained("#", queue_len=1)
    wr = c.watch_retained("#", queue_len=1, full="reject_newest")
    c.retain("a", 1)
    c.retain("a", 2)
    assert wo.recv_nowait().payload == 2 and wo.dropped() == 1
    assert wr.recv_nowait().payload == 1 and wr.dropped() == 1
    assert c.dropped() == 2
