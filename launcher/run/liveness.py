"""Is a serving engine making progress? vLLM's own counters, read around a completion probe that failed.

The periodic 1-token completion (`launcher.health.completion_interval`) is an ordinary request: on a busy
server it waits in vLLM's queue behind real work and times out although every slot generates. So a failed
probe only accuses. /metrics read when the probe was sent and again when it failed decides:
- tokens were generated in between: the engine is busy, not wedged; the failure does not count;
- no token was generated while requests ran or waited (our probe is one of them): wedged; it counts;
- /metrics itself stopped answering: the API server is stuck too; it counts;
- /metrics has none of these series (a server without them, or an older vLLM): no evidence either
  way; the rule falls back to counting every failed probe, and says so once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from prometheus_client.parser import text_string_to_metric_families

from launcher.vllm.prometheus import RUNNING, WAITING

# The series vLLM serves (V0 and V1 alike); one value per engine and model, summed here.
GENERATED = "vllm:generation_tokens"  # a counter: the parser names its samples vllm:generation_tokens_total
_WANTED = frozenset({RUNNING, WAITING, GENERATED})
_SAMPLES = frozenset({RUNNING, WAITING, f"{GENERATED}_total"})


@dataclass(frozen=True, slots=True)
class Work:
    """One reading of the engines' work: requests running and waiting, tokens generated so far (summed), and
    the same per engine (vLLM's `engine` label: data-parallel ranks are judged one by one)."""

    running: float
    waiting: float
    generated: float
    engines: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # engine → (queued, generated)

    @property
    def queued(self) -> float:
        return self.running + self.waiting


class Verdict(StrEnum):
    BUSY = "busy"  # tokens flowed while the probe waited: not evidence
    WEDGED = "wedged"  # work queued and no token generated (by the server, or by one of its engines): evidence
    SILENT = "metrics_silent"  # /metrics did not answer: evidence
    IDLE = "idle"  # nothing queued and no token: the probe itself failed (an HTTP error): evidence
    UNKNOWN = "no_metrics"  # the series are absent: today's rule (every failure counts)

    @property
    def counts(self) -> bool:
        """Whether the failed probe counts towards `launcher.health.failures`."""
        return self is not Verdict.BUSY


def parse_work(text: str) -> Work | None:
    """The three series from a Prometheus text, or None when one is missing or the text is not Prometheus."""
    found: dict[str, float] = {}
    per_engine: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            name = GENERATED if family.name == f"{GENERATED}_total" else family.name  # untyped: no TYPE line
            if name not in _WANTED:
                continue
            total = 0.0
            for sample in family.samples:
                if sample.name in _SAMPLES and math.isfinite(sample.value):
                    total += sample.value
                    slot = per_engine.setdefault(str(sample.labels.get("engine", "")), [0.0, 0.0])
                    slot[1 if name == GENERATED else 0] += sample.value
            found[name] = total
    except (ValueError, TypeError, IndexError, KeyError, RecursionError):
        return None  # a server that lies about its metrics gives no evidence
    if found.keys() != _WANTED:
        return None
    engines = MappingProxyType({engine: (queued, generated) for engine, (queued, generated) in per_engine.items()})
    return Work(found[RUNNING], found[WAITING], found[GENERATED], engines)


def judge(before: Work | None, after: Work | None, *, answered: bool, absent: bool) -> Verdict:
    """What a failed probe means, from the readings taken when it was sent (`before`) and when it failed.

    `answered`: /metrics answered the second time; `absent`: it answered without vLLM's series."""
    if not answered:
        return Verdict.SILENT
    if absent or before is None or after is None:
        return Verdict.UNKNOWN
    for engine, (queued, generated) in after.engines.items():
        earlier = before.engines.get(engine)
        if earlier is not None and max(queued, earlier[0]) > 0 and generated <= earlier[1]:
            return Verdict.WEDGED  # this engine holds work and generates nothing, whatever the others do
    if after.generated > before.generated:
        return Verdict.BUSY
    if max(before.queued, after.queued) > 0:
        return Verdict.WEDGED
    return Verdict.IDLE
