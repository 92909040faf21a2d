"""`vllm-launch status`: what each profile's daemon recorded, whether it still runs, its live figures, drift
and advice, as text or JSON. Read-only: it signals nothing and writes nothing.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from launcher.errors import EX_OK, ConfigError
from launcher.observe import advice, drift
from launcher.oneline import one_line
from launcher.procstat import alive
from launcher.run import health
from launcher.run.locks import lock_holder
from launcher.runstate import FINAL_PHASES, Phase, State, read_state
from launcher.safefile import Unreadable
from launcher.statedir import state_root
from launcher.vllm import prometheus
from launcher.vllm.phases import short

READ_GAP_S = 1.0  # between the two /metrics reads of `status`: the window of its latency figures


def profile_dirs(profile: str | None, environ: Mapping[str, str] | None = None) -> list[Path]:
    root = state_root(environ)
    if profile:
        name = Path(profile).stem
        return [root / name]
    if not root.is_dir():
        return []
    # Whatever lies at state.json (a link, a FIFO) is listed, to be read as hostile and named when unreadable.
    return sorted(p for p in root.iterdir() if os.path.lexists(p / "state.json"))


def _alive(pid: object) -> bool:
    """A live process, from a state file's `pid` (which may be anything)."""
    return isinstance(pid, int) and alive(pid)


def daemon_running(directory: Path, found: State) -> bool:
    """The daemon that wrote `found` still runs: it holds the profile's lock (a recorded PID alone may belong
    to someone else now)."""
    return found.pid is not None and lock_holder(directory / "lock") == found.pid and _alive(found.pid)


def status_command(profile: str | None, as_json: bool = False, environ: Mapping[str, str] | None = None,
                   sleep: Callable[[float], None] = time.sleep) -> int:
    reports: list[dict[str, Any]] = []
    for directory in profile_dirs(profile, environ):
        unreadable: list[Unreadable] = []
        found = read_state(directory / "state.json", unreadable.append)
        if found is None:
            if unreadable:  # one line for this profile; the others are listed as they are
                reports.append({"profile": directory.name, "unreadable": f"{unreadable[0]}; ignored"})
            continue
        try:
            running, lock_problem = daemon_running(directory, found), None
        except ConfigError as exc:  # a FIFO or a directory at `lock`: who runs cannot be told
            running, lock_problem = False, str(exc)
        url, url_ignored = drift.metrics_url(found.raw, found.url) if running and found.phase is Phase.SERVING \
            else (None, None)
        texts = _two_reads(url, sleep) if url else []
        live = health.gauges(texts[-1]) if texts else {}
        # Only a live daemon's vLLM is compared: a reload is what applies the difference.
        argv = drift.child_cmdline(found.raw.get("child")) if running else None  # read once: drift and advice
        changed = drift.running_drift(found.raw, argv, environ) if running else None
        figures = [advice.Figures.from_text(t) for t in texts]
        rung = found.raw.get("rung")
        advised = advice.advise(figures[0] if len(figures) == 2 else None, figures[-1] if figures else None,
                                found.capacity, found.decisions, argv, rung if isinstance(rung, dict) else {},
                                time.time(), fp8_kv=found.fp8_kv, restart_window_s=found.restart_window_s,
                                parser_errors=found.tool_parser_errors)
        # `phase` stays what the daemon wrote; `alive` says whether that daemon still runs (`running`: the same,
        # under its older name).
        reports.append({**found.raw, "alive": running, "running": running, "live": live,
                        "drift": None if changed is None or changed.unknown else [d.to_dict() for d in changed.flags],
                        "drift_apply": changed.apply if changed else None,
                        "drift_unknown": changed.unknown if changed else None,
                        "advice": [a.to_dict() for a in advised],
                        **({"lock_unreadable": lock_problem} if lock_problem else {}),
                        **({"url_ignored": url_ignored} if url_ignored else {})})
    if as_json:
        for report in reports:
            if "unreadable" in report:
                print(f"{report['profile']}: {report['unreadable']}", file=sys.stderr)
        readable = [r for r in reports if "unreadable" not in r]
        print(json.dumps(readable if profile is None else (readable[0] if readable else None), indent=2, default=str))
        return EX_OK
    if not reports:
        print(f"no state for {profile or 'any profile'} in {state_root(environ)}")
        return EX_OK
    for data in reports:
        print(_status_text(data))
    return EX_OK


def _status_text(data: Mapping[str, Any]) -> str:
    if "unreadable" in data:
        return f"{data['profile']}: {data['unreadable']}"
    found = State.from_dict(data)
    phase: object = found.phase or data.get("phase")
    if not data.get("alive") and found.phase not in FINAL_PHASES:
        phase = f"dead (last phase: {phase})"
    child = data.get("child")
    child_pid = child.get("pid", "-") if isinstance(child, Mapping) else "-"
    lines = [f"{found.profile}: {phase}  (vllm-launch PID {found.pid}, vLLM PID {child_pid})"]
    if found.url:
        lines.append(f"  url        {found.url}  model {found.served_model_name}")
    if isinstance(tls := found.raw.get("tls"), str):
        lines.append(f"  tls        the server's certificate is {tls[:200]}")
    if data.get("url_ignored"):
        lines.append(f"  note       {data['url_ignored']}")
    rung = data.get("rung_description")
    lines.append(f"  attempt    {found.attempt if found.attempt is not None else '-'}  rung: "
                 f"{rung if isinstance(rung, str) and rung else 'as written'}")
    if found.phases:
        lines.append(f"  start-up   {found.time_to_ready_s if found.time_to_ready_s is not None else '?'}s: "
                     f"{short(dict(found.phases), found.compile_cache, limit=len(found.phases))}")
    for cost in found.attempts[-5:] if len(found.attempts) > 1 or any(a.outcome != "ready" for a in found.attempts) \
            else ():
        spent = f"{cost.seconds:.0f}s" if cost.seconds is not None else "?"
        where = f" ({short(dict(cost.phases))})" if cost.phases else ""
        lines.append(f"  cost       attempt {cost.number} [{one_line(cost.rung)}] {one_line(cost.outcome)}"
                     f"{': ' + one_line(cost.cls) if cost.cls else ''}, {spent}{where}")
    cap = found.capacity
    if cap is not None and cap.kv_tokens is not None and cap.max_model_len:
        lines.append(f"  capacity   {cap.kv_tokens:,} KV tokens, {cap.sessions if cap.sessions is not None else '?'} "
                     f"sessions of {cap.max_model_len:,}")
    live = data.get("live") or {}
    if live:
        usage = prometheus.first(live, prometheus.KV_USAGE)
        lines.append(f"  live       KV usage {usage * 100:.1f} %, running {live.get('vllm:num_requests_running', 0):.0f}, "
                     f"waiting {live.get('vllm:num_requests_waiting', 0):.0f}" if usage is not None else f"  live {live}")
    lines += _drift_lines(data)
    for item in data.get("advice") or []:
        if isinstance(item, Mapping):
            lines.append(f"  advice     {item.get('text')}")
    agent = data.get("agent")
    if isinstance(agent, Mapping) and isinstance(agent.get("verdict"), str):
        lines.append(f"  agent      {one_line(str(agent['verdict']))}: {one_line(str(agent.get('detail') or ''))}"
                     + (f" → {one_line(str(agent['fix']))}" if agent.get("verdict") == "fail" and agent.get("fix")
                        else ""))
    warnings = data.get("warnings")
    for warning in (warnings if isinstance(warnings, list) else [])[-5:]:
        if isinstance(warning, dict) and isinstance(warning.get("text"), str):
            lines.append(f"  warning    attempt {warning.get('attempt')}: {one_line(warning['text'])}")
        elif isinstance(warning, dict):
            lines.append(f"  warning    attempt {warning.get('attempt')}: vLLM logged {warning.get('line')!r} "
                         f"({warning.get('class')}), and went on ({warning.get('why')})")
    for decision in found.decisions[-5:]:
        lines.append(f"  decision   attempt {decision.attempt}: {decision.cls} → {decision.change} ({decision.reason})")
    if found.error:
        lines.append(f"  error      {one_line(found.error, 0)}")  # it may quote a stranger, or be tampered with
    if data.get("lock_unreadable"):
        lines.append(f"  lock       {data['lock_unreadable']}")
    return "\n".join(lines)


def _two_reads(url: str, sleep: Callable[[float], None]) -> list[str]:
    """/metrics read twice, READ_GAP_S apart: counters and histograms over that window (advice). One read
    when the second fails; none when the first does."""
    first = health.metrics_text(url)
    if first is None:
        return []
    sleep(READ_GAP_S)
    second = health.metrics_text(url)
    return [first] if second is None else [first, second]


def _drift_lines(data: Mapping[str, Any]) -> list[str]:
    """Whether the running vLLM runs what the profile file says now (no line when nothing runs)."""
    if data.get("drift_unknown"):
        return [f"  drift      unknown: {data['drift_unknown']}"]
    changed = data.get("drift")
    if not isinstance(changed, list):
        return []
    if not changed:
        return ["  drift      none: vLLM runs what the profile file says"]
    lines = [f"  drift      the profile file changed since vLLM started; apply with: {data.get('drift_apply')}"]
    for item in changed:
        lines.append(f"  drift      {item['flag']}: running {item['running'] or 'unset'}, "
                     f"profile {item['profile'] or 'unset'}")
    return lines
