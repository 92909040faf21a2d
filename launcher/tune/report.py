"""What `tune` concludes and prints: the figures of each candidate at its answer, the winner (only when it beats
the baseline by more than the rounds disagree), the `--json` document (stable keys, docs/tune.md), the table,
and the `--plot` Pareto chart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.tune.cache import Level
from launcher.tune.candidates import Candidate
from launcher.tune.measure import Measured


@dataclass(frozen=True, slots=True)
class Scored:
    """A candidate's outcome with the figures at its answer (the mean over rounds) and their spread."""

    measured: Measured
    figures: Mapping[str, float]
    tps_spread: float  # output tokens/s at the answer: largest minus smallest round

    @property
    def users(self) -> int:
        answer = self.measured.answer
        return answer.users if answer is not None and self.measured.status == "measured" else 0

    @property
    def spread(self) -> int:
        return self.measured.answer.spread if self.measured.answer is not None else 0

    @property
    def tps(self) -> float:
        return self.figures.get("output_tokens_per_s", 0.0)


def score(measured: Measured, levels: Mapping[tuple[int, int], Level]) -> Scored:
    answer = measured.answer
    if answer is None:
        return Scored(measured, {}, 0.0)
    shown = answer.users or 1  # no level met it: the figures of one user say by how much
    at = [levels[(r, shown)] for r in range(len(answer.round_answers)) if (r, shown) in levels]
    if not at:
        return Scored(measured, {}, 0.0)
    if answer.users == 0 and measured.reason is None:
        measured.reason = "1 user already misses the SLO: " + "; ".join(b for level in at[:1] for b in level.broken)
    keys = sorted({k for level in at for k in level.figures})
    figures = {k: round(sum(level.figures.get(k, 0.0) for level in at) / len(at), 3) for k in keys}
    rates = [level.figures.get("output_tokens_per_s", 0.0) for level in at]
    return Scored(measured, figures, round(max(rates) - min(rates), 3) if rates else 0.0)


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: str  # winner, baseline_is_best, no_candidate_meets_slo
    best: Scored | None
    baseline: Scored | None
    summary: str

    def gains(self) -> dict[str, float | None]:
        if self.best is None or self.baseline is None:
            return {"users": None, "output_tokens_per_s": None}
        return {"users": _ratio(self.best.users, self.baseline.users),
                "output_tokens_per_s": _ratio(self.best.tps, self.baseline.tps)}


def decide(scored: Sequence[Scored]) -> Verdict:
    """The most users at the SLO (then the most output tokens/s) wins, if it beats the baseline by more than
    either one's spread between rounds; otherwise the profile as written stays."""
    baseline = next((s for s in scored if s.measured.candidate.baseline), None)
    serving = [s for s in scored if s.users > 0]
    if not serving:
        return Verdict("no_candidate_meets_slo", None, baseline,
                       "no candidate met the SLO with even one user: relax the target or serve a smaller model")
    best = max(serving, key=lambda s: (s.users, s.tps))
    if baseline is None or baseline.users == 0:
        return Verdict("winner", best, baseline, f"{best.measured.candidate.label} serves {best.users} users at the "
                       "SLO; the profile as written serves none")
    if best is baseline:
        return Verdict("baseline_is_best", baseline, baseline, _as_good(baseline))
    more_users = best.users - baseline.users > max(best.spread, baseline.spread)
    faster = best.users >= baseline.users and best.tps - baseline.tps > max(best.tps_spread, baseline.tps_spread)
    if not (more_users or faster):
        return Verdict("baseline_is_best", best, baseline, _as_good(baseline) + (
            f" ({best.measured.candidate.label}: {best.users} users, {best.tps:.1f} tok/s, within the spread "
            "between rounds)"))
    return Verdict("winner", best, baseline, f"{best.measured.candidate.label}: {best.users} users at the SLO "
                   f"against {baseline.users} for the profile as written ({best.tps:.1f} against "
                   f"{baseline.tps:.1f} output tokens/s)")


def _as_good(baseline: Scored) -> str:
    return (f"the profile as written is already as good as any candidate tried: {baseline.users} users at the SLO, "
            f"{baseline.tps:.1f} output tokens/s")


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def candidate_doc(s: Scored) -> dict[str, Any]:
    m = s.measured
    answer = m.answer
    return {
        "label": m.candidate.label, "overrides": dict(m.candidate.overrides), "baseline": m.candidate.baseline,
        "status": m.status, "reason": m.reason,
        "users_at_slo": s.users if m.status == "measured" else None,
        "round_answers": list(answer.round_answers) if answer else [], "spread": s.spread,
        "capped": bool(answer and answer.capped),
        "output_tokens_per_s": s.figures.get("output_tokens_per_s"),
        "output_tokens_per_s_per_user": s.figures.get("output_tokens_per_s_per_user"),
        "ttft_p95_ms": s.figures.get("ttft_p95_ms"), "tpot_p95_ms": s.figures.get("tpot_p95_ms"),
        "output_tokens_per_s_spread": s.tps_spread,
        "levels_measured": m.levels_measured, "levels_reused": m.levels_reused, "rung": m.rung,
    }


def pruned_doc(candidate: Candidate, reason: str) -> dict[str, Any]:
    """A candidate never measured: the same keys, nothing measured in them."""
    return candidate_doc(Scored(Measured(candidate, "pruned", reason=reason), {}, 0.0))


def not_run_doc(candidate: Candidate, reason: str) -> dict[str, Any]:
    return {**pruned_doc(candidate, reason), "status": "not_run"}


def text(doc: Mapping[str, Any]) -> str:
    head = (f"vllm-launch tune: {doc['profile']} (vLLM {doc['vllm_version'] or '?'}, {doc['gpu']}), SLO "
            f"{doc['slo']}; {doc['workload_name']} workload, {doc['requests_per_level']} requests a level, "
            f"{doc['rounds']} round(s), up to {doc['most_users']} users")
    rows = [("candidate", "status", "users@SLO", "out tok/s", "per user", "TTFT p95", "TPOT p95")]
    for c in doc["candidates"]:
        users = "" if c["users_at_slo"] is None else f"{c['users_at_slo']}" + (
            f" ±{c['spread']}" if c["spread"] else "") + ("+" if c["capped"] else "")
        rows.append((c["label"], c["status"], users, _num(c["output_tokens_per_s"]),
                     _num(c["output_tokens_per_s_per_user"]), _ms(c["ttft_p95_ms"]), _ms(c["tpot_p95_ms"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head, *("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)]
    lines += [f"  {c['label']}: {c['reason']}" for c in doc["candidates"] if c["reason"]]
    lines.append(doc["summary"])
    if doc["written"]:
        lines.append(f"wrote {doc['written']}: vllm-launch up {doc['written']}")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.0f} ms"


def plot(points: Sequence[tuple[str, Sequence[Level]]], path: Path) -> None:
    """Per-user against total output tokens/s of every level that met the SLO, one colour per candidate, and
    the Pareto front over all of them (as vLLM's plot_pareto draws it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5))
    front: list[tuple[float, float]] = []
    for label, levels in points:
        met = [(lv.figures.get("output_tokens_per_s_per_user", 0.0), lv.figures.get("output_tokens_per_s", 0.0))
               for lv in levels if lv.met]
        if met:
            axis.scatter([x for x, _ in met], [y for _, y in met], label=label, alpha=0.8)
            front.extend(met)
    pareto = pareto_front(front)
    if pareto:
        axis.plot([x for x, _ in pareto], [y for _, y in pareto], "k--", label="Pareto front")
    axis.set(xlabel="output tokens/s per user", ylabel="output tokens/s in total",
             title="levels that met the SLO")
    axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both axes (per-user and total tokens/s), left to right."""
    return sorted({p for p in points if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in points)})
