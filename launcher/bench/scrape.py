"""vLLM's own Prometheus metrics during a run: the prefix-cache hit rate (counter deltas), the peak KV-cache
usage and preemptions. Names differ per vLLM version; the newest is read first. A sample that is not a
finite number is skipped, and a figure that cannot be (a rate or usage outside 0-1, a counter that went
down) is reported as null: a server that lies does not get a number."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from launcher.vllm import prometheus
from launcher.vllm.prometheus import KV_USAGE, first

HITS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total")
QUERIES = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total")
HIT_RATE_GAUGE = ("vllm:gpu_prefix_cache_hit_rate",)  # V0: a gauge, not counters
PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")


WANTED = (*HITS, *QUERIES, *HIT_RATE_GAUGE, *KV_USAGE, *PREEMPTIONS, "vllm:time_to_first_token_seconds")


def parse(text: str, wanted: tuple[str, ...] = WANTED) -> dict[str, float]:
    """Sum of every finite sample of each wanted metric name (labels dropped: one model per server)."""
    return prometheus.sums(text, wanted)


@dataclass(frozen=True, slots=True)
class ServerCounters:
    prefix_cache_hit_rate: float | None
    kv_cache_usage_max: float | None
    preemptions: int | None


class Sampler(threading.Thread):
    """Reads /metrics every `interval_s` while the run lasts: the peak KV usage, and the counters at both ends."""

    def __init__(self, fetch: Callable[[], str], interval_s: float = 2.0) -> None:
        super().__init__(name="bench-metrics", daemon=True)
        self.fetch = fetch
        self.interval_s = interval_s
        self.done = threading.Event()
        self.start_values = parse(fetch())
        self.last_values = self.start_values
        usage = first(self.start_values, KV_USAGE)
        self.kv_max: float | None = usage if usage is not None and 0.0 <= usage <= 1.0 else None

    def run(self) -> None:
        while not self.done.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        values = parse(self.fetch())
        if not values:
            return
        self.last_values = values
        usage = first(values, KV_USAGE)
        if usage is not None and 0.0 <= usage <= 1.0:
            self.kv_max = usage if self.kv_max is None else max(self.kv_max, usage)

    def finish(self) -> ServerCounters:
        self.done.set()
        self._sample()
        return counters(self.start_values, self.last_values, self.kv_max)


def counters(before: Mapping[str, float], after: Mapping[str, float], kv_max: float | None) -> ServerCounters:
    hits = _delta(before, after, HITS)
    queries = _delta(before, after, QUERIES)
    rate = round(hits / queries, 4) if hits is not None and queries else None
    if rate is None and (gauge := first(after, HIT_RATE_GAUGE)) is not None:
        rate = round(gauge, 4)
    if rate is not None and not 0.0 <= rate <= 1.0:
        rate = None  # more hits than queries, or a counter that went down
    preempted = _delta(before, after, PREEMPTIONS)
    return ServerCounters(rate, round(kv_max, 4) if kv_max is not None else None,
                          int(preempted) if preempted is not None and preempted >= 0 else None)


def _delta(before: Mapping[str, float], after: Mapping[str, float], names: tuple[str, ...]) -> float | None:
    for name in names:
        if name in after:
            return after[name] - before.get(name, 0.0)
    return None
