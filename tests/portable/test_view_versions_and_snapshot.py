"""RetainedView versions, get, snapshot (docs/api.md: RetainedView, Precise edge cases: Views)."""

import edgebus


def test_view_starts_from_the_store():
    c = edgebus.Bus().connect()
    c.retain("cfg/a", 1)
    c.retain("cfg/b", 2)
    c.retain("x", 3)
    v = c.retained_view("cfg/#")
    assert type(v.version) is int
    snap = v.snapshot()
    assert type(snap) is list
    assert [(m.topic, m.payload) for m in snap] == [(("cfg", "a"), 1), (("cfg", "b"), 2)]
    assert type(snap[0]) is edgebus.Message and snap[0].origin.conn_id == c.conn_id
    assert v.items() == snap


def test_version_rules():
    c = edgebus.Bus().connect()
    v = c.retained_view("a/+")
    n = v.version
    c.retain("a/x", 1)
    assert v.version > n
    n = v.version
    c.retain("a/x", 1)  # equal value still counts
    assert v.version > n
    n = v.version
    c.retain("b/x", 1)  # not matching
    c.publish("a/x", 2)  # not retained
    c.unretain("a/y")  # absent
    assert v.version == n
    c.unretain("a/x")
    assert v.version > n
    n = v.version
    c.unretain("a/x")  # now absent
    assert v.version == n


def test_get_and_items():
    c = edgebus.Bus().connect()
    v = c.retained_view("#")
    assert v.get("nope") is None
    c.retain(("n", 1), "one", extra={"t": 1})
    m = v.get(("n", 1))
    assert m.topic == ("n", 1) and m.payload == "one" and m.origin.extra == {"t": 1}
    assert v.get("n/1") is None  # "1" is not 1
    assert [x.payload for x in v.items()] == ["one"]


def test_changes_coalesce():
    c = edgebus.Bus().connect()
    v = c.retained_view("#")
    n = v.version
    for i in range(5):
        c.retain("k", i)
    c.retain("j", 0)
    assert v.version >= n + 1
    assert [m.payload for m in v.snapshot()] == [0, 4]


def test_snapshot_sorting():
    c = edgebus.Bus().connect()
    for t in (
        ("n", 9),
        ("n", 10),
        "b",
        "a/z",
        "a/b",
        ("n", "3"),
        ("n", 3),
        ("3", 3),
        (3, "3"),
        "a-b",
    ):
        c.retain(t, 0)
    got = [m.topic for m in c.retained_view("#").snapshot()]
    assert got == [
        (3, "3"),
        ("3", 3),
        ("a-b",),
        ("a", "b"),
        ("a", "z"),
        ("b",),
        ("n", 10),
        ("n", 3),
        ("n", "3"),
        ("n", 9),
    ]
