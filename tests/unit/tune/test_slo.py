"""The --slo parser and the check of a measured level against it."""

from __future__ import annotations

import pytest

from launcher.bench.stats import RequestResult, Totals, totals
from launcher.errors import UsageError
from launcher.tune import slo


def test_the_issue_s_example_parses_to_milliseconds() -> None:
    target = slo.parse("ttft_p95<=2s,tpot_p95<=80ms")
    assert [(t.metric, t.stat, t.op, t.limit) for t in target.terms] == [("ttft", "p95", "<=", 2000.0),
                                                                         ("tpot", "p95", "<=", 80.0)]


@pytest.mark.parametrize(("text", "name", "limit"), [
    ("e2el_p99 < 30s", "e2el_p99", 30_000.0), ("itl_mean<=500us", "itl_mean", 0.5), ("TTFT_P50<=250", "ttft_p50", 250.0),
    ("user_tok_s>=20", "user_tok_s", 20.0), ("user_tok_s > 7.5 tok/s", "user_tok_s", 7.5),
])
def test_every_figure_stat_and_unit(text: str, name: str, limit: float) -> None:
    (term,) = slo.parse(text).terms
    assert (term.name, term.limit) == (name, limit)


@pytest.mark.parametrize(("text", "says"), [
    ("", "empty"), (" , ", "empty"), ("ttft_p95", "not NAME<=LIMIT"), ("ttft_p90<=2s", "unknown figure"),
    ("latency_p95<=2s", "unknown figure"), ("ttft_p95>=2s", "ceiling"), ("user_tok_s<=20", "floor"),
    ("ttft_p95<=2h", "unknown unit"), ("ttft_p95<=0", "never be met"), ("ttft_p95<=2s,ttft_p95<=1s", "twice"),
    ("ttft_p95<=-2s", "not NAME<=LIMIT"), ("ttft_p95<=2s;rm -rf /", "not NAME<=LIMIT"), ("x" * 600, "characters"),
    ("user_tok_s>=20ms", "tokens/s"),
])
def test_a_malformed_slo_is_one_line_naming_the_term(text: str, says: str) -> None:
    with pytest.raises(UsageError) as caught:
        slo.parse(text)
    message = str(caught.value)
    assert says in message and "\n" not in message and message.startswith("--slo")
    assert caught.value.exit_code == 2


def test_the_canonical_form_ignores_order_and_units() -> None:
    assert slo.parse("tpot_p95<=80ms, ttft_p95<=2s").canonical() == slo.parse("ttft_p95<=2000,tpot_p95<=80").canonical()
    assert slo.parse("ttft_p95<=2s").canonical() != slo.parse("ttft_p95<2s").canonical()


def _level(ttfts_ms: list[float], out_tokens: int = 11, failed: int = 0) -> Totals:
    done = [RequestResult(True, ttft_s=t / 1000, latency_s=t / 1000 + 0.5, output_tokens=out_tokens) for t in ttfts_ms]
    return totals(done + [RequestResult(False, error="http_500")] * failed, duration_s=10.0, users=2)


def test_a_level_meets_the_slo_only_when_every_term_holds_and_nothing_failed() -> None:
    target = slo.parse("ttft_p95<=1s,tpot_p50<=60ms")
    fast = _level([100.0] * 20)  # TPOT = 500 ms / 10 tokens = 50 ms
    assert target.violations(fast) == []
    slow = _level([100.0] * 18 + [3000.0] * 2)
    assert ["ttft_p95"] == [v.split()[0] for v in target.violations(slow)]
    assert "3000.0" in target.violations(slow)[0]
    assert target.violations(_level([100.0] * 20, failed=1)) == ["1 failed requests (http_500)"]
    assert "no request completed" in target.violations(_level([]))


def test_the_per_user_rate_is_bench_s() -> None:
    level = _level([100.0] * 20)  # 20 requests × 11 tokens over 10 s for 2 users = 11 tok/s each
    assert slo.parse("user_tok_s>=11").violations(level) == []
    assert slo.parse("user_tok_s>11").violations(level) != []


@pytest.mark.parametrize(("text", "needed"), [("ttft_mean<=1s", 16), ("ttft_p50<=1s", 16),
                                              ("ttft_p95<=1s,tpot_p50<=9ms", 40), ("e2el_p99<=9s", 200)])
def test_requests_per_level_fill_the_highest_percentile(text: str, needed: int) -> None:
    assert slo.requests_needed(slo.parse(text)) == needed
