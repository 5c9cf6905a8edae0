"""Security, end to end against the real bridge.

Covered elsewhere, and listed in RELIABILITY.md: wrong key over a pty
(tests/host/link/test_link_pty.py::test_wrong_key_over_pty_gives_no_session),
forged provenance / prefix / local-only topics at the link level
(tests/portable/test_link_data.py), replayed HELLO at the link level
(tests/portable/test_link_state.py::test_replayed_hello_is_refused), unix-socket
credentials through the authoriser (tests/host/bridge/test_bridge.py::
test_unix_socket_credentials_reach_the_authoriser).

Here: a rogue CPython "device" speaking raw frames on a real pty to the
bridge, a real MicroPython device with a wrong key over real mosquitto, and
the bridge's listening sockets read from /proc."""

import asyncio
import os

import pytest
import serial_asyncio

from dev.broker import Mosquitto, free_port
from dev.harness.bridge import BridgeProcess, mqtt_config
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.link import wire
from edgebus.link.stream import StreamTransport
from edgebus.tools.sim.ptycable import PtyCable
from tests.conftest import until, wait_until
from tests.portable.linkkit import Joined, sealed, synced

KEY = b"k-rogue"


class Rogue:
    """A device that speaks raw link frames: handshakes, replays, forges."""

    def __init__(self, t):
        self.t = t
        self.inbox = []

    async def send(self, t, obj, seq=None):
        body = wire.encode(t, obj, seq)
        await self.t.send(body)
        return bytes(body)

    async def expect(self, want, timeout=5):
        async def go():
            while True:
                for i, (t, _s, _o, _b) in enumerate(self.inbox):
                    if t in want:
                        return self.inbox.pop(i)
                bodies = await self.t.recv()
                assert bodies is not None, "line closed"
                for b in bodies:
                    self.inbox.append(wire.decode(b))

        return await asyncio.wait_for(go(), timeout)

    async def handshake(self, key=KEY, node="dev1", sid="rogue-sid-1", nonce=None):
        hello = {
            "v": 1,
            "node": node,
            "sid": sid,
            "nonce": nonce or wire.nonce(),
            "hb": 1000,
            "auth": True,
        }
        raw_hello = await self.send(wire.HELLO, hello)
        t, _, ack, _ = await self.expect((wire.HELLO_ACK, wire.ERROR))
        if t == wire.ERROR:
            return ack, raw_hello, None
        raw_auth = await self.send(wire.AUTH, {"proof": wire.proof(key, "I", hello, ack)})
        return ack, raw_hello, raw_auth


def _cfg(tmp_path, port):
    # seal = "offer", paced = false: the rogue holds the key (a device taken
    # from the field) and speaks unsealed frames without acknowledgements, so
    # these tests reach what the bridge does with a keyed peer's frames (the
    # seal itself: tests/portable/test_link_seal.py; pacing: test_rel_hostile.py).
    return bridge_config.parse(
        {
            "bridge": {"state_dir": str(tmp_path / "state"), "heartbeat": 1.0},
            "serial": [
                {"node": "dev1", "port": port, "key": KEY.decode(), "seal": "offer", "paced": False}
            ],
        }
    )


async def _rogue_on(cable):
    r, w = await serial_asyncio.open_serial_connection(url=cable.a, baudrate=115200)
    return Rogue(StreamTransport(r, w))


def test_replayed_handshake_is_refused_by_the_bridge(tmp_path):
    with PtyCable() as cable:

        async def main():
            b = Bridge(_cfg(tmp_path, cable.b))
            task = asyncio.create_task(b.run())
            await until(lambda: "serial:dev1" in b.links, 10)
            link = b.links["serial:dev1"]
            rogue = await _rogue_on(cable)
            ack, raw_hello, raw_auth = await rogue.handshake()
            await until(lambda: link.status == "up", 5)
            sessions = link.counters["sessions"]
            await rogue.t.send(wire.encode(wire.BYE, {"reason": "x"}))
            await until(lambda: link.status != "up")
            # 1. The recorded HELLO and AUTH, byte for byte: the nonce was seen.
            await rogue.t.send(raw_hello)
            t, _, err, _ = await rogue.expect((wire.ERROR,))
            assert err["code"] == "replay"
            await rogue.t.send(raw_auth)
            # 2. A fresh HELLO, then the old AUTH proof: bound to the old nonces.
            h2 = {
                "v": 1,
                "node": "dev1",
                "sid": "rogue-sid-1",
                "nonce": wire.nonce(),
                "hb": 1000,
                "auth": True,
            }
            await rogue.send(wire.HELLO, h2)
            await rogue.expect((wire.HELLO_ACK,))
            await rogue.t.send(raw_auth)
            t, _, err, _ = await rogue.expect((wire.ERROR,))
            assert err["code"] == "auth_failed"
            # 3. A wrong key from the start.
            ack, _, _ = await rogue.handshake(key=b"not-the-key")
            t, _, err, _ = await rogue.expect((wire.ERROR,))
            assert err["code"] == "auth_failed"
            await asyncio.sleep(0.3)
            assert link.status != "up" and link.counters["sessions"] == sessions
            assert link.counters["replays"] == 1 and link.counters["auth_failures"] >= 2
            # Data sent without a session never lands.
            await rogue.send(wire.PUB, ["sensor/x", 1], 1)
            await asyncio.sleep(0.3)
            assert b.bus.connect().retained_view("dev/#").snapshot() == []
            assert link.counters.get("imported", 0) == 0
            rogue.t.close()
            b.stop()
            await task

        asyncio.run(main())


def test_device_cannot_forge_provenance_or_leave_its_prefix(tmp_path):
    with PtyCable() as cable:

        async def main():
            b = Bridge(_cfg(tmp_path, cable.b))
            task = asyncio.create_task(b.run())
            c = b.bus.connect()
            seen = c.observe("#", queue_len=256)
            await until(lambda: "serial:dev1" in b.links, 10)
            link = b.links["serial:dev1"]
            rogue = await _rogue_on(cable)
            await rogue.handshake()
            await until(lambda: link.status == "up", 5)
            forged = {
                "link_id": "serial:other",
                "peer_node": "other",
                "peer_sid": "x",
                "generation": 99,
                "kind": "local",
                "conn_id": "c",
                "principal": "root",
                "seq": 424242,
            }
            await rogue.send(wire.SYNCSTART, {"seq": 1, "n": 1})
            await rogue.send(wire.SYNC, ["sys/info", {"fw": "evil"}, forged])
            await rogue.send(wire.SYNCEND, {"seq": 1, "n": 1})
            for i, topic in enumerate(
                [
                    "sensor/a",
                    "../../host/x",
                    ["..", "bridge", "status"],
                    "link/serial:dev1",
                    "sensor/#",
                    "+/x",
                ]
            ):
                await rogue.send(wire.PUB, [topic, i, forged], i + 1)
            await rogue.send(wire.RET, ["sys/x", 1, forged], 7)
            await rogue.send(wire.ROUTES, ["sys/#", "sys/echo"])
            await until(lambda: link.counters.get("imported", 0) >= 5, 5)
            await until(lambda: link.counters.get("refused", 0) >= 3, 5)
            msgs = []
            while (m := seen.recv_nowait()) is not None:
                if m.topic[0] != "link":
                    msgs.append(m)
            assert msgs
            for m in msgs:
                assert m.topic[:2] == ("dev", "dev1"), m.topic
                o = m.origin
                assert (o.kind, o.link_id, o.peer_node, o.peer_sid, o.generation) == (
                    "link",
                    "serial:dev1",
                    "dev1",
                    "rogue-sid-1",
                    1,
                )
                assert o.principal == ("link", "serial:dev1")
                seq = (o.extra or {}).get("seq")
                assert seq != 424242  # the receiver's own number, or none at all
            synced_fact = [m for m in msgs if m.topic == ("dev", "dev1", "sys", "info")]
            assert synced_fact and "seq" not in (synced_fact[0].origin.extra or {})
            # Only the concrete route got a proxy.
            assert ("dev", "dev1", "sys", "echo") in b.bus.endpoints()
            assert not any("#" in k for k in b.bus.endpoints())
            rogue.t.close()
            b.stop()
            await task

        asyncio.run(main())


def test_sync_cannot_smuggle_a_sequence_number():
    """Regression: a SYNC entry's extra kept the sender's "seq", which the host
    records (log, Spark dedup by peer_node, peer_sid, seq) as the link's own
    sequence number: a device could make a genuine record look like a
    duplicate. Now only a sequenced frame has a seq, set by the receiver."""

    async def main():
        j = Joined().start()
        await until(lambda: synced(j))
        view = j.host.connect().retained_view("dev/#")
        from edgebus.link import frame

        for body in (
            wire.encode(wire.SYNCSTART, {"seq": j.dl.tx_seq, "n": 1}),
            wire.encode(wire.SYNC, ["sensor/s", 1, {"seq": 5, "ts": 9}]),
            wire.encode(wire.SYNCEND, {"seq": j.dl.tx_seq, "n": 1}),
        ):
            # sent as the device itself would (sealed): a device's own lie
            j.ta.writer.write(frame.encode(sealed(j.dl, body), frame.MAX_LEN, True))
        await until(lambda: view.get("dev/dev1/sensor/s") is not None)
        assert view.get("dev/dev1/sensor/s").origin.extra == {"ts": 9}
        await j.stop()

    asyncio.run(main())


@pytest.mark.mosquitto
def test_wrong_key_over_mqtt_never_gets_a_session(tmp_path, link_device):
    with Mosquitto() as broker:
        cfg = mqtt_config(tmp_path / "state", broker.port, {"d1": "right"})

        async def main():
            b = Bridge(cfg)
            task = asyncio.create_task(b.run())
            dev = link_device("mqtt:127.0.0.1:%d" % broker.port, "wrong", 5, "d1", heap="192K")
            link = b.links["mqtt:d1"]
            await until(lambda: link.counters.get("auth_failures", 0) >= 2, 20)
            assert link.counters.get("sessions", 0) == 0
            assert "auth_failed" in link.last_error
            assert b.bus.connect().retained_view("dev/#").snapshot() == []
            b.stop()
            await task
            dev.kill()
            out = dev.communicate(timeout=5)[0]
            assert "UP" not in out, out

        asyncio.run(main())


def _listening(pid):
    """The sockets a process listens on: [("tcp"|"tcp6", addr, port)] and unix paths."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if t.startswith("socket:["):
            inodes.add(t[8:-1])
    tcp = []
    for kind in ("tcp", "tcp6", "udp", "udp6"):
        with open("/proc/%d/net/%s" % (pid, kind)) as f:
            for line in f.readlines()[1:]:
                p = line.split()
                if p[9] in inodes and (p[3] == "0A" or kind.startswith("udp")):
                    host, port = p[1].split(":")
                    tcp.append((kind, host, int(port, 16)))
    unix = []
    with open("/proc/%d/net/unix" % pid) as f:
        for line in f.readlines()[1:]:
            p = line.split()
            if p[6] in inodes and p[3] == "00010000" and len(p) > 7:  # __SO_ACCEPTCON
                unix.append(p[7])
    return tcp, unix


@pytest.mark.parametrize("metrics", [False, True])
def test_bridge_listens_only_where_configured(tmp_path, metrics):
    port = free_port()
    sock = tmp_path / "s" / "bridge.sock"
    toml = '[bridge]\nstate_dir = "%s"\nsocket = "%s"\n' % (tmp_path / "s", sock)
    if metrics:
        toml += 'metrics = "127.0.0.1:%d"\n' % port
    toml += '[log]\ndir = "%s"\n' % (tmp_path / "log")
    (tmp_path / "b.toml").write_text(toml)
    p = BridgeProcess(str(tmp_path), toml=tmp_path / "b.toml").start()
    try:
        wait_until(
            lambda: os.path.exists(sock) and (not metrics or _listening(p.proc.pid)[0]),
            15,
            "its sockets",
            procs=[p.proc],
        )
        tcp, unix = _listening(p.proc.pid)
    finally:
        p.stop(10)
    # 0100007F is 127.0.0.1 in /proc's little-endian hex.
    assert tcp == ([("tcp", "0100007F", port)] if metrics else []), tcp
    assert unix == [str(sock)], unix
