"""Custom wildcard symbols, feed.topic, and wildcards in bind/call (docs/api.md: Topics)."""

import asyncio

import edgebus
from tests.portable.support import araises, raises, run


def _pair(**kw):
    bus = edgebus.Bus(**kw)
    c = bus.connect()
    return bus, c


def test_custom_wildcards_make_plus_and_hash_text():
    bus, c = _pair(s_wild="*", m_wild=">")
    assert bus.stats()["s_wild"] == "*" and bus.stats()["m_wild"] == ">"
    plus = c.subscribe("a/+")
    star = c.subscribe("a/*")
    rest = c.subscribe("a/>")
    c.publish("a/b", 1)
    c.publish("a/+", 2)
    assert plus.recv_nowait().payload == 2
    assert plus.recv_nowait() is None
    assert star.recv_nowait().payload == 1
    assert star.recv_nowait().payload == 2
    assert rest.stats()["queued"] == 2
    raises(ValueError, c.subscribe, "a/>/b")
    c.subscribe("a/#/b")  # '#' is text here
    raises(ValueError, c.bind, "x/*")
    c.bind("x/+")


def test_int_wildcard_symbol():
    _, c = _pair(s_wild=0)
    sub = c.subscribe(("a", 0))
    c.publish(("a", "zero"), 1)
    c.publish(("a", 0), 2)  # published topics are concrete
    assert sub.recv_nowait().payload == 1
    assert sub.recv_nowait().payload == 2
    sub2 = c.subscribe(("b", "0"))  # "0" is not the wildcard 0
    c.publish("b/x", 3)
    assert sub2.recv_nowait() is None


def test_feed_topic_is_pattern_tuple_with_literals_kept():
    _, c = _pair()
    lit = edgebus.literal("+")
    sub = c.subscribe(["a", lit, "+"])
    assert type(sub.topic) is tuple and sub.topic == ("a", lit, "+")
    assert type(sub.topic[1]) is edgebus.literal
    assert c.subscribe("x/#").topic == ("x", "#")
    assert c.watch_retained(("w", 1)).topic == ("w", 1)
    assert c.bind(("e", lit)).topic == ("e", lit)
    assert c.retained_view("v/+").topic == ("v", "+")


def test_bind_and_call_reject_raw_wildcards():
    async def main():
        _, c = _pair()
        raises(ValueError, c.bind, "rpc/+")
        raises(ValueError, c.bind, "rpc/#")
        raises(ValueError, c.bind, ("+",))
        await araises(ValueError, c.call("rpc/+", 1))
        await araises(ValueError, c.call(("rpc", "#"), 1))
        ep = c.bind(("rpc", edgebus.literal("+")))
        assert ep.topic[1] == edgebus.literal("+")
        # A literal call reaches the endpoint bound with a literal.
        t = asyncio.create_task(c.call(("rpc", edgebus.literal("+")), 5, timeout=1))
        req = await ep.recv()
        assert req.topic == ("rpc", "+") and req.payload == 5
        req.reply("ok")
        assert await t == "ok"

    run(main())
