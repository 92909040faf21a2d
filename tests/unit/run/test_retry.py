"""One backoff for start-up, serving and the container loop: the profile's [shortest, longest], doubling."""

from __future__ import annotations

from tenacity import RetryCallState, Retrying

from launcher.run.retry import Backoff


def test_each_retry_in_a_row_waits_twice_as_long_up_to_the_longest() -> None:
    backoff = Backoff(5.0, 300.0)  # launcher.restart.backoff: [5s, 5m], the default
    assert [0.0, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0] == [backoff.delay(n) for n in range(9)]
    assert 300.0 == backoff.delay(10_000)  # no overflow however long the run


def test_tenacity_asks_the_caller_for_the_count_not_its_attempt_number() -> None:
    """A change the ladder made resets the count, so tenacity's own attempt number is not the input."""
    count = [0]
    wait = Backoff(60.0, 900.0).wait(lambda: count[0])
    state = RetryCallState(Retrying(), None, (), {})
    state.attempt_number = 7
    assert 0.0 == wait(state)
    count[0] = 3
    assert 240.0 == wait(state)
