"""The socket's text mode (bridge/textmode.py) with real parts: the bridge
in-process serving its unix socket, a client speaking lines over it as
socat would, with its real credentials under the bridge's ACL."""

import asyncio
import json
import os

from edgebus.tools.commands.status import render
from tests.conftest import until
from tests.host.bridge.test_shell import UID_ACL, _cfg, with_bridge


async def session(cfg):
    r, w = await asyncio.open_unix_connection(cfg.socket)

    async def say(line):
        w.write((line + "\n").encode())
        await w.drain()

    async def hear(timeout=10):
        b = await asyncio.wait_for(r.readline(), timeout)
        return b.decode().rstrip("\n")

    return say, hear, w


def test_lines_in_and_out(tmp_path):
    cfg = _cfg(tmp_path)

    async def body(b):
        say, hear, w = await session(cfg)
        await say("whoami")
        who = json.loads((await hear()).split(" ", 1)[1])
        assert who["principal"] == {"uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid()}
        b.conn.retain("app/a", 1)
        await say("watch app/#")
        assert [await hear() for _ in range(3)] == ["ok", "ret app/a 1", "synced app/#"]
        await say("sub app/+")
        assert [await hear() for _ in range(2)] == ["ok", "msg app/a 1"]
        seen = b.bus.connect(principal=("test",)).subscribe("app/b")
        await say("pub app/b hello there")
        assert [await hear() for _ in range(2)] == ["ok", 'msg app/b "hello there"']
        m = seen.recv_nowait()
        assert m.payload == "hello there" and m.origin.principal["pid"] == os.getpid()
        assert m.origin.kind == "socket" and m.origin.link_id.startswith("text:")
        await say('retain app/a {"v": 2}')
        got = {await hear() for _ in range(3)}
        assert got == {"ok", 'ret app/a {"v": 2}', 'msg app/a {"v": 2}'}
        await say("call bridge/whoami")
        assert (await hear()).startswith('reply {"principal": {"uid": %d' % os.getuid())
        await say("call nothing/here 1")
        assert await hear() == "error no_route nothing/here"
        await say("sub app/# sometimes")
        assert (await hear()).startswith("error usage full must be")
        await say("frobnicate")
        assert (await hear()).startswith("error usage 'frobnicate': commands are pub,")
        await say("quit")
        assert await asyncio.wait_for(hear(), 5) == ""  # the bridge closed the session
        w.close()

    with_bridge(cfg, body)


def test_acl_applies_to_text_clients(tmp_path):
    cfg = _cfg(tmp_path, UID_ACL)

    async def body(b):
        say, hear, w = await session(cfg)
        for line in ("pub app/other/x 1", "sub secret/#", "call bridge/status"):
            await say(line)
            assert (await hear()).startswith("error denied permission denied: "), line
        await say("pub app/mine/x 1")
        assert await hear() == "ok"
        b.stop()
        assert [await hear(), await hear()] == ["bye bridge stopping", ""]
        w.close()

    with_bridge(cfg, body)


def test_flow_control_choices_are_kept_and_counted(tmp_path):
    """A burst larger than a text client's queue (256): disconnect ends its
    session, reject_newest keeps the first 256, drop_oldest the last 256."""
    cfg = _cfg(tmp_path)

    async def body(b):
        clients = {}
        for full in ("disconnect", "reject_newest", "drop_oldest"):
            say, hear, w = clients[full] = await session(cfg)
            await say("sub app/# " + full)
            assert await hear() == "ok"
        for i in range(300):  # no await: nobody reads during the burst
            b.conn.publish("app/n", i)
        st = b.bus.stats()
        assert st["overflows"] == 1 and st["dropped"] == 1 + 44 + 44
        assert "89 dropped, 1 disconnected (could not keep up)" in render(b.stats())
        say, hear, w = clients["disconnect"]
        lines = [await hear() for _ in range(257)]
        assert lines[-1] == "error overflow app/#" and lines[0] == "msg app/n 0"
        assert await hear() == ""
        w.close()
        for full, first in (("reject_newest", 0), ("drop_oldest", 44)):
            say, hear, w = clients[full]
            assert [await hear() for _ in range(256)] == [
                "msg app/n %d" % i for i in range(first, first + 256)
            ]
            b.conn.publish("app/n", "after")
            assert await hear() == 'msg app/n "after"'  # still subscribed
            w.close()
        await until(lambda: b.bus.stats()["subscriptions"] == 0)

    with_bridge(cfg, body)
