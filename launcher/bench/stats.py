"""The statistics of a run, with `vllm bench serve`'s definitions so the two compare number for number.

Per request: TTFT (first streamed content), E2EL (last byte), TPOT = (E2EL − TTFT) / (output tokens − 1)
for requests with more than one output token, then the mean over requests; ITL = every gap between two
streamed chunks, pooled over all requests. Percentiles interpolate linearly between order statistics
(numpy's default, which vLLM's benchmark uses). The agent's health beside them: of the completed answers,
how many carried a parsed tool call and how many a call left as text in content.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

PERCENTILES = (50, 95, 99)


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One measured request; times in seconds from its own start."""

    ok: bool
    ttft_s: float = 0.0
    latency_s: float = 0.0
    itl_s: tuple[float, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None  # the error kind, for failed requests
    cached_tokens: int | None = None  # prompt tokens the server served from its prefix cache, when it says
    tool_calls: int = 0  # tool calls vLLM's parser read out of the answer (delta.tool_calls)
    calls_as_text: str | None = None  # no parsed call, but this parser family's markup in content: a call left as text


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between the two nearest ranks (numpy.percentile's default)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary_ms(values_s: Sequence[float]) -> dict[str, float]:
    """{mean, p50, p95, p99} in milliseconds (zeros for no values, as vLLM's benchmark reports them)."""
    ms = [v * 1000 for v in values_s]
    out = {"mean": sum(ms) / len(ms) if ms else 0.0}
    out.update({f"p{q}": percentile(ms, q) for q in PERCENTILES})
    return {k: round(v, 3) for k, v in out.items()}


@dataclass
class Totals:
    """What a run adds up to: the `--json` document's measured keys."""

    completed: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    ttft_ms: dict[str, float] = field(default_factory=dict)
    tpot_ms: dict[str, float] = field(default_factory=dict)
    itl_ms: dict[str, float] = field(default_factory=dict)
    e2el_ms: dict[str, float] = field(default_factory=dict)
    output_tokens_per_s: float = 0.0
    output_tokens_per_s_per_user: float = 0.0
    requests_per_s: float = 0.0
    duration_s: float = 0.0
    answers_with_tool_calls: int = 0  # completed requests whose answer carried a parsed tool call
    answers_with_calls_as_text: int = 0  # completed requests with a call left in content as markup
    calls_as_text_markup: dict[str, int] = field(default_factory=dict)  # those, per parser family whose markup it was


def totals(results: Sequence[RequestResult], duration_s: float, users: int) -> Totals:
    done = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    errors: dict[str, int] = {}
    for r in failed:
        errors[r.error or "error"] = errors.get(r.error or "error", 0) + 1
    tpots = [(r.latency_s - r.ttft_s) / (r.output_tokens - 1) for r in done if r.output_tokens > 1]
    output = sum(r.output_tokens for r in done)
    markup: dict[str, int] = {}
    for r in done:
        if r.calls_as_text is not None:
            markup[r.calls_as_text] = markup.get(r.calls_as_text, 0) + 1
    per_s = output / duration_s if duration_s > 0 else 0.0
    return Totals(
        completed=len(done), failed=len(failed), errors=errors,
        input_tokens=sum(r.input_tokens for r in done), output_tokens=output,
        ttft_ms=summary_ms([r.ttft_s for r in done]), tpot_ms=summary_ms(tpots),
        itl_ms=summary_ms([gap for r in done for gap in r.itl_s]), e2el_ms=summary_ms([r.latency_s for r in done]),
        output_tokens_per_s=round(per_s, 3), output_tokens_per_s_per_user=round(per_s / max(users, 1), 3),
        requests_per_s=round(len(done) / duration_s, 4) if duration_s > 0 else 0.0, duration_s=round(duration_s, 3),
        answers_with_tool_calls=sum(1 for r in done if r.tool_calls), answers_with_calls_as_text=sum(markup.values()),
        calls_as_text_markup=markup,
    )
