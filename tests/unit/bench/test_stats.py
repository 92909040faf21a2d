"""The statistics against tables computed by hand (and numpy's percentile, which vLLM's benchmark uses)."""

from __future__ import annotations

import pytest

from launcher.bench import stats
from launcher.bench.stats import RequestResult


@pytest.mark.parametrize(("values", "expected"), [
    ([1.0], {0: 1.0, 50: 1.0, 99: 1.0}),
    ([3.0, 1.0, 2.0], {0: 1.0, 50: 2.0, 95: 2.9, 99: 2.98, 100: 3.0}),
    # sorted 0.5 2 2 7.25 9: p95 sits at rank 3.8, 80 % of the way from 7.25 to 9
    ([0.5, 9.0, 2.0, 2.0, 7.25], {50: 2.0, 95: 8.65, 99: 8.93}),
    (list(range(101)), {0: 0.0, 50: 50.0, 95: 95.0, 99: 99.0}),
])
def test_percentile_interpolates_linearly_between_ranks(values: list[float], expected: dict[int, float]) -> None:
    """The table is numpy.percentile's (linear), which vLLM's benchmark uses."""
    assert {q: pytest.approx(v) for q, v in expected.items()} == {q: stats.percentile(values, q) for q in expected}


def test_a_run_by_hand() -> None:
    """Three requests: two complete (4 and 1 output tokens), one fails with a timeout."""
    results = [
        RequestResult(True, ttft_s=0.100, latency_s=0.400, itl_s=(0.1, 0.1, 0.1), input_tokens=10, output_tokens=4),
        RequestResult(True, ttft_s=0.200, latency_s=0.200, itl_s=(), input_tokens=20, output_tokens=1),
        RequestResult(False, error="timeout"),
    ]
    t = stats.totals(results, duration_s=2.0, users=2)
    assert (t.completed, t.failed, t.errors) == (2, 1, {"timeout": 1})
    assert (t.input_tokens, t.output_tokens) == (30, 5)
    assert t.ttft_ms == {"mean": 150.0, "p50": 150.0, "p95": 195.0, "p99": 199.0}
    # TPOT only for requests with more than one output token: (400 − 100) / 3 = 100 ms.
    assert t.tpot_ms == {"mean": 100.0, "p50": 100.0, "p95": 100.0, "p99": 100.0}
    assert t.itl_ms["mean"] == 100.0
    assert t.e2el_ms == {"mean": 300.0, "p50": 300.0, "p95": 390.0, "p99": 398.0}
    assert (t.output_tokens_per_s, t.output_tokens_per_s_per_user, t.requests_per_s) == (2.5, 1.25, 1.0)


def test_nothing_completed_is_zeros_not_an_error() -> None:
    t = stats.totals([RequestResult(False, error="http_500")], duration_s=1.0, users=1)
    assert t.completed == 0 and t.ttft_ms == {"mean": 0.0, "p50": 0.0, "p95": 0.0, "p99": 0.0}
