"""Advice for `status`: what limits the live server, from its /metrics figures and state.json, and the
change that addresses it. Every rule is a pure function of the figures; a rule that the figures do not
show says nothing.

Two reads of /metrics (`before`, `now`) make a window: counters and histograms are read as the difference
between them. With one read, the latency figures are cumulative since vLLM started, and say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from launcher.runstate import Capacity, Decision
from launcher.vllm import prometheus

PREEMPTIONS = "vllm:num_preemptions_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
# (queries, hits) as vLLM named them, newest first: V1 before 0.10 exported only the gpu_ pair, 0.10 both
# (the gpu_ pair marked deprecated). One pair is read, never both: in 0.10 they count the same tokens.
PREFIX_COUNTERS = ((PREFIX_QUERIES, PREFIX_HITS),
                   ("vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"))
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
TTFT = ("vllm:time_to_first_token_seconds",)
# The time between two output tokens; vLLM 0.2x renamed it, the newest name first.
TPOT = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")

KV_SATURATED = 0.90  # usage at or above this, with requests waiting: the KV cache is full
KV_LOW = 0.50  # usage below this, with requests waiting: the batch limit holds them back, not the KV cache
PREFIX_LOW = 0.10  # hit rate below this...
PREFIX_MIN_QUERIES = 1000  # ...over at least this many queried tokens (a few prompts say nothing)
UTILIZATION_TARGET = 0.95  # what the KV advice proposes; vLLM needs some memory outside its budget
SIXTEEN_BIT_KV = frozenset({"auto", "bfloat16", "float16", "half"})
# vLLM's defaults when neither the rung nor the command line sets them (V1 engine; they vary by GPU and
# usage context, so they read as "default", never as a number).
DEFAULT = "default"
RESTART_WINDOW_S = 3600.0  # launcher.restart.window's default, for a state.json that does not record the profile's


@dataclass(frozen=True, slots=True)
class Figures:
    """One read of vLLM's /metrics: the gauges, counters and histograms the rules use."""

    kv_usage: float | None = None
    running: float = 0.0
    waiting: float = 0.0
    preemptions: float = 0.0
    prefix_queries: float = 0.0
    prefix_hits: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    ttft: Mapping[float, float] = field(default_factory=dict)
    tpot: Mapping[float, float] = field(default_factory=dict)

    @classmethod
    def from_text(cls, text: str) -> Figures:
        wanted = {*prometheus.KV_USAGE, prometheus.RUNNING, prometheus.WAITING, PREEMPTIONS,
                  *(name for pair in PREFIX_COUNTERS for name in pair), PROMPT_TOKENS, GENERATION_TOKENS}
        values = prometheus.sums(text, wanted)
        queries, hits = next((pair for pair in PREFIX_COUNTERS if pair[0] in values), PREFIX_COUNTERS[0])
        tpot = next((b for b in (prometheus.buckets(text, name) for name in TPOT) if b), {})
        return cls(kv_usage=prometheus.first(values, prometheus.KV_USAGE),
                   running=values.get(prometheus.RUNNING, 0.0), waiting=values.get(prometheus.WAITING, 0.0),
                   preemptions=values.get(PREEMPTIONS, 0.0), prefix_queries=values.get(queries, 0.0),
                   prefix_hits=values.get(hits, 0.0), prompt_tokens=values.get(PROMPT_TOKENS, 0.0),
                   generation_tokens=values.get(GENERATION_TOKENS, 0.0), ttft=prometheus.buckets(text, TTFT[0]), tpot=tpot)


@dataclass(frozen=True, slots=True)
class Advice:
    """One line of advice: the rule that fired, `severity` ("limit": something holds the server back;
    "info": figures to read), the numbers behind it and the change that addresses it (None: figures only)."""

    rule: str
    severity: str
    numbers: dict[str, Any]
    change: str | None
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "numbers": self.numbers, "change": self.change,
                "text": self.text}


def _window(before: Mapping[float, float], now: Mapping[float, float]) -> dict[float, float]:
    """The observations between two reads of a cumulative histogram (a restart in between resets it: then
    the later read alone)."""
    delta = {bound: count - before.get(bound, 0.0) for bound, count in now.items()}
    return dict(now) if any(v < 0 for v in delta.values()) else delta


def flag(argv: Sequence[str] | None, rung: Mapping[str, Any], name: str) -> str | None:
    """The value of --NAME: the rung in force first (the ladder changed it), else the running command line."""
    if name in rung and rung[name] is not None:
        return str(rung[name])
    for i, arg in enumerate(argv or ()):
        if arg == f"--{name}":
            return argv[i + 1] if argv is not None and i + 1 < len(argv) and not argv[i + 1].startswith("--") else "on"
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def kv_saturated(before: Figures | None, now: Figures, capacity: Capacity | None,
                 fp8_kv: bool | None = None) -> Advice | None:
    """The KV cache is the limit: usage ≥ 90 % with requests waiting, or preemptions rising between reads.
    `fp8_kv`: whether every GPU of the run stores an FP8 KV cache (compute capability ≥ 8.9; None: unknown)."""
    preempted = now.preemptions - before.preemptions if before is not None else 0.0
    usage = now.kv_usage
    if not ((usage is not None and usage >= KV_SATURATED and now.waiting > 0) or preempted > 0):
        return None
    numbers: dict[str, Any] = {"kv_usage": usage, "waiting": now.waiting, "preemptions_in_window": preempted}
    options: list[str] = []
    cap = capacity or Capacity()
    tokens, length, util = cap.kv_tokens, cap.max_model_len, cap.utilization
    numbers.update(kv_tokens=tokens, max_model_len=length, sessions=cap.sessions, utilization=util,
                   kv_cache_dtype=cap.kv_cache_dtype)
    if tokens and util and util < UTILIZATION_TARGET:
        # Tokens scale with the KV budget; the budget is taken as proportional to the utilization. The weights
        # do not grow with it, so the real gain is larger: this is a floor.
        more = int(tokens * UTILIZATION_TARGET / util)
        numbers["kv_tokens_at_target_utilization"] = more
        options.append(f"gpu-memory-utilization {util:g} → {UTILIZATION_TARGET:g}: ≥ {more:,} KV tokens "
                       f"({tokens:,} × {UTILIZATION_TARGET:g}/{util:g})")
    if tokens and (cap.kv_cache_dtype or "auto") in SIXTEEN_BIT_KV and fp8_kv is not False:
        # FP8 stores a token in half the bytes of a 16-bit cache: twice the tokens in the same budget.
        numbers["kv_tokens_with_fp8"] = tokens * 2
        options.append(f"kv-cache-dtype fp8: {tokens * 2:,} KV tokens ({tokens:,} × 2"
                       + (")" if fp8_kv else "; on a GPU without FP8 KV, compute capability < 8.9, the preflight "
                          "keeps auto)"))
    if tokens and length and length > 1:
        # The tokens stay; shorter sessions fit more of them: sessions = kv_tokens / max-model-len.
        half = length // 2
        numbers["sessions_at_half_max_model_len"] = round(tokens / half, 2)
        options.append(f"max-model-len {length:,} → {half:,}: {tokens / half:.2f} full sessions "
                       f"(now {tokens / length:.2f})")
    seen = (f"KV usage {usage * 100:.1f} %" if usage is not None else "KV usage unknown") + \
        f", {now.waiting:.0f} waiting" + (f", {preempted:.0f} preemptions since the last read" if preempted else "")
    change = "; or ".join(options) if options else "raise gpu-memory-utilization, use an FP8 KV cache or lower max-model-len"
    return Advice("kv_cache_saturated", "limit", numbers, change, f"the KV cache is the limit ({seen}): {change}")


def batch_limited(now: Figures, argv: Sequence[str] | None, rung: Mapping[str, Any]) -> Advice | None:
    """Requests wait while the KV cache has room: the batch limits (max-num-seqs, max-num-batched-tokens) hold
    them back."""
    if now.waiting <= 0 or now.kv_usage is None or now.kv_usage >= KV_LOW:
        return None
    seqs = flag(argv, rung, "max-num-seqs") or DEFAULT
    batched = flag(argv, rung, "max-num-batched-tokens") or DEFAULT
    numbers = {"kv_usage": now.kv_usage, "running": now.running, "waiting": now.waiting, "max_num_seqs": seqs,
               "max_num_batched_tokens": batched}
    change = (f"raise max-num-seqs (now {seqs}; {now.running:.0f} running) or max-num-batched-tokens "
              f"(now {batched})")
    return Advice("batch_limited", "limit", numbers, change,
                  f"requests wait while the KV cache has room (KV usage {now.kv_usage * 100:.1f} %, "
                  f"{now.running:.0f} running, {now.waiting:.0f} waiting): {change}")


def prefix_cache_low(before: Figures | None, now: Figures, argv: Sequence[str] | None,
                     rung: Mapping[str, Any]) -> Advice | None:
    """Few prompt tokens come from the prefix cache. Whether prompts share a prefix the server cannot tell:
    the line says whether caching is on, and what helps when they do."""
    queries = now.prefix_queries - (before.prefix_queries if before else 0.0)
    hits = now.prefix_hits - (before.prefix_hits if before else 0.0)
    if queries < 0 or hits < 0:  # vLLM restarted between the reads: its counters alone
        queries, hits = now.prefix_queries, now.prefix_hits
    if queries < PREFIX_MIN_QUERIES or hits / queries >= PREFIX_LOW:
        return None
    off = flag(argv, rung, "no-enable-prefix-caching") is not None or flag(argv, rung, "enable-prefix-caching") in (
        "false", "False", "0")
    state = "off" if off else ("on" if flag(argv, rung, "enable-prefix-caching") else "on (vLLM's default)")
    numbers = {"hits": hits, "queries": queries, "hit_rate": round(hits / queries, 4), "prefix_caching": state}
    change = ("enable prefix caching (drop --no-enable-prefix-caching) if prompts share a prefix" if off else
              "caching is on: if prompts share a prefix, send it first and byte-identical (system prompt, tools)")
    return Advice("prefix_cache_low", "info", numbers, change,
                  f"prefix cache hit rate {hits / queries * 100:.1f} % ({hits:,.0f} of {queries:,.0f} prompt tokens; "
                  f"prefix caching {state}): {change}")


def latency(before: Figures | None, now: Figures) -> Advice | None:
    """TTFT and TPOT p50/p95: over the window between the reads, else cumulative since vLLM started."""
    ttft = _window(before.ttft, now.ttft) if before else dict(now.ttft)
    tpot = _window(before.tpot, now.tpot) if before else dict(now.tpot)
    figures = {f"{name}_{label}_s": prometheus.quantile(counts, q) for name, counts in (("ttft", ttft), ("tpot", tpot))
               for label, q in (("p50", 0.5), ("p95", 0.95))}
    if all(v is None for v in figures.values()):
        return None
    over = "between the two reads" if before else "one read: cumulative since vLLM started"
    numbers: dict[str, Any] = {**figures, "window": "reads" if before else "cumulative"}

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:.0f} ms"

    return Advice("latency", "info", numbers, None,
                  f"TTFT p50 {ms(figures['ttft_p50_s'])} p95 {ms(figures['ttft_p95_s'])}, TPOT p50 "
                  f"{ms(figures['tpot_p50_s'])} p95 {ms(figures['tpot_p95_s'])} ({over})")


def restarts(decisions: Sequence[Decision], now: float, window_s: float = RESTART_WINDOW_S) -> Advice | None:
    """Restarts of a dead engine within the restart window, and the time since the last one."""
    times = sorted(d.time for d in decisions if d.cls == "engine_dead")
    if not times:
        return None
    recent = [t for t in times if now - t < window_s]
    since = now - times[-1]
    numbers = {"restarts_in_window": len(recent), "window_s": window_s, "since_last_restart_s": round(since, 1)}
    return Advice("restarts", "info", numbers, None,
                  f"{len(recent)} restart(s) in the last {window_s / 3600:g} h; the last {_ago(since)} ago")


def tool_parser_errors(count: int | None, parser: str | None) -> Advice | None:
    """vLLM logged that its tool-call parser could not read answers: agents got text where they needed calls."""
    if not count:
        return None
    return Advice("tool_parser", "limit", {"tool_parser_errors": count, "tool_call_parser": parser},
                  "vllm.tool-call-parser",
                  f"vLLM logged {count} tool-call parser error(s) since it started (\"Error in extracting tool call\"): "
                  f"the model writes calls that {parser or 'the parser'} cannot read, so agents get them as text; set "
                  "vllm.tool-call-parser to the parser of this model's family (docs/agent-parsers.md, `vllm-launch "
                  "plan` names it)")


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def advise(before: Figures | None, now: Figures | None, capacity: Capacity | None, decisions: Sequence[Decision],
           argv: Sequence[str] | None, rung: Mapping[str, Any], clock: float, *, fp8_kv: bool | None = None,
           restart_window_s: float | None = None, parser_errors: int | None = None) -> list[Advice]:
    """Every rule the figures show, limits first. `fp8_kv` and `restart_window_s` are what state.json recorded
    of the GPU and the profile (None: not recorded)."""
    found: list[Advice | None] = []
    if now is not None:
        found += [kv_saturated(before, now, capacity, fp8_kv), batch_limited(now, argv, rung),
                  prefix_cache_low(before, now, argv, rung), latency(before, now)]
    found.append(tool_parser_errors(parser_errors, flag(argv, rung, "tool-call-parser")))
    found.append(restarts(decisions, clock, restart_window_s or RESTART_WINDOW_S))
    return [a for a in found if a is not None]
