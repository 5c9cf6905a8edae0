"""Key ids (docs/protocol.md section 5): a side that takes several keys for a
peer (a key rotation's grace period) picks the one whose kid the peer names;
a peer that names none gets the first; a key it does not hold fails. And the
rotation's wrap (edgebus.link.keywrap): the device recovers the new key only
with its own, and an altered wrap is refused."""

import json

from edgebus.link import frame, keywrap, wire
from edgebus.link.handshake import kid
from tests.portable.linkkit import Joined, until, up
from tests.portable.support import raises, run

MPY_HEAP = "256K"  # two links, their pipes and route tables per case

NEW, OLD, OTHER = b"k-new-0123", b"k-old-4567", b"k-other-89"


async def _linked(dev_key, host_keys, strip_kid=False):
    """A device with dev_key against a host accepting host_keys: the pair,
    once up or refused."""
    j = Joined(dev_key=dev_key, host_key=host_keys)
    j.start()
    if strip_kid:  # an initiator that predates key ids
        j.ta.writer.filter = _no_kid
    await until(lambda: up(j) or j.hl.counters.get("auth_failures", 0) >= 1)
    return j


def _no_kid(data):
    b = frame.decode(data)
    if b is None or b[0] != wire.HELLO:
        return data
    obj = json.loads(b[1:])
    del obj["kid"]
    return frame.encode(wire.encode(wire.HELLO, obj), frame.MAX_LEN, True)


def test_a_responder_with_two_keys_takes_either_and_refuses_a_third():
    async def main():
        for dev_key in (NEW, OLD):
            j = await _linked(dev_key, [NEW, OLD])
            assert up(j) and j.hl.counters.get("auth_failures", 0) == 0
            assert j.dl._mine["kid"] == kid(dev_key)  # it said which key it holds
            j.dev.connect().publish("sensor/k", 1)  # and the sealed session carries data
            await until(lambda: j.hl.counters.get("frames_in", 0) > 2)
            assert j.hl.counters.get("forged", 0) == 0
            await j.stop()
        j = await _linked(OTHER, [NEW, OLD])
        assert not up(j) and j.dl.counters.get("sessions", 0) == 0
        assert "auth_failed" in (j.hl.last_error or "")
        await j.stop()

    run(main())


def test_an_initiator_without_a_kid_links_with_the_current_key_only():
    async def main():
        j = await _linked(NEW, [NEW, OLD], strip_kid=True)
        assert up(j)
        await j.stop()
        j = await _linked(OLD, [NEW, OLD], strip_kid=True)
        assert not up(j) and j.hl.counters.get("auth_failures", 0) >= 1
        await j.stop()

    run(main())


def test_a_kid_is_stable_and_differs_per_key():
    assert kid(NEW) == kid(NEW) and kid(NEW) != kid(OLD)
    assert len(kid(NEW)) == 8 and int(kid(NEW), 16) >= 0
    assert kid(NEW).encode() not in NEW


def test_a_wrapped_key_opens_only_under_the_old_key_and_unaltered():
    new = "ab" * 32
    req = keywrap.wrap(OLD, new, "0123456789abcdef")
    assert new not in json.dumps(req) and len(req["wrapped"]) == 64
    assert keywrap.unwrap(OLD, req) == new
    e = raises(ValueError, keywrap.unwrap, NEW, req)  # another device's key
    assert "check does not match" in str(e)
    w = req["wrapped"]
    bad = dict(req, wrapped=("0" if w[0] != "0" else "1") + w[1:])
    assert "check does not match" in str(raises(ValueError, keywrap.unwrap, OLD, bad))
    for junk in (
        None,
        {},
        dict(req, nonce="xyz"),
        dict(req, wrapped="zz" * 32),
        dict(req, check=7),
    ):
        assert "hex digits" in str(raises(ValueError, keywrap.unwrap, OLD, junk)) or "takes" in str(
            raises(ValueError, keywrap.unwrap, OLD, junk)
        )
