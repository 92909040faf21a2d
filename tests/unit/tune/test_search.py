"""The bracket and the bisection on synthetic latency curves: clean, noisy, non-monotonic and flat ones."""

from __future__ import annotations

import random

import pytest

from launcher.tune.search import users_at_slo


def threshold(limit: int):  # the SLO holds up to `limit` users, in every round
    return lambda _round, users: users <= limit


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 8, 13, 63, 64, 65, 100])
def test_a_clean_curve_gives_its_threshold_with_a_logarithmic_number_of_runs(limit: int) -> None:
    answer = users_at_slo(threshold(limit), most=256, rounds=1)
    assert answer.users == limit and answer.spread == 0 and not answer.capped
    measured = {n for _, n, _ in answer.tried}
    assert {limit, limit + 1} <= measured, "the boundary was measured from both sides"
    assert len(measured) <= 2 * (limit.bit_length() + 1), "bracket then bisection, not a scan"


def test_every_level_is_measured_once_per_round() -> None:
    calls: list[tuple[int, int]] = []

    def meets(round_: int, users: int) -> bool:
        calls.append((round_, users))
        return users <= 20

    answer = users_at_slo(meets, most=256, rounds=3)
    assert answer.users == 20 and answer.round_answers == (20, 20, 20)
    assert len(calls) == len(set(calls))
    assert [r for r, _ in calls] == sorted(r for r, _ in calls), "round by round"


def test_not_even_one_user_meets_it() -> None:
    answer = users_at_slo(threshold(0), most=64, rounds=2)
    assert answer.users == 0 and [n for _, n, _ in answer.tried] == [1, 1]


def test_reaching_most_is_capped_and_says_so() -> None:
    answer = users_at_slo(threshold(10_000), most=48, rounds=1)
    assert answer.users == 48 and answer.capped
    assert [n for _, n, _ in answer.tried] == [1, 2, 4, 8, 16, 32, 48]


def test_rounds_that_disagree_give_the_level_every_round_met_and_the_spread() -> None:
    limits = {0: 40, 1: 30}
    answer = users_at_slo(lambda r, n: n <= limits[r], most=256, rounds=2)
    assert answer.round_answers == (40, 30) and answer.spread == 10
    assert answer.users == 30
    assert (0, 30, True) in answer.tried, "the smallest answer was checked in the other round too"


def test_a_level_that_misses_in_another_round_is_searched_again_below() -> None:
    """Round 0's curve has a dip the bisection of round 1 never sees: 12 passes in round 1, misses in round 0."""
    def meets(round_: int, users: int) -> bool:
        if round_ == 0:
            return users <= 9 or 13 <= users <= 16
        return users <= 12

    answer = users_at_slo(meets, most=64, rounds=2)
    assert answer.round_answers == (16, 12)
    assert answer.users == 9
    for round_ in (0, 1):
        assert meets(round_, answer.users)
    assert (0, 10, False) in answer.tried or (0, 11, False) in answer.tried or (0, 12, False) in answer.tried


@pytest.mark.parametrize("seed", range(25))
def test_a_noisy_curve_never_claims_a_level_that_missed_in_any_round(seed: int) -> None:
    """p95 latency = 50 ms per user plus noise; the target 1 s. What was measured is recorded, and the
    answer is a level every round measured as meeting it, with a measured miss just above it."""
    rng = random.Random(seed)  # noqa: S311 - reproducible noise
    noise: dict[tuple[int, int], float] = {}

    def meets(round_: int, users: int) -> bool:
        noise[(round_, users)] = rng.gauss(0, 120)
        return 50 * users + noise[(round_, users)] <= 1000

    answer = users_at_slo(meets, most=512, rounds=2)
    outcome = {(r, n): ok for r, n, ok in answer.tried}
    assert all(outcome[(r, answer.users)] for r in (0, 1)), "met in every round"
    assert any(outcome.get((r, answer.users + 1)) is False for r in (0, 1)), "a miss just above, measured"
    assert 10 <= answer.users <= 30, "near the true 20 users"


def test_a_curve_that_is_not_monotonic_still_gives_a_verified_level() -> None:
    """Met at 1-5, missed at 6-7 (a batch that does not fit), met again at 8-40: the bracket jumps over the
    dip (1, 2, 4, 8, 16, 32, 64) and bisects between 32 and 64; the answer is verified, not assumed."""
    def meets(_round: int, users: int) -> bool:
        return users <= 5 or 8 <= users <= 40

    answer = users_at_slo(meets, most=128, rounds=1)
    assert answer.users == 40 and meets(0, answer.users) and not meets(0, 41)


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        users_at_slo(threshold(3), most=0)
    with pytest.raises(ValueError):
        users_at_slo(threshold(3), most=8, rounds=0)
