"""Advice on /metrics texts that people posted publicly from GPU servers (tests/data/metrics/gpu-posted; each
<name>.source gives the address, the vLLM version and GPU where stated, and what was trimmed). The posts are
runs of lines, not whole dumps: the expected values are worked out by hand from the lines each file holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.observe import advice
from launcher.observe.advice import Figures
from tests.helpers.captures import changed

DUMPS = Path(__file__).parents[2] / "data" / "metrics" / "gpu-posted"
QWEN = 'model_name="Qwen/Qwen2.5-Coder-32B-Instruct"'


def dump(name: str) -> str:
    return (DUMPS / f"{name}.txt").read_text()


def one_read(text: str) -> list[advice.Advice]:
    return advice.advise(None, Figures.from_text(text), None, [], None, {}, 0.0)


def test_every_dump_names_its_source() -> None:
    names = sorted(p.stem for p in DUMPS.glob("*.txt"))
    assert len(names) >= 4
    for name in names:
        source = (DUMPS / f"{name}.source").read_text()
        assert source.startswith("url: https://github.com/"), name
        assert "trimmed:" in source, name


def test_an_idle_v1_server_before_0_10_reads_its_kv_usage_from_the_old_name_and_gets_no_advice() -> None:
    text = dump("ps318-v1-gpu-cache-usage")
    found = Figures.from_text(text)
    # vllm:gpu_cache_usage_perc 0.0, 0 running, 0 waiting: read, not "unknown"
    assert (found.kv_usage, found.running, found.waiting) == (0.0, 0.0, 0.0)
    assert one_read(text) == []


def test_a_v1_server_before_0_10_reports_its_prefix_cache_under_the_gpu_names() -> None:
    # The post ends at the TYPE line of vllm:gpu_prefix_cache_queries_total, its sample cut off: the two
    # samples below, in the post's form, are added (5,000 queried, 100 hit: a 2 % hit rate).
    text = dump("ps318-v1-gpu-cache-usage") + (f"vllm:gpu_prefix_cache_queries_total{{{QWEN}}} 5000.0\n"
                                               f"vllm:gpu_prefix_cache_hits_total{{{QWEN}}} 100.0\n")
    found = advice.prefix_cache_low(None, Figures.from_text(text), None, {})
    assert found is not None
    assert found.numbers == {"hits": 100.0, "queries": 5000.0, "hit_rate": 0.02, "prefix_caching": "on (vLLM's default)"}
    assert "prefix cache hit rate 2.0 % (100 of 5,000" in found.text


def test_vllm_0_10_reads_the_new_prefix_counters_and_never_adds_the_deprecated_ones() -> None:
    text = dump("ps617-vllm-0.10.0-glm45")
    found = Figures.from_text(text)
    assert found.kv_usage == 9.75010481363281e-06  # vllm:kv_cache_usage_perc
    assert (found.prefix_queries, found.prefix_hits) == (32.0, 0.0)  # vllm:prefix_cache_queries_total 32.0
    # 32 queried tokens are under the 1,000 the prefix rule needs; nobody waits: nothing to say
    assert one_read(text) == []
    # the deprecated gpu_ hits counter is the other pair's: it does not stand in for the new one
    assert Figures.from_text(changed(text, "vllm:gpu_prefix_cache_hits_total", 7.0)).prefix_hits == 0.0


def test_all_ttft_in_the_first_bucket_reads_as_under_a_millisecond() -> None:
    # 208 of 208 requests at or under 1 ms: p50 is rank 104 of 208 in [0, 1 ms], p95 rank 197.6
    [found] = one_read(dump("vllm6337-0.5.1-ttft-tp8"))
    assert found.rule == "latency"
    assert found.numbers["ttft_p50_s"] == pytest.approx(0.001 * 104 / 208)
    assert found.numbers["ttft_p95_s"] == pytest.approx(0.001 * 197.6 / 208)
    assert found.numbers["tpot_p50_s"] is None and found.numbers["window"] == "cumulative"
    assert found.text.startswith("TTFT p50 0 ms p95 1 ms, TPOT p50 - p95 -")


def test_a_v0_server_without_a_gpu_cache_gauge_gets_latency_from_its_ttft_buckets() -> None:
    text = dump("ibm18-v0-bloom-560m")
    found = Figures.from_text(text)
    # vllm:cpu_cache_usage_perc is V0's swap space, not the KV cache the rules judge
    assert found.kv_usage is None
    assert (found.prompt_tokens, found.generation_tokens) == (1196.0, 218152.0)
    [latency] = one_read(text)
    # 213 observations up to 80 ms: p50 rank 106.5 falls in (10, 20] ms (0 below, 112 in), p95 rank 202.35 in
    # (20, 40] ms (112 below, 99 in)
    assert latency.numbers["ttft_p50_s"] == pytest.approx(0.01 + 0.01 * 106.5 / 112)
    assert latency.numbers["ttft_p95_s"] == pytest.approx(0.02 + 0.02 * (202.35 - 112) / 99)
    assert latency.text.startswith("TTFT p50 20 ms p95 38 ms")
