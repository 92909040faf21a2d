"""Human-readable output of `plan` and `diagnose` (the JSON forms are the stable interface)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from launcher.plan.problems import Severity
from launcher.units import GIB
from launcher.vllm.signatures import OK

if TYPE_CHECKING:
    from launcher.plan.problems import PreflightResult
    from launcher.plan.report import PlanReport
    from launcher.vllm.diagnosis import Diagnosis


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def _rows(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)


def plan_text(report: PlanReport) -> str:
    p, cap, plan = report.profile, report.capacity, report.plan
    lines = [f"Plan for {p.source}: {p.model} as {plan.served_model_name!r}"]
    rows = [
        ("vLLM", f"{report.version.version} ({report.version_source}); flags checked against the "
                 f"{report.catalog.source} list of {report.catalog.version}"),
        ("GPU", report.gpu.describe() if report.gpu else "none found"),
        ("utilization", str(plan.utilization or f"{report.version.default_utilization} (vLLM default)")),
        ("kv-cache-dtype", plan.kv_cache_dtype),
    ]
    if cap is not None:
        rows += [
            ("weights", f"{_gib(cap.weights_bytes)} ({cap.weights_bytes / 1e9:.1f} GB), "
                        f"{_gib(cap.weights_per_gpu_bytes)} per GPU"),
            ("budget", f"{_gib(cap.budget_bytes)} per GPU (utilization × total)"),
            ("reserve", f"activation {_gib(cap.activation_bytes)}, non-torch {_gib(cap.non_torch_bytes)}, "
                        f"CUDA graphs {_gib(cap.cudagraph_bytes)}"),
            ("KV cache", f"{_gib(max(cap.kv_budget_bytes, 0))} per GPU at {cap.kv_bytes_per_token:,} B/token"
                         f"{'' if cap.kv_bytes_exact else ' (approximate)'}"),
            ("KV tokens", f"{cap.kv_tokens:,} (±{cap.error_range:.0%}: {cap.kv_tokens_low:,}–{cap.kv_tokens_high:,}; "
                          + ("the measured error of such estimates)" if cap.basis == "estimated" else f"{cap.basis})")),
            ("sessions", f"{cap.full_sessions} full sessions of {cap.max_model_len:,} tokens "
                         f"({cap.sessions:.2f}x concurrency; {cap.sessions_low:.2f}–{cap.sessions_high:.2f} "
                         "within the range)"),
            ("verdict", cap.verdict),
        ]
        if p.launcher.require.min_sessions is not None:
            met = "met" if cap.sessions >= p.launcher.require.min_sessions else "NOT met"
            rows.append(("require", f"min_sessions {p.launcher.require.min_sessions:g}: {met}"))
    lines.append(_rows(rows))
    if report.changes:
        lines.append("Preflight changed:")
        lines += [f"  - {c}" for c in report.changes]
    if report.problems:
        lines.append("Checks:")
        lines += [f"  {pr.severity.upper():7s} {pr.code}: {pr.message} → {pr.fix}" for pr in report.problems]
    ladder = p.launcher.ladder
    rungs = ", ".join(str(r) for r in ladder.utilization_rungs) or "none (utilization is never changed)"
    lines.append("Ladder:")
    lines.append(f"  startup_memory → next lower utilization rung: {rungs}")
    lines.append(f"  fp8_unsupported → kv-cache-dtype auto: {'allowed' if ladder.drop_fp8_kv_if_unsupported else 'no'}")
    lines.append("  kv_insufficient → max-model-len := vLLM's estimate, down to "
                 f"{ladder.min_model_len if ladder.min_model_len else 'never (no min_model_len)'}")
    lines.append(f"  at most {p.launcher.max_attempts} attempts; config errors stop at once (exit 78)")
    lines.append("Command:")
    lines.append("  " + " ".join(shlex.quote(a) for a in plan.argv))
    env_keys = sorted(plan.env) + [f"{k} (secret)" for k in plan.secret_env_keys]
    lines.append(f"Environment: {', '.join(env_keys)}")
    warnings = list(report.warnings) + (list(cap.warnings) if cap else [])
    if warnings:
        lines.append("Warnings:")
        lines += [f"  - {w}" for w in warnings]
    if cap is not None:
        lines.append("Assumptions: " + "; ".join(cap.assumptions) + ". The live log's numbers replace these.")
    return "\n".join(lines)


def diagnosis_text(d: Diagnosis, remedy: str, source: str) -> str:
    title = {"ok": "no failure found"}.get(d.cls, d.cls + (f" ({d.reason})" if d.reason else ""))
    rows = [("class", title), ("server", d.state)]
    if d.root_cause:
        where = f" (line {d.line_number})" if d.line_number else ""
        rows.append(("root cause", d.root_cause[:400] + where))
    for key, value in d.numbers.items():
        shown = ", ".join(value) if key == "valid_tool_parsers" else value
        rows.append((key, f"{shown:,}" if isinstance(shown, int) and not isinstance(shown, bool) else str(shown)))
    if d.evidence and d.cls != OK:
        rows.append(("evidence", _EVIDENCE.get(d.evidence, d.evidence)))
    for warning in d.warnings:
        rows.append(("survived", warning[:300]))
    rows.append(("remedy", remedy))
    return f"Diagnosis of {source}\n{_rows(rows)}"


# How the verdict was reached (Diagnosis.evidence), in words.
_EVIDENCE = {
    "traceback": "a traceback ends in this failure",
    "same_class": "a later line of the same failure",
    "engine_start_failed": "vLLM's own line that the engine failed to start",
    "accused": "the log ends on this line (live, the launcher waits for the process to confirm it)",
    "log_end": "the log ends in this exception",
    "no_startup": "error lines and no sign that vLLM started",
    "exit": "vLLM exited after the line",
    "engine_exited": "vLLM's engine exited after the line",
    "no_progress": "no progress within launcher.confirm_window after the line",
}


def preflight_text(result: PreflightResult) -> str:
    """Devices, problems and changes as a readable table."""
    inv = result.inventory
    head = [f"GPUs ({inv.source}" + (f", driver {inv.driver_version}" if inv.driver_version else "")
            + (f", CUDA {inv.cuda_driver_version}" if inv.cuda_driver_version else "") + ")"]
    if inv.devices:
        head.append(f"  {'idx':>3}  {'name':<28} {'CC':>4}  {'used':>6}  {'free':>6}  {'total':>6} GiB  processes")
        for d in inv.devices:
            cc = f"{d.cc[0]}.{d.cc[1]}" if d.cc else "?"
            mark = " " if d.index in inv.visible else "-"  # not visible to vLLM
            procs = ", ".join(f"{p.pid} {p.name or '?'}" + (f" {p.used_bytes / GIB:.2f} GiB" if p.used_bytes else "")
                              for p in d.processes) or "-"
            head.append(f" {mark}{d.index:>3}  {d.name[:28]:<28} {cc:>4}  {d.used_bytes / GIB:6.2f}  "
                        f"{d.free_bytes / GIB:6.2f}  {d.total_bytes / GIB:6.2f}      {procs}")
    head += [f"  note: {n}" for n in inv.notes]
    lines = head
    if result.problems:
        lines.append("Problems:")
        for p in result.problems:
            lines.append(f"  {p.severity.upper():7s} {p.code}: {p.message}")
            lines.append(f"          fix: {p.fix}")
    if result.changes:
        lines.append("Changes:")
        lines += [f"  - {c}" for c in result.changes]
    errors = sum(p.severity is Severity.ERROR for p in result.problems)
    warnings = len(result.problems) - errors
    verdict = "BLOCKED" if result.blocking else "OK"
    lines.append(f"preflight: {verdict} ({errors} error{'s' if errors != 1 else ''}, "
                 f"{warnings} warning{'s' if warnings != 1 else ''})")
    return "\n".join(lines)
