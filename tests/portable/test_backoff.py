"""edgebus.backoff: the delays every retry loop waits, on both runtimes."""

from edgebus.backoff import Backoff, grow, jitter


def test_jitter_spreads_over_half_the_delay_from_low():
    seen = [jitter(8, 0.75) for _ in range(200)]
    assert all(6 <= d < 10 for d in seen)
    assert max(seen) - min(seen) > 1  # spread, not one value
    assert all(4 <= jitter(8) < 8 for _ in range(50))


def test_grow_doubles_between_least_and_cap():
    assert grow(1, 0, 60) == 2
    assert grow(0.1, 0.5, 60) == 0.5
    assert grow(40, 0, 60) == 60


def test_a_loop_doubles_up_to_its_cap_and_starts_again_on_reset():
    b = Backoff(0.5, 3)
    got = [b.next() for _ in range(5)]
    # each delay is its step (0.5, 1, 2, 3, 3) jittered over half to whole
    for d, step in zip(got, (0.5, 1, 2, 3, 3)):
        assert step / 2 <= d < step
    assert b.last == got[-1]
    b.reset()
    assert 0.25 <= b.next() < 0.5
