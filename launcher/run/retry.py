"""One retry policy: how long to wait before the n-th retry in a row of the same thing.

Start-up (the same flags again, within `launcher.max_attempts`), serving (an engine that died, within
`launcher.restart.window`) and the container loop (a failure a later try may fix) all back off the
same way: the first retry waits the shortest delay, each further one twice as long, up to the longest.
tenacity's exponential wait is the rule; what counts as "in a row" is the caller's: the ladder's changes
reset it, the restart window forgets old deaths, so the count is passed in rather than tenacity's
attempt number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tenacity import RetryCallState, Retrying, wait_exponential
from tenacity.wait import wait_base


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits `shortest_s` · 2^(n-1), at most `longest_s`, before the n-th retry in a row; none before a first try."""

    shortest_s: float
    longest_s: float

    def delay(self, retries: int) -> float:
        if retries <= 0:
            return 0.0
        state = RetryCallState(Retrying(), None, (), {})
        state.attempt_number = retries  # tenacity's rule: multiplier · 2^(attempt_number - 1), capped
        return float(wait_exponential(multiplier=self.shortest_s, max=self.longest_s)(state))

    def wait(self, retries: Callable[[], int]) -> wait_base:
        """For tenacity's `Retrying(wait=...)`: the delay for the count `retries()` says when tenacity asks."""
        return _CountedWait(self, retries)


class _CountedWait(wait_base):
    def __init__(self, backoff: Backoff, retries: Callable[[], int]) -> None:
        self.backoff = backoff
        self.retries = retries

    def __call__(self, retry_state: RetryCallState) -> float:
        return self.backoff.delay(self.retries())
