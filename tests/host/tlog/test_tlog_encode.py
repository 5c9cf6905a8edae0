"""The writer's one-pass encoding of a record (records.encode_record): the
body bytes are exactly the compact JSON of the normalized body, and the row
exactly row_of's, for any record the log can hold; what it cannot hold is
refused the same way."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgebus import tlog
from edgebus.tlog import records

atoms = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    atoms | st.binary(max_size=8),
    lambda c: (
        st.lists(c, max_size=4)
        | st.dictionaries(st.text(max_size=4), c, max_size=4)
        | st.dictionaries(st.sampled_from(["$b64", "$lit", "$x"]), c, min_size=1, max_size=1)
    ),
    max_leaves=12,
)
maybe_text = st.none() | st.text(max_size=12)
maybe_num = st.none() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
recs = st.fixed_dictionaries(
    {
        "ts_host": st.floats(0, 4e9) | st.integers(0, 2**40),
        "topic": st.lists(st.text(max_size=6) | st.integers(), min_size=1, max_size=5),
        "payload": values,
    },
    optional={
        "ts_device": maybe_num,
        "seq": st.none() | st.integers(),
        "origin_kind": maybe_text,
        "conn_id": maybe_text,
        "principal": maybe_text,
        "link_id": maybe_text,
        "peer_node": maybe_text,
        "peer_sid": maybe_text,
        "generation": st.none() | st.integers(),
        "extra": st.none() | st.dictionaries(st.text(max_size=5), values, max_size=3),
    },
)


def _reference(rec):
    """The body and row as the log format defines them: the stdlib's compact
    JSON of normalize()'s body, and row_of of it."""
    body = records.normalize(rec)
    return records.json_text(body).encode("utf-8"), records.row_of(body)


@settings(max_examples=200, deadline=None)
@given(recs)
def test_one_pass_encoding_is_the_reference_encoding(rec):
    try:
        want = _reference(rec)
    except (TypeError, ValueError) as e:  # not loggable (e.g. a lone surrogate, inf)
        with pytest.raises(type(e)):
            records.encode_record(rec)
        return
    body, row = records.encode_record(rec)
    assert (body, row) == want
    assert records.dump_body(records.normalize(rec)) == body
    back = records.decode_body(body, True)
    assert back["payload"] == records.decode_value(records.encode_value(rec["payload"]))


def test_refusals_name_the_field():
    base = {"ts_host": 1.0, "topic": ["a"], "payload": 1}
    for k, v, says in [
        ("seq", "7", "seq must be an int"),
        ("seq", True, "seq must be an int"),
        ("peer_node", 3, "peer_node must be a str"),
        ("generation", 1.5, "generation must be an int"),
        ("payload", math.inf, "non-finite"),
        ("payload", {1: 2}, "keys must be str"),
    ]:
        with pytest.raises((TypeError, ValueError), match=says):
            records.encode_record(dict(base, **{k: v}))
    with pytest.raises(ValueError, match="unknown record field"):
        records.encode_record(dict(base, nope=1))
    assert tlog.frame(records.encode_record(base)[0])  # and the good one passes
