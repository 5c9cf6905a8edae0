"""Topic forms, token types and literal tokens (docs/api.md: Topics, Precise edge cases)."""

import edgebus
from tests.portable.support import raises


def _pair(**kw):
    bus = edgebus.Bus(**kw)
    c = bus.connect()
    return bus, c


def test_str_tuple_and_list_forms_are_the_same_topic():
    _, c = _pair()
    sub = c.subscribe(("net", "link"))
    c.publish("net/link", 1)
    c.publish(["net", "link"], 2)
    c.publish(("net", "link"), 3)
    for want in (1, 2, 3):
        m = sub.recv_nowait()
        assert m.payload == want
        assert type(m.topic) is tuple and m.topic == ("net", "link")
    assert sub.recv_nowait() is None


def test_empty_topic_is_value_error_everywhere():
    _, c = _pair()
    for t in ((), [], ""):
        raises(ValueError, c.publish, t, 1)
        raises(ValueError, c.retain, t, 1)
        raises(ValueError, c.unretain, t)
        raises(ValueError, c.subscribe, t)
        raises(ValueError, c.watch_retained, t)
        raises(ValueError, c.retained_view, t)
        raises(ValueError, c.bind, t)
    assert c.stats()["subscriptions"] == 0


def test_empty_string_tokens_are_allowed():
    _, c = _pair()
    sub = c.subscribe(("a", "", "b"))
    c.publish("a//b", 1)
    m = sub.recv_nowait()
    assert m.topic == ("a", "", "b")
    c.publish("a/b", 2)  # not the same topic
    assert sub.recv_nowait() is None
    sub2 = c.subscribe("x/+")
    c.publish("x/", 3)
    assert sub2.recv_nowait().topic == ("x", "")


def test_int_and_str_tokens_differ():
    _, c = _pair()
    si = c.subscribe(("dev", 3))
    ss = c.subscribe(("dev", "3"))
    c.publish(("dev", 3), "int")
    c.publish("dev/3", "str")
    m = si.recv_nowait()
    assert m.payload == "int" and type(m.topic[1]) is int
    assert si.recv_nowait() is None
    m = ss.recv_nowait()
    assert m.payload == "str" and type(m.topic[1]) is str
    assert ss.recv_nowait() is None


def test_bad_token_types_are_type_error():
    bus, c = _pair()
    for tok in (True, False, 1.5, None, b"x", ("a",)):
        raises(TypeError, c.publish, ("a", tok), 1)
        raises(TypeError, c.retain, ("a", tok), 1)
        raises(TypeError, c.subscribe, ("a", tok))
        raises(TypeError, c.bind, ("a", tok))
    raises(TypeError, c.publish, 42, 1)
    raises(TypeError, c.publish, None, 1)
    raises(TypeError, edgebus.literal, True)
    raises(TypeError, edgebus.literal, 1.0)
    raises(TypeError, edgebus.literal, None)
    s = bus.stats()
    assert s["subscriptions"] == 0 and s["endpoints"] == 0 and s["retained"] == 0


def test_wildcards_in_published_topics_are_text():
    _, c = _pair()
    exact = c.subscribe(("a", edgebus.literal("+")))
    other = c.subscribe("a/b")
    c.publish("a/+", 1)
    m = exact.recv_nowait()
    assert m.topic == ("a", "+")
    assert other.recv_nowait() is None
    c.publish(("a", "#"), 2)
    assert exact.recv_nowait() is None  # '#' is not '+'


def test_literal_token_is_delivered_as_text():
    _, c = _pair()
    sub = c.subscribe("cfg/#")
    c.publish(("cfg", edgebus.literal("+"), edgebus.literal(7)), 1)
    m = sub.recv_nowait()
    assert m.topic == ("cfg", "+", 7)
    assert type(m.topic[1]) is str and type(m.topic[2]) is int


def test_literal_equality_and_hash():
    L = edgebus.literal
    assert L("+") == L("+") and not (L("+") != L("+"))
    assert L("3") != L(3) and L("+") != "+"
    assert hash(L("a")) == hash(L("a"))
