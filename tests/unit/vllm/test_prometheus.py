"""One reading of a /metrics text for status, the liveness rule and the benchmark: what a lying server sends."""

from __future__ import annotations

from launcher.vllm import prometheus

TEXT = """# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="a b"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="a b"} 0.5
vllm:num_requests_running{engine="0"} NaN
vllm:num_requests_running{engine="1"} 2
vllm:num_requests_waiting this is not a number
vllm:num_requests_waiting{engine="0" 7
vllm:num_requests_waiting{engine="1"} +Inf
vllm:num_requests_waiting{engine="2"} 3 1700000000000
process_cpu_seconds_total 12
"""


def test_junk_lines_and_non_finite_values_cost_only_themselves() -> None:
    wanted = {*prometheus.KV_USAGE, prometheus.RUNNING, prometheus.WAITING}
    found = prometheus.sums(TEXT, wanted)
    # labels dropped and summed; NaN, +Inf and lines that are no samples skipped; a timestamp is not the value
    assert {"vllm:kv_cache_usage_perc": 0.75, prometheus.RUNNING: 2.0, prometheus.WAITING: 3.0} == found


def test_the_newest_name_of_a_renamed_series_is_read_first() -> None:
    assert 0.5 == prometheus.first({"vllm:gpu_cache_usage_perc": 0.1, "vllm:kv_cache_usage_perc": 0.5},
                                   prometheus.KV_USAGE)
    assert 0.1 == prometheus.first(prometheus.sums("vllm:gpu_cache_usage_perc 0.1\n", prometheus.KV_USAGE),
                                   prometheus.KV_USAGE)
    assert prometheus.first({}, prometheus.KV_USAGE) is None
