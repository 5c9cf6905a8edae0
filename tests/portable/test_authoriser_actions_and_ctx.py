"""Authoriser actions and ctx contents (docs/api.md: Authoriser, Precise edge cases)."""

import asyncio

import edgebus
from tests.portable.support import run, settle

L = edgebus.literal


def test_every_action_and_its_ctx():
    seen = []

    def auth(ctx):
        seen.append(ctx)
        return True

    async def main():
        bus = edgebus.Bus(authoriser=auth)
        c = bus.connect(principal="svc")
        x = {"trace": 1}
        c.publish(["a", L("+")], "p1", extra=x)
        c.retain("r", "p2")
        c.unretain("r", extra=x)
        c.subscribe("s/+")
        c.watch_retained("w/#")
        c.retained_view("v")
        ep = c.bind(("rpc", L("#")))
        t = asyncio.create_task(c.call(("rpc", L("#")), "p3"))
        await settle()
        (await ep.recv()).reply(1)
        await t
        c.derive()  # not authorised
        bus.connect()
        acts = [d["action"] for d in seen]
        assert acts == [
            "publish",
            "retain",
            "unretain",
            "subscribe",
            "watch_retained",
            "watch_retained",
            "bind",
            "call",
        ]
        for d in seen:
            assert d["bus"] is bus and d["principal"] == "svc"
            assert type(d["topic"]) is tuple
        p = seen[0]
        assert p["topic"] == ("a", L("+")) and type(p["topic"][1]) is L
        assert p["payload"] == "p1" and p["extra"] == {"trace": 1}
        assert seen[1]["payload"] == "p2" and seen[1]["extra"] is None
        assert seen[2]["topic"] == ("r",) and seen[2]["extra"] == {"trace": 1}
        assert seen[3]["topic"] == ("s", "+") and seen[3]["extra"] is None
        assert seen[4]["topic"] == ("w", "#")
        assert seen[6]["topic"] == ("rpc", L("#"))
        assert seen[7]["payload"] == "p3" and type(seen[7]["topic"][1]) is L

    run(main())


def test_authoriser_sees_principal_of_each_connection():
    who = []
    bus = edgebus.Bus(authoriser=lambda ctx: who.append(ctx["principal"]) or True)
    a = bus.connect(principal="a")
    a.publish("t", 1)
    a.derive().publish("t", 1)
    a.derive(principal="b").publish("t", 1)
    assert who == ["a", "a", "b"]
