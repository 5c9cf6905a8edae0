"""Fuzzing the frame decoder and the link session: the targets in
fuzz_targets.py under Hypothesis, and under atheris (coverage guided) when it
is installed. Short in CI; with --soak well over 100,000 generated inputs.
Properties of the reader against a reference, and of a damaged line between
two live links, are in tests/host/link/test_frame_fuzz.py and test_link_properties.py."""

import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgebus.link import wire
from tests.conftest import ROOT
from tests.reliability import fuzz_targets

SOAK = os.environ.get("EDGEBUS_SOAK") == "1" or "--soak" in sys.argv


def _settings(short, long):
    return settings(
        max_examples=long if SOAK else short,
        deadline=None,
        derandomize=not SOAK,
        suppress_health_check=list(HealthCheck),
    )


# Bodies that look like the protocol: a real type, maybe a sequence number,
# JSON of every shape (deep, wide, forged extras, wildcard topics), maybe a tail.
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=8)
    | st.sampled_from(["#", "+", "sensor/#", "../x", "", "sys/echo"]),
    lambda c: (
        st.lists(c, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "seq",
                    "link_id",
                    "kind",
                    "generation",
                    "peer_node",
                    "code",
                    "node",
                    "sid",
                    "nonce",
                    "v",
                    "n",
                    "proof",
                ]
            ),
            c,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@st.composite
def bodies(draw):
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=120))
    t = draw(st.integers(0, 20))
    obj = draw(JSON)
    seq = draw(st.none() | st.integers(0, 0xFFFF))
    blob = draw(st.none() | st.binary(max_size=8))
    try:
        return bytes(wire.encode(t, obj, seq, blob))[:256]
    except ValueError:
        return b"\x00"


@_settings(300, 20000)
@given(st.binary(max_size=1500))
def test_frame_decoder_on_arbitrary_bytes(data):
    fuzz_targets.frame_target(data)


@pytest.fixture(scope="module", autouse=True)
def _session_closed():
    yield
    fuzz_targets.close_session()


@_settings(300, 15000)
@given(st.lists(bodies(), max_size=12))
def test_session_on_generated_bodies(bs):
    fuzz_targets.session_target(fuzz_targets.session_input(bs))


@_settings(300, 15000)
@given(
    st.integers(0, 1), st.lists(bodies() | st.sampled_from(fuzz_targets.sealed_seeds()), max_size=8)
)
def test_sealed_session_takes_nothing_unsealed(side, bs):
    fuzz_targets.sealed_target(bytes((side,)) + fuzz_targets.session_input(bs))


@_settings(200, 10000)
@given(st.binary(max_size=80))
def test_damaged_line_delivers_only_what_was_sent(data):
    fuzz_targets.line_target(data)


def test_session_memory_stays_bounded(rel):
    """The same session fed many inputs: Python's traced memory after the
    warm-up does not grow beyond a generous bound."""
    import random
    import tracemalloc

    rng = random.Random(7)
    seeds = fuzz_targets.session_bodies()
    s = fuzz_targets.Session(fresh=10**9)  # never rebuilt: what a long session accumulates
    n = rel.n(3000, 30000)

    def one():
        bs = [bytes(b) for b in rng.sample(seeds, 4)]
        bs = [
            b
            if rng.random() < 0.5
            else bytes(x ^ (rng.random() < 0.05) * rng.randrange(256) for x in b)
            for b in bs
        ]
        s.feed(fuzz_targets.session_input(bs))

    import gc

    for _ in range(500):
        one()
    gc.collect()  # only what is still referenced counts
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    peak_growth = 0
    for i in range(n):
        one()
        if i % 500 == 0:
            gc.collect()
            peak_growth = max(peak_growth, tracemalloc.get_traced_memory()[0] - base)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    # Mutated bodies retain facts under new topics, which the host keeps (a
    # device may retain what it likes under its prefix; there is no per-link
    # cap): allow for those, nothing else may grow.
    facts = s.host.stats()["retained"]
    assert grown < 2 * 1024 * 1024 + 2048 * facts, (grown, facts)
    rel.record(
        "fuzz: session memory",
        n,
        grown_bytes=grown,
        peak_growth_bytes=peak_growth,
        delivered=s.delivered,
        retained_facts=facts,
    )
    s.close()


def _atheris():
    try:
        import atheris  # noqa: F401

        return True
    except ImportError:
        return False


@pytest.mark.skipif(not _atheris(), reason="atheris is not installed (pip install atheris)")
@pytest.mark.parametrize("target", ["frame", "session", "line", "sealed"])
def test_atheris(rel, target, tmp_path):
    runs = rel.n(
        {"frame": 10000, "session": 5000, "line": 1000, "sealed": 10000}[target],
        {"frame": 400000, "session": 200000, "line": 20000, "sealed": 300000}[target],
    )
    r = subprocess.run(
        # the soak keeps what its long runs find (tests/reliability/corpus)
        [sys.executable, "-m", "tests.reliability.fuzz_main", target, str(runs)]
        + (["--keep"] if SOAK else []),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    out = r.stdout + r.stderr
    line = [x for x in out.splitlines() if x.startswith("FUZZ ")]
    assert r.returncode == 0 and line, out[-4000:]
    res = json.loads(line[-1][5:])
    assert res["runs"] == runs
    if target == "session":
        assert res["delivered"] > 0  # the fuzzer reached the data path
    if target == "sealed":
        assert res["refused"] >= runs  # every frame it made was refused, none moved a side
    # Memory: RSS after the warm-up vs the end, generously bounded.
    grew = res["maxrss_kb_end"] - res["maxrss_kb_after_1000"]
    assert grew < 64 * 1024, res
    rel.record(
        "fuzz: atheris " + target,
        runs,
        seconds=res["seconds"],
        rss_growth_kb=grew,
        delivered=res.get("delivered"),
        refused=res.get("refused"),
    )
