"""vLLM's Prometheus series: their names across versions, and one tolerant reading of a /metrics text.

The text comes from a server the launcher does not control: prometheus_client's parser reads it, one
wanted line at a time, so a junk line costs only itself, and a value that is not a finite number
(NaN, ±Inf) is no figure to add up.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

# The KV-cache usage gauge (0-1); vLLM renamed it, the newest name first.
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
# The requests each engine runs and holds in its queue (V0 and V1 alike).
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


def _samples(text: str, prefixes: tuple[str, ...]) -> Iterator[Sample]:
    """The finite samples of the lines that start with one of `prefixes`; a line that is not a sample is
    skipped. Only those lines are parsed: the benchmark reads /metrics beside the requests it measures and
    must hold the GIL briefly."""
    for line in text.splitlines():
        if not line.startswith(prefixes):
            continue
        try:
            samples = [sample for family in text_string_to_metric_families(line) for sample in family.samples]
        except (ValueError, TypeError, IndexError, KeyError, RecursionError):
            continue  # not a sample line
        yield from (sample for sample in samples if math.isfinite(sample.value))


def sums(text: str, wanted: Collection[str]) -> dict[str, float]:
    """The sum of the finite samples of each sample name that starts with a wanted name (labels dropped:
    one model per server)."""
    found: dict[str, float] = {}
    for sample in _samples(text, tuple(wanted)):
        found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return found


def first(values: Mapping[str, float], names: Collection[str]) -> float | None:
    """The value of the first of `names` present: a series vLLM renamed, newest name first."""
    return next((values[n] for n in names if n in values), None)


def buckets(text: str, name: str) -> dict[float, float]:
    """The cumulative bucket counts of histogram `name` by upper bound (`le`, +Inf included), summed over
    the other labels (engines); {} when the server does not export it."""
    prefix = f"{name}_bucket"
    found: dict[float, float] = {}
    for sample in _samples(text, (prefix,)):
        try:
            bound = float(sample.labels.get("le", ""))
        except ValueError:
            continue
        if sample.name == prefix:
            found[bound] = found.get(bound, 0.0) + sample.value
    return found


def quantile(counts: Mapping[float, float], q: float) -> float | None:
    """The q-quantile of a cumulative histogram, as Prometheus' histogram_quantile reckons it: linear
    within the bucket that holds the rank; a rank in the +Inf bucket reads as the highest finite bound.
    None with no observations."""
    bounds = sorted(counts)
    total = counts[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = counts[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = bound, count
    return lower
