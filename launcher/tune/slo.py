"""The latency target `tune` holds every candidate to: `--slo 'ttft_p95<=2s,tpot_p95<=80ms,user_tok_s>=20'`.

A term is METRIC_STAT OP LIMIT. METRIC is one of bench's request timings (ttft, tpot, itl, e2el: vLLM's
own definitions, launcher/bench/stats.py) at a STAT of mean, p50, p95 or p99, with a limit in s, ms or us
(a bare number is ms, as vLLM's benchmark reports them); or `user_tok_s`, the output tokens per second each
user gets (bench's output_tokens_per_s_per_user), with a limit in tokens/s. Latencies take `<=` or `<`,
the rate `>=` or `>`: a target that asks for more latency could never be the point of tuning.

A measured level meets the SLO when every term holds and no request failed: an error is not a fast answer.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from launcher.bench.stats import Totals
from launcher.errors import UsageError

LATENCIES = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "p50", "p95", "p99")
USER_RATE = "user_tok_s"
_UNITS_MS = {"s": 1000.0, "ms": 1.0, "us": 0.001, "": 1.0}
_TERM = re.compile(r"^(?P<name>[a-z0-9_]+)\s*(?P<op><=|>=|<|>)\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[a-z/]*)$")
_OPS: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, "<": operator.lt, ">=": operator.ge,
                                                   ">": operator.gt}
MAX_TEXT = 500  # an SLO is a handful of terms; anything longer is not one
FIX = "write terms such as ttft_p95<=2s,tpot_p95<=80ms,user_tok_s>=20"


@dataclass(frozen=True, slots=True)
class Term:
    metric: str  # ttft, tpot, itl, e2el or user_tok_s
    stat: str  # mean, p50, p95, p99 ("" for user_tok_s)
    op: str
    limit: float  # ms for the latencies, tokens/s for user_tok_s

    @property
    def name(self) -> str:
        return f"{self.metric}_{self.stat}" if self.stat else self.metric

    @property
    def percentile(self) -> float | None:
        return float(self.stat[1:]) if self.stat.startswith("p") else None

    def value(self, totals: Totals) -> float:
        if self.metric == USER_RATE:
            return totals.output_tokens_per_s_per_user
        stats: dict[str, float] = getattr(totals, f"{self.metric}_ms")
        return stats.get(self.stat, math.nan)

    def holds(self, totals: Totals) -> bool:
        measured = self.value(totals)
        return math.isfinite(measured) and _OPS[self.op](measured, self.limit)

    def __str__(self) -> str:
        unit = " tok/s" if self.metric == USER_RATE else " ms"
        return f"{self.name} {self.op} {self.limit:g}{unit}"


@dataclass(frozen=True, slots=True)
class Slo:
    terms: tuple[Term, ...]

    def canonical(self) -> str:
        """One spelling per target (order and units normalised): part of the cache key."""
        return ",".join(f"{t.name}{t.op}{t.limit:g}" for t in sorted(self.terms, key=lambda t: (t.name, t.op)))

    def violations(self, totals: Totals) -> list[str]:
        """What a measured level broke, one phrase each with the number; empty when it meets the SLO."""
        broken = [f"{t.name} {t.value(totals):.1f} (target {t.op} {t.limit:g})" for t in self.terms
                  if not t.holds(totals)]
        if totals.failed:
            broken.append(f"{totals.failed} failed requests ({', '.join(sorted(totals.errors))})")
        if not totals.completed:
            broken.append("no request completed")
        return broken

    def __str__(self) -> str:
        return ", ".join(str(t) for t in self.terms)


def parse(text: str) -> Slo:
    """The --slo text as terms, or UsageError naming the term that is wrong and how to write it."""
    if len(text) > MAX_TEXT:
        raise UsageError(f"--slo: {len(text)} characters is not a latency target; {FIX}")
    pieces = [p.strip() for p in text.split(",")]
    if not any(pieces):
        raise UsageError(f"--slo is empty; {FIX}")
    terms: list[Term] = []
    for piece in pieces:
        term = _term(piece, text)
        if any(t.name == term.name and t.op[0] == term.op[0] for t in terms):
            raise UsageError(f"--slo {text!r}: {term.name} is given twice; keep one bound per figure")
        terms.append(term)
    return Slo(tuple(terms))


def _term(piece: str, text: str) -> Term:
    where = f"--slo {text!r}: term {piece!r}"
    match = _TERM.match(piece.lower())
    if match is None:
        raise UsageError(f"{where} is not NAME<=LIMIT; {FIX}")
    name, op, unit = match["name"], match["op"], match["unit"]
    number = float(match["number"])
    if name == USER_RATE:
        if op not in (">=", ">"):
            raise UsageError(f"{where}: {USER_RATE} is a floor (tokens/s each user gets): write {USER_RATE}>=N")
        if unit not in ("", "tok/s"):
            raise UsageError(f"{where}: {USER_RATE} is in tokens/s; write {USER_RATE}>={number:g}")
        return Term(USER_RATE, "", op, number)
    metric, _, stat = name.partition("_")
    if metric not in LATENCIES or stat not in STATS:
        raise UsageError(f"{where}: unknown figure {name!r}; use one of {', '.join(LATENCIES)} with _mean, _p50, "
                         f"_p95 or _p99 (e.g. ttft_p95), or {USER_RATE}")
    if op not in ("<=", "<"):
        raise UsageError(f"{where}: a latency target is a ceiling; write {name}<={number:g}{unit}")
    if unit not in _UNITS_MS:
        raise UsageError(f"{where}: unknown unit {unit!r}; use s, ms or us")
    limit = number * _UNITS_MS[unit]
    if limit <= 0:
        raise UsageError(f"{where}: a latency target of 0 can never be met")
    return Term(metric, stat, op, limit)


MIN_REQUESTS = 16
BEYOND = 2  # measured requests that must lie at or beyond the highest percentile a term asks for


def requests_needed(slo: Slo) -> int:
    """Requests one level is measured over so that each percentile the SLO names rests on measurements:
    at least BEYOND of them at or past the highest percentile (p95: 40, p99: 200), and never fewer than
    MIN_REQUESTS (a mean or a median over a handful of requests is noise)."""
    highest = max((t.percentile for t in slo.terms if t.percentile is not None), default=50.0)
    return max(MIN_REQUESTS, math.ceil(BEYOND / (1 - highest / 100)))
