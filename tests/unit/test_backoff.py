"""The one retry schedule every retry loop uses: jittered, doubling, capped, never before Retry-After."""

from __future__ import annotations

from stream.sources.client import Backoff


def test_delays_double_up_to_the_ceiling_with_full_jitter() -> None:
    backoff = Backoff(0.5, 4.0)
    bounds = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    for bound in bounds:
        assert 0 <= backoff.next() <= bound
    assert backoff.failures == len(bounds)
    # jitter: many draws at one step spread over its range instead of falling in step
    draws = {round(Backoff(0.5, 4.0).next(), 3) for _ in range(50)}
    assert len(draws) > 10 and max(draws) <= 0.5


def test_retry_after_is_a_floor_and_reset_starts_over() -> None:
    backoff = Backoff(0.5, 30.0)
    assert backoff.next(retry_after=7.0) >= 7.0
    for _ in range(5):
        backoff.next()
    backoff.reset()
    assert backoff.next() <= 0.5
