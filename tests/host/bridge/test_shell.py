"""The shell-typable bus with real parts: the bridge (in-process, serving its
real unix socket with SO_PEERCRED credentials), the `edgebus` command run as
a subprocess, and a real MicroPython device running the firmware."""

import asyncio
import json
import os
import shutil
import socket
import sys
import tempfile

import pytest

from dev.harness.bridge import BridgeProcess
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from edgebus.tools.sim.fleet import Fleet
from tests.conftest import ROOT, until

pytestmark = pytest.mark.slow  # each case starts several interpreters

BRIDGE = """
[bridge]
node = "gw"
state_dir = "state"
socket = "state/bridge.sock"
heartbeat = 0.5
"""
UID_ACL = """
[[acl]]
uid = %d
read = ["app/#"]
write = ["app/mine/#"]
call = ["svc/#"]
""" % os.getuid()


def _cfg(tmp_path, extra=""):
    path = tmp_path / "bridge.toml"
    path.write_text(BRIDGE + extra)
    return bridge_config.load(path)


def with_bridge(cfg, body):
    """Run the bridge in this process and ``await body(bridge)`` beside it."""

    async def main():
        b = Bridge(cfg)
        t = asyncio.create_task(b.run())
        await until(lambda: os.path.exists(cfg.socket))
        try:
            await body(b)
        finally:
            b.stop()
            await t

    asyncio.run(main())


async def start(sock, *args):
    """`edgebus ARGS` as a subprocess, reaching the bridge through $EDGEBUS_SOCKET."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "edgebus.tools.cli",
        *args,
        cwd=ROOT,
        env=dict(os.environ, EDGEBUS_SOCKET=sock),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def edgebus(sock, *args, timeout=30):
    """(exit code, stdout, stderr) of `edgebus ARGS` run to its end."""
    p = await start(sock, *args)
    out, err = await asyncio.wait_for(p.communicate(), timeout)
    return p.returncode, out.decode(), err.decode()


def no_bridge(sock):
    """What a command says when no bridge runs at sock (exit 6)."""
    return "no bridge is running at %s (start one: edgebus-bridge --config FILE)" % sock


async def says_no_bridge(sock, cmd, at):
    """`edgebus CMD` (given sock) exits 6 saying no bridge runs at ``at``."""
    assert await edgebus(sock, *cmd) == (6, "", "edgebus %s: %s\n" % (cmd[0], no_bridge(at)))


async def line(p, timeout=15):
    """The next stdout line of a running command (AssertionError at its end)."""
    b = await asyncio.wait_for(p.stdout.readline(), timeout)
    assert b, "command ended: %r" % (await p.stderr.read())
    return b.decode().rstrip("\n")


async def ended(p, timeout=15):
    """(exit code, stderr) of a command that is ending."""
    await asyncio.wait_for(p.wait(), timeout)
    return p.returncode, (await p.stderr.read()).decode()


def test_pub_then_sub_sees_it(tmp_path):
    cfg = _cfg(tmp_path)

    async def body(b):
        seen = b.bus.connect(principal=("test",)).subscribe("app/#", queue_len=16)
        assert (await edgebus(cfg.socket, "pub", "app/marker", "1", "--retain"))[0] == 0
        sub = await start(cfg.socket, "sub", "app/#", "--json")
        # The retained marker comes first: from then on the subscriber is live.
        assert json.loads(await line(sub)) == {"topic": "app/marker", "value": 1}
        for value, want in (
            ('{"x": [1, 2]}', {"x": [1, 2]}),
            ("hello world", "hello world"),
            ("007", "007"),
            ('"42"', "42"),
            ("42", 42),
        ):
            rc, out, err = await edgebus(cfg.socket, "pub", "app/t", value)
            assert (rc, out, err) == (0, "", "")
            assert json.loads(await line(sub)) == {"topic": "app/t", "value": want}
        m = [seen.recv_nowait() for _ in range(6)][-1]
        assert m.payload == 42 and m.origin.principal["uid"] == os.getuid()
        text = await start(cfg.socket, "sub", "app/+", "--provenance")
        assert (await line(text)).startswith("app/marker 1  # ")
        await edgebus(cfg.socket, "pub", "app/t", "hello world")
        got = await line(text)
        assert got.startswith("app/t hello world  # ")
        prov = json.loads(got.split("  # ", 1)[1])
        assert prov["bridge"] == "gw" and prov["extra"]["seq"] >= 1
        for p in (sub, text):
            p.terminate()
            await p.wait()

    with_bridge(cfg, body)


def test_watch_shows_retained_state_then_changes(tmp_path):
    cfg = _cfg(tmp_path)

    async def body(b):
        b.conn.retain("app/a", 1)
        b.conn.retain("app/b", {"on": True})
        b.conn.retain("other/c", 3)
        w = await start(cfg.socket, "watch", "app/#")
        assert sorted([await line(w), await line(w)]) == ["app/a 1", 'app/b {"on": true}']
        b.conn.retain("app/a", 2)
        assert await line(w) == "app/a 2"
        b.conn.unretain("app/b")
        assert await line(w) == "app/b <unretained>"
        j = await start(cfg.socket, "watch", "app/#", "--json", "-n", "2")
        assert json.loads(await line(j)) == {"topic": "app/a", "event": "retain", "value": 2}
        assert json.loads(await line(j)) == {"event": "synced"}
        b.conn.retain("app/z", "new")
        assert json.loads(await line(j)) == {"topic": "app/z", "event": "retain", "value": "new"}
        assert (await ended(j))[0] == 0
        w.terminate()
        await w.wait()

    with_bridge(cfg, body)


def test_call_replies_and_exit_codes(tmp_path):
    cfg = _cfg(tmp_path)

    async def serve(ep, answer):
        async for req in ep:
            answer(req)

    async def body(b):
        c = b.bus.connect(principal=("svc",))
        tasks = [
            asyncio.create_task(
                serve(
                    c.bind("svc/echo", 4),
                    lambda r: r.reply({"echo": r.payload, "uid": r.origin.principal["uid"]}),
                )
            ),
            asyncio.create_task(serve(c.bind("svc/fail", 4), lambda r: r.fail("bad input"))),
            asyncio.create_task(serve(c.bind("svc/slow", 4), lambda r: None)),
        ]
        rc, out, err = await edgebus(cfg.socket, "call", "svc/echo", '{"a": 1}')
        assert rc == 0 and json.loads(out) == {"echo": {"a": 1}, "uid": os.getuid()}
        assert await edgebus(cfg.socket, "call", "svc/echo", "hi") == (
            0,
            '{"echo": "hi", "uid": %d}\n' % os.getuid(),
            "",
        )
        rc, out, err = await edgebus(cfg.socket, "call", "nothing/here")
        assert (rc, out, err) == (4, "", "edgebus call: no route: nothing serves nothing/here\n")
        # A retained fact is no endpoint: the error says where to read it.
        b.conn.retain("svc/info", {"v": 1})
        rc, out, err = await edgebus(cfg.socket, "call", "svc/info")
        assert (rc, out) == (4, ""), err
        assert err == (
            "edgebus call: no route: svc/info is a retained fact, not an endpoint: "
            "read it with edgebus watch svc/info\n"
        )
        rc, out, err = await edgebus(cfg.socket, "call", "svc/slow", "--timeout", "0.3")
        assert rc == 5 and err.startswith("edgebus call: timeout:") and err.count("\n") == 1
        rc, out, err = await edgebus(cfg.socket, "call", "svc/fail")
        assert rc == 8 and "bad input" in err
        for args in (
            ("call", "svc/+"),
            ("pub", "svc/#", "1"),
            ("pub", "local/x", "1"),
            ("sub", "a/#/b"),
        ):
            rc, out, err = await edgebus(cfg.socket, *args)
            assert rc == 2 and err.count("\n") == 1, (args, rc, err)
        nowhere = str(tmp_path / "nowhere.sock")
        assert await edgebus(cfg.socket, "call", "svc/echo", "--socket", nowhere) == (
            6,
            "",
            "edgebus call: %s\n" % no_bridge(nowhere),
        )
        for t in tasks:
            t.cancel()

    with_bridge(cfg, body)


def test_acl_denials_and_whoami(tmp_path):
    cfg = _cfg(tmp_path, UID_ACL)

    async def body(b):
        seen = b.bus.connect(principal=("test",)).subscribe("app/#", queue_len=16)
        p = await start(cfg.socket, "whoami")
        out = await line(p)
        assert out.startswith(
            "uid=%d gid=%d pid=%d link=local:%d:" % (os.getuid(), os.getgid(), p.pid, p.pid)
        ) and out.endswith(" bridge=gw")
        assert (await ended(p))[0] == 0
        for args in (
            ("pub", "app/other/x", "1"),
            ("pub", "app/other/x", "1", "--retain"),
            ("sub", "secret/#"),
            ("watch", "#"),
            ("call", "bridge/status"),
        ):
            rc, out, err = await edgebus(cfg.socket, *args)
            assert rc == 3 and out == "" and err.count("\n") == 1, (args, rc, err)
            assert err.startswith("edgebus %s: denied: " % args[0]), err
        assert seen.recv_nowait() is None  # nothing refused reached the bus
        assert (await edgebus(cfg.socket, "pub", "app/mine/x", "2"))[0] == 0
        await until(lambda: seen.stats()["queued"] == 1)
        assert seen.recv_nowait().payload == 2
        assert (await edgebus(cfg.socket, "call", "svc/missing"))[0] == 4  # allowed, unserved

    with_bridge(cfg, body)


NOBODY = 65534


def as_user(uid, sock, lines):
    """Speak the socket's text mode as another local user: a forked child
    (the interpreter lives where that user may not exec it) drops to uid,
    sends each line and returns the first reply to each."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no asyncio, no threads, then _exit
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(20)
            s.connect(sock)
            f = s.makefile("rwb")
            out = []
            for line in lines:
                f.write(line.encode() + b"\n")
                f.flush()
                out.append(f.readline().decode().rstrip("\n"))
            os.write(w, json.dumps(out).encode())
        except BaseException as e:
            os.write(w, json.dumps(["child failed: %r" % e]).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
@pytest.mark.parametrize("grant", [False, True])
def test_another_user_gets_only_what_an_acl_entry_grants(tmp_path, grant):
    """The socket admits every local user (mode 0666), so the ACL is the gate:
    without an [[acl]] entry only the bridge's own user and root may use it."""
    d = tempfile.mkdtemp(prefix="edgebus-sock-")  # a directory the user can reach
    os.chmod(d, 0o755)
    acl = '\n[[acl]]\nuid = %d\nread = ["app/#"]\nwrite = ["app/#"]\n' % NOBODY
    cfg = _cfg(tmp_path, acl if grant else "")
    cfg.socket = os.path.join(d, "bridge.sock")

    async def body(b):
        c = b.bus.connect(principal=("test",))
        seen, devs = c.subscribe("app/#", queue_len=16), c.subscribe("dev/#", queue_len=16)
        got = await asyncio.to_thread(
            as_user,
            NOBODY,
            cfg.socket,
            [
                "whoami",
                "pub dev/sim-1/cmd/led 1",
                "sub dev/#",
                "call dev/sim-1/sys/reboot",
                "pub app/x 1",
            ],
        )
        assert json.loads(got[0].split(" ", 1)[1])["principal"]["uid"] == NOBODY, got
        for reply in got[1:4]:
            assert reply.startswith("error denied permission denied: "), got
        if not grant:
            assert "uid %d has no [[acl]] entry" % NOBODY in got[1], got
        assert got[4] == "ok" if grant else got[4].startswith("error denied "), got
        # the bridge's own user (root here) needs no entry
        assert (await edgebus(cfg.socket, "pub", "app/own", "2"))[0] == 0
        msgs = []
        await until(
            lambda: (
                msgs.extend(iter(seen.recv_nowait, None))
                or any(m.topic == ("app", "own") for m in msgs)
            )
        )
        assert [m.topic for m in msgs] == ([("app", "x")] if grant else []) + [("app", "own")]
        assert devs.recv_nowait() is None  # no command reached a device's topics

    try:
        with_bridge(cfg, body)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_sub_reports_the_bridge_going_away(tmp_path):
    cfg = _cfg(tmp_path)

    async def body(b):
        b.conn.retain("app/marker", 1)
        sub = await start(cfg.socket, "sub", "app/#")
        assert await line(sub) == "app/marker 1"
        b.stop()
        rc, err = await ended(sub)
        assert rc == 7 and err == "edgebus sub: the bridge at %s went away\n" % cfg.socket

    with_bridge(cfg, body)


def test_sub_and_watch_report_a_killed_bridge(tmp_path):
    """The bridge as its own process, SIGKILLed: no goodbye, only the end of
    the socket; both commands say so in one line and exit 7."""
    cfg = _cfg(tmp_path)

    async def main():
        br = BridgeProcess(str(tmp_path), toml=tmp_path / "bridge.toml").start()
        try:
            await until(lambda: os.path.exists(cfg.socket), 15)
            assert (await edgebus(cfg.socket, "pub", "app/m", "1", "--retain"))[0] == 0
            sub = await start(cfg.socket, "sub", "app/#")
            watch = await start(cfg.socket, "watch", "app/#")
            assert await line(sub) == await line(watch) == "app/m 1"
            br.kill()
            for name, p in (("sub", sub), ("watch", watch)):
                assert await ended(p) == (
                    7,
                    "edgebus %s: the bridge at %s went away\n" % (name, cfg.socket),
                )
            # Its socket file is left, refusing connections: no bridge runs there.
            assert os.path.exists(cfg.socket)
            for cmd in (("status",), ("pub", "app/m", "2")):
                await says_no_bridge(cfg.socket, cmd, cfg.socket)
        finally:
            br.close()

    asyncio.run(main())


def test_status_by_config_and_no_bridge_after_a_clean_stop(tmp_path):
    """The bridge as its own process: `status --config` finds its socket as
    the other commands do; after SIGTERM the socket file is gone, and status,
    pub and whoami say no bridge is running, exit 6 (docs/shell.md)."""
    cfg = _cfg(tmp_path)
    toml = str(tmp_path / "bridge.toml")
    nowhere = str(tmp_path / "nowhere.sock")  # $EDGEBUS_SOCKET: --config wins over it

    async def main():
        br = BridgeProcess(str(tmp_path), toml=toml).start().ready(30)
        try:
            rc, out, err = await edgebus(nowhere, "status", "--config", toml, "--summary")
            assert rc == 0 and out.startswith("bridge gw  up "), (rc, out, err)
            assert (await edgebus(nowhere, "whoami", "--config", toml))[0] == 0
            assert br.stop() == 0
            assert not os.path.exists(cfg.socket), br.log()
            for cmd in (("status",), ("pub", "app/m", "1"), ("whoami",)):
                await says_no_bridge(nowhere, (*cmd, "--config", toml), cfg.socket)
        finally:
            br.close()

    asyncio.run(main())


def test_flow_control_choices_at_the_socket(tmp_path):
    """A subscriber that cannot keep up: disconnected (exit 9) when it chose
    so; with drop_oldest it keeps going and reports what it dropped."""
    cfg = _cfg(tmp_path)

    async def body(b):
        b.conn.retain("app/marker", 0)
        strict = await start(cfg.socket, "sub", "app/#", "--queue", "1", "--full", "disconnect")
        lossy = await start(cfg.socket, "sub", "app/#", "--queue", "1")
        assert await line(strict) == await line(lossy) == "app/marker 0"
        for i in range(300):  # one burst: frames arrive many to a read
            b.conn.publish("app/n", i)
        rc, err = await ended(strict)
        assert rc == 9 and "could not keep up (1 queued): disconnected" in err
        assert "messages dropped" in err
        b.stop()
        rc, err = await ended(lossy)
        assert (
            rc == 7
            and " messages dropped: this command could not keep up (--full drop_oldest)" in err
            and "went away" in err
        )

    with_bridge(cfg, body)


def test_presence_notices_as_clients_come_and_go(tmp_path):
    cfg = _cfg(tmp_path)

    async def body(b):
        c = b.bus.connect(principal=("svc",))
        ep = c.bind("svc/echo", 4)
        notes = c.subscribe("local/presence/svc/echo", queue_len=8)
        p = await start(cfg.socket, "whoami")
        link = (await line(p)).split("link=")[1].split()[0]
        await ended(p)
        await until(lambda: notes.stats()["queued"] >= 2)
        got = [notes.recv_nowait().payload for _ in range(2)]
        assert got == [
            {"event": "open", "peer": "cli", "link": link},
            {"event": "close", "peer": "cli", "link": link},
        ]
        ep.unbind()

    with_bridge(cfg, body)


@pytest.mark.micropython
def test_call_and_watch_a_micropython_device(tmp_path):
    with Fleet(tmp_path / "fleet", serial=1, period=0.5) as fleet:
        d = fleet.devices[0]
        cfg = _cfg(
            tmp_path,
            '[[serial]]\nnode = "%s"\nport = "%s"\nkey = "%s"\n' % (d["node"], d["port"], d["key"]),
        )
        fleet.start()
        node = d["node"]

        async def body(b):
            await until(lambda: ("dev", node, "sys", "config", "get") in b.bus.endpoints(), 60)
            rc, out, err = await edgebus(cfg.socket, "call", "dev/%s/sys/config/get" % node, "node")
            assert (rc, out, err) == (0, node + "\n", "")
            rc, out, err = await edgebus(
                cfg.socket, "call", "dev/%s/sys/config/get" % node, "nokey"
            )
            assert rc == 8 and "no key" in err
            rc, out, err = await edgebus(
                cfg.socket, "watch", "dev/%s/sys/info" % node, "--json", "-n", "1"
            )
            info = json.loads(out.splitlines()[0])
            assert rc == 0 and info["value"]["impl"].startswith("micropython")

        with_bridge(cfg, body)
