"""Bad input on a live link: every kind gets a clear error, a
counter, and no crash; the session stays up and the next good message gets
through. The frames go through the real stream path (COBS + CRC framing, the
FrameReader, Link.run) of a host link joined to a device link.

Related coverage elsewhere: tests/portable/test_frame.py (oversize, CRC and
COBS errors at the framing level), tests/host/link/test_frame_fuzz.py and
test_link_properties.py (properties of the reader and the session), and
test_rel_fuzz.py here (generated inputs)."""

import asyncio

import pytest

import edgebus
from edgebus.link import frame, wire
from edgebus.link.link import Link
from tests.portable.linkkit import Joined, sealed, synced, until


def inject(j, body, max_len=frame.MAX_LEN):
    """Put one frame body on the device -> host line, as the device would
    (sealed: its bad input, not an outsider's)."""
    j.ta.writer.write(frame.encode(sealed(j.dl, bytes(body)), max_len, True))


def seq_of(j):
    """The device link's next sequence number, taken for a forged data frame,
    so the real device's numbering stays gap-free."""
    s = j.dl.tx_seq
    j.dl.tx_seq = s + 1
    return s


def data(t, s, obj, blob=None):
    return wire.encode(t, obj, s, blob)


async def joined(**kw):
    j = Joined(**kw).start()
    await until(lambda: synced(j))
    return j


async def still_works(j, sub, tag):
    """The link is up, its tasks alive, and a good message crosses."""
    assert all(not t.done() for t in j.tasks), [t for t in j.tasks if t.done()]
    assert j.hl.status == "up" and j.dl.status == "up"
    j.dev.connect().publish("sensor/ok", tag)
    m = await asyncio.wait_for(sub.recv(), 3)
    assert m.payload == tag and m.topic == ("dev", "dev1", "sensor", "ok")


def deep(n):
    return b"[" * n + b"]" * n


# (case, body factory(j), counter on the host link or its transport, error text)
CASES = [
    (
        "invalid UTF-8 in JSON",
        lambda j: (
            bytes([wire.PUB | wire.F_SEQ])
            + seq_of(j).to_bytes(2, "big")
            + b'["sensor/x","\xff\xfe"]'
        ),
        "bad_frames",
        "bad JSON",
    ),
    (
        "JSON that is not JSON",
        lambda j: bytes([wire.PUB | wire.F_SEQ]) + seq_of(j).to_bytes(2, "big") + b"{nope",
        "bad_frames",
        "bad JSON",
    ),
    (
        "deeply nested JSON (unbalanced)",
        lambda j: bytes([wire.PUB | wire.F_SEQ]) + seq_of(j).to_bytes(2, "big") + b"[" * 1000,
        "bad_frames",
        "nested too deeply",
    ),
    (
        "deeply nested JSON (balanced, 494 deep, fits 1 KB sealed)",
        lambda j: data(wire.PUB, seq_of(j), ["sensor/deep", None])[:-5] + deep(494) + b"]",
        None,
        None,
    ),
    ("unknown message type", lambda j: wire.encode(42, {"future": 1}), "unknown_type", None),
    (
        "data frame without a sequence number",
        lambda j: wire.encode(wire.PUB, ["sensor/x", 1]),
        "bad_frames",
        None,
    ),
    (
        "wrong shape (PUB with an object)",
        lambda j: data(wire.PUB, seq_of(j), {"t": "sensor/x"}),
        "bad_frames",
        "bad PUB",
    ),
    (
        "wildcard '#' in a data topic",
        lambda j: data(wire.PUB, seq_of(j), ["sensor/#", 1]),
        "refused",
        None,
    ),
    (
        "wildcard '+' in a retained topic",
        lambda j: data(wire.RET, seq_of(j), ["sensor/+/t", 1]),
        "refused",
        None,
    ),
    (
        "wildcard token in a list topic",
        lambda j: data(wire.PUB, seq_of(j), [["sensor", "#"], 1]),
        "refused",
        None,
    ),
    ("empty topic", lambda j: data(wire.PUB, seq_of(j), ["", 1]), "bad_frames", "bad topic"),
    (
        "boolean topic token",
        lambda j: data(wire.PUB, seq_of(j), [["sensor", True], 1]),
        "bad_frames",
        "bad topic token",
    ),
    ("truncated body", lambda j: b"\x4b", "bad_frames", "too short"),
    (
        "JSON length past the end",
        lambda j: (
            bytes([wire.PUB | wire.F_SEQ | wire.F_BIN]) + seq_of(j).to_bytes(2, "big") + b"\x7f[]"
        ),
        "bad_frames",
        "past the end",
    ),
    ("oversized frame (4 KB on a 1 KB link)", None, "t:oversize", None),
    (
        "wildcard route in ROUTES",
        lambda j: wire.encode(wire.ROUTES, ["sys/#", "sys/+/x"]),
        "refused",
        None,
    ),
    (
        "CALL with a wildcard topic",
        lambda j: wire.encode(wire.CALL, [7, "host/#", 1, 100, None]),
        "refused",
        None,
    ),
    (
        "REPLY for a call never made",
        lambda j: wire.encode(wire.REPLY, [99999, 1]),
        "late_replies",
        None,
    ),
    (
        "REPLY with an unhashable id",
        lambda j: wire.encode(wire.REPLY, [[1], 1]),
        "late_replies",
        None,
    ),
    (
        "SYNC outside a snapshot",
        lambda j: wire.encode(wire.SYNC, ["sensor/x", 1]),
        "unexpected",
        None,
    ),
    # unsealed, and answering no handshake beside the session: nothing moves
    (
        "AUTH while up",
        lambda j: wire.encode(wire.AUTH, {"proof": "00"}),
        "forged",
        "unsealed AUTH in a sealed session",
    ),
]


@pytest.mark.parametrize("case,make,counter,text", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_counted_with_a_clear_error_and_nothing_breaks(case, make, counter, text):
    async def main():
        j = await joined()
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=64)
        before = dict(j.hl.counters)
        tb = dict(j.tb.frames.stats())
        if make is None:  # oversized: a frame the 1 KB reader must skip
            body = data(wire.PUB, seq_of(j), ["sensor/big", "x" * 4000])
            inject(j, body, max_len=8192)
        else:
            inject(j, make(j))
        await asyncio.sleep(0.1)
        if counter is None:  # a valid but extreme message: delivered intact
            m = await asyncio.wait_for(sub.recv(), 3)
            assert m.topic == ("dev", "dev1", "sensor", "deep")
            d, x = 0, m.payload
            while type(x) is list:
                d, x = d + 1, (x[0] if x else None)
            assert d == 494
        elif counter.startswith("t:"):
            k = counter[2:]
            await until(lambda: j.tb.frames.stats()[k] == tb[k] + 1)
        else:
            await until(lambda: j.hl.counters.get(counter, 0) > before.get(counter, 0))
        if text:
            assert text in (j.hl.last_error or ""), j.hl.last_error
        # Nothing from the bad frame reached the bus.
        assert sub.recv_nowait() is None
        await still_works(j, sub, case)
        # A forged frame with a spent sequence number is a gap only when dropped
        # after its number was read; nothing else is ever counted as lost.
        assert j.hl.counters.get("duplicates", 0) == 0
        await j.stop()

    asyncio.run(main())


def test_oversized_payload_on_the_device_is_refused_counted_and_a_gap():
    async def main():
        j = await joined()
        sub = j.host.connect().subscribe("dev/dev1/sensor/#", queue_len=8)
        c = j.dev.connect()
        c.publish("sensor/big", "x" * 5000)  # more than the link's max_len
        await until(lambda: j.dl.counters.get("oversize_out", 0) == 1)
        assert "exceeds max_len" in j.dl.last_error
        await still_works(j, sub, "after")
        assert j.hl.counters.get("gaps", 0) == 1  # its sequence number was spent: visible
        await j.stop()

    asyncio.run(main())


def test_wrong_protocol_version_gets_error_version_and_no_session():
    async def main():
        host = edgebus.Bus()
        hl = Link(host, "host", key=b"k", role="responder", imports=[("#", "dev")])
        for v in (2, 0, "1", None):
            hl.feed(
                wire.encode(
                    wire.HELLO,
                    {"v": v, "node": "d", "sid": "s", "nonce": "n%r" % v, "hb": 1000, "auth": True},
                )
            )
            assert hl.status == "down"
            assert hl.last_error.startswith("version: protocol version")
            err = wire.decode(hl._ctl.pop())
            assert err[0] == wire.ERROR and err[2]["code"] == "version"
        assert hl.counters["errors"] == 4 and hl.counters.get("sessions", 0) == 0

    asyncio.run(main())


def test_deep_json_on_a_local_socket_link_does_not_kill_it():
    """Regression: a local (unix-socket) link takes 64 KB frames, so nesting
    deeper than Python's recursion limit fitted in one frame and json.loads'
    RecursionError escaped Link.feed, ending the client's link task."""

    async def main():
        from edgebus.link.pipe import pair

        j2 = Joined(dev_kw={"max_len": 65536}, host_kw={"max_len": 65536})
        j2.ta, j2.tb = pair(65536)
        j2.tasks = [asyncio.create_task(j2.dl.run(j2.ta)), asyncio.create_task(j2.hl.run(j2.tb))]
        await until(lambda: synced(j2))
        sub = j2.host.connect().subscribe("dev/dev1/sensor/#", queue_len=8)
        for n in (1000, 5000, 30000):
            inject(
                j2, bytes([wire.PUB | wire.F_SEQ]) + seq_of(j2).to_bytes(2, "big") + deep(n), 65536
            )
            await until(lambda: "nested too deeply" in (j2.hl.last_error or ""))
            j2.hl.last_error = None
        assert j2.hl.counters["bad_frames"] == 3
        await still_works(j2, sub, "alive")
        await j2.stop()

    asyncio.run(main())


def test_wire_decode_refuses_deep_json_with_a_wire_error():
    for n in (2000, 100000):
        with pytest.raises(wire.WireError, match="nested too deeply"):
            wire.decode(bytes([wire.PUB]) + b"[" * n)
    assert wire.decode(bytes([wire.PUB]) + deep(200))[2] is not None


def test_out_of_memory_while_handling_a_frame_loses_the_frame_not_the_link(monkeypatch):
    """Regression: on a 160 KB MicroPython device reconnecting after a broker
    restart with its out queue full, computing the handshake proof raised
    MemoryError out of Link.feed (documented never to raise), which ended
    the link's run(); a device script without a catch-all never reconnected.
    Now the frame is counted (memory_errors) and the handshake retries."""

    async def main():
        real = wire.proof
        calls = [0]

        def failing(*a):
            calls[0] += 1
            if calls[0] == 1:
                raise MemoryError("memory allocation failed")
            return real(*a)

        monkeypatch.setattr(wire, "proof", failing)
        j = Joined(dev_kw={"handshake_timeout": 0.3}).start()
        await until(lambda: synced(j), 5)
        assert j.hl.counters.get("memory_errors", 0) + j.dl.counters.get("memory_errors", 0) == 1
        assert all(not t.done() for t in j.tasks)
        await j.stop()

    asyncio.run(main())
