"""What `bench` prints: the `--json` document (stable keys, docs/commands.md documents them), the text table, the
side-by-side of `--compare prefix-caching`, and the optional `--plot`. Beside TTFT and TPOT: how many answers came
back as parsed tool calls, and how many left a call as text in content (the agent's health on a real model)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from launcher.bench.runner import Run
from launcher.bench.stats import totals
from launcher.bench.workload import Settings


def document(run: Run, *, target: str, model: str, vllm_version: str | None, settings: Settings) -> dict[str, Any]:
    t = totals(run.results, run.duration_s, settings.users)
    return {
        "target": target, "model": model, "vllm_version": vllm_version,
        "settings": dataclasses.asdict(settings),
        "requests": {"completed": t.completed, "failed": t.failed, "errors": t.errors},
        "ttft_ms": t.ttft_ms, "tpot_ms": t.tpot_ms, "itl_ms": t.itl_ms, "e2el_ms": t.e2el_ms,
        "input_tokens": t.input_tokens, "output_tokens": t.output_tokens,
        "output_tokens_per_s": t.output_tokens_per_s, "output_tokens_per_s_per_user": t.output_tokens_per_s_per_user,
        "requests_per_s": t.requests_per_s,
        "tool_calls": {"answers": t.completed, "parsed": t.answers_with_tool_calls,
                       "as_text": t.answers_with_calls_as_text, "as_text_markup": t.calls_as_text_markup},
        "prefix_cache_hit_rate": run.counters.prefix_cache_hit_rate,
        "kv_cache_usage_max": run.counters.kv_cache_usage_max, "preemptions": run.counters.preemptions,
        "duration_s": t.duration_s, "interrupted": run.interrupted,
    }


def to_json(doc: object) -> str:
    """The document as strict JSON: a number that is not finite becomes null (never NaN or Infinity, which
    JSON has not)."""
    return json.dumps(_finite(doc), indent=2, allow_nan=False)


def _finite(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _ms(stat: Mapping[str, float]) -> str:
    return f"{stat['mean']:.1f} / {stat['p50']:.1f} / {stat['p95']:.1f} / {stat['p99']:.1f}"


def _rows(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    requests = doc["requests"]
    errors = ", ".join(f"{k} {v}" for k, v in requests["errors"].items())
    rate = doc["prefix_cache_hit_rate"]
    kv = doc["kv_cache_usage_max"]
    return [
        ("requests", f"{requests['completed']} completed, {requests['failed']} failed" + (f" ({errors})" if errors else "")),
        ("TTFT ms (mean/p50/p95/p99)", _ms(doc["ttft_ms"])),
        ("TPOT ms", _ms(doc["tpot_ms"])),
        ("answers with tool calls", _tool_calls(doc)),
        ("ITL ms", _ms(doc["itl_ms"])),
        ("E2EL ms", _ms(doc["e2el_ms"])),
        ("tokens in / out", f"{doc['input_tokens']:,} / {doc['output_tokens']:,}"),
        ("output tokens/s", f"{doc['output_tokens_per_s']:.1f} ({doc['output_tokens_per_s_per_user']:.1f} per user)"),
        ("requests/s", f"{doc['requests_per_s']:.3f}"),
        ("prefix-cache hit rate", "not reported" if rate is None else f"{rate:.1%}"),
        ("KV-cache usage, peak", "not reported" if kv is None else f"{kv:.1%}"),
        ("preemptions", "not reported" if doc["preemptions"] is None else str(doc["preemptions"])),
        ("duration", f"{doc['duration_s']:.1f} s" + (" (interrupted)" if doc["interrupted"] else "")),
    ]


def _tool_calls(doc: Mapping[str, Any]) -> str:
    """Parsed and left-as-text calls of all answers: the agent's health beside the latencies."""
    calls = doc["tool_calls"]
    markup = ", ".join(calls["as_text_markup"])
    line = f"{calls['parsed']}/{calls['answers']} parsed, {calls['as_text']} as text" + (f" ({markup})" if markup else "")
    return line + (" (no tools sent)" if doc["settings"].get("tools") == "none" else "")


def text(doc: Mapping[str, Any]) -> str:
    s = doc["settings"]
    head = (f"vllm-launch bench: {doc['model']} at {doc['target']} (vLLM {doc['vllm_version'] or '?'}): "
            f"{s['users']} users, shared prefix {s['shared_prefix']}, +{s['turn_tokens']} tokens a turn, "
            f"max {s['max_tokens']} out, context {s['context']}, tools {s.get('tools', 'agent')}")
    rows = _rows(doc)
    width = max(len(k) for k, _ in rows)
    return "\n".join([head, *(f"  {k.ljust(width)}  {v}" for k, v in rows)])


def compare(with_cache: Mapping[str, Any], without: Mapping[str, Any]) -> tuple[str, dict[str, float | None]]:
    """Both runs side by side, and the ratios: TTFT p50 (off ÷ on: how much faster the first token comes),
    output tokens/s (on ÷ off), and the hit rates."""
    ratios = {
        "ttft_p50_speedup": _ratio(without["ttft_ms"]["p50"], with_cache["ttft_ms"]["p50"]),
        "output_tokens_per_s_ratio": _ratio(with_cache["output_tokens_per_s"], without["output_tokens_per_s"]),
        "hit_rate_with": with_cache["prefix_cache_hit_rate"], "hit_rate_without": without["prefix_cache_hit_rate"],
    }
    on, off = dict(_rows(with_cache)), dict(_rows(without))
    width = max(len(k) for k in on)
    lines = [f"  {'':{width}}  {'prefix caching on':>34}  {'off':>34}"]
    lines += [f"  {k.ljust(width)}  {on[k]:>34}  {off[k]:>34}" for k in on]
    lines.append(f"  TTFT p50: {_fmt(ratios['ttft_p50_speedup'])}× faster with prefix caching; output tokens/s "
                 f"{_fmt(ratios['output_tokens_per_s_ratio'])}×")
    return "\n".join(lines), ratios


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def plot(runs: Sequence[tuple[str, Run]], path: Path) -> None:
    """TTFT and TPOT distributions of each run (matplotlib, the `plot` extra; checked before any run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (ttft_axis, tpot_axis) = plt.subplots(1, 2, figsize=(11, 4))
    for label, run in runs:
        done = [r for r in run.results if r.ok]
        ttft_axis.hist([r.ttft_s * 1000 for r in done], bins=30, alpha=0.6, label=label)
        tpot_axis.hist([(r.latency_s - r.ttft_s) / (r.output_tokens - 1) * 1000 for r in done if r.output_tokens > 1],
                       bins=30, alpha=0.6, label=label)
    ttft_axis.set(title="time to first token", xlabel="ms", ylabel="requests")
    tpot_axis.set(title="time per output token", xlabel="ms")
    for axis in (ttft_axis, tpot_axis):
        axis.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plotting_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True
