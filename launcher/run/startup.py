"""Start-up: attempts until one is ready, and the READY record.

Each attempt (spawn, watch to a verdict, stop) is run/attempt.py's; `ladder.next_step` decides *what*
the next one changes; tenacity decides *when* it starts (no wait after a change the ladder made,
exponential backoff when the same flags are retried).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, stop_when_event_set

from launcher.config.profile import FlagValue
from launcher.errors import LadderExhausted
from launcher.gpu.match import match_gpu
from launcher.plan import calibration
from launcher.run import attempt, ladder, logs, state, supervisor, upkeep
from launcher.run.compilecache import cache_dir, move_compile_cache
from launcher.run.readiness import unchecked_requirement
from launcher.run.retry import Backoff
from launcher.run.session import Ready, Session, Stopped
from launcher.run.supervisor import Child, Ending, EndKind
from launcher.runstate import Capacity, Decision, Phase
from launcher.units import format_duration
from launcher.vllm import command
from launcher.vllm.phases import short

log = structlog.get_logger("vllm_launch")


class AttemptFailed(Exception):
    """One start-up attempt failed; tenacity retries with the ladder's next overrides."""

    def __init__(self, outcome: supervisor.Ending) -> None:
        super().__init__(outcome.detail)
        self.outcome = outcome


RunAttempt = Callable[[Session, Mapping[str, FlagValue | None]], tuple[Ending, Child | None]]


def start(session: Session, overrides: dict[str, FlagValue | None], *, run_attempt: RunAttempt = attempt.run) -> Ready:
    """Attempts until one is ready; returns it (the overrides that worked, its plan and capacity).
    `run_attempt` is one attempt (run/attempt.py); the unit tests replay histories through it."""
    prof = session.profile
    tried: list[Mapping[str, FlagValue | None]] = []
    same_flags = [0]  # the same flags retried in a row (this start's own count)

    policy = prof.launcher.restart
    # No wait after a change the ladder made (it resets the count); backoff when the same flags are retried.
    wait = Backoff(policy.backoff_min_s, policy.backoff_max_s).wait(lambda: same_flags[0])

    def sleep(seconds: float) -> None:
        session.wait(seconds)  # a signal ends the backoff at once; the watchdog is pinged meanwhile

    def log_backoff(retry_state: RetryCallState) -> None:
        sleep = retry_state.next_action.sleep if retry_state.next_action else 0.0
        if sleep:
            log.info("attempt.backoff", seconds=sleep, attempt=retry_state.attempt_number)
            session.notify(STATUS=f"backoff {sleep:.0f}s before attempt {retry_state.attempt_number + 1}")

    retrying = Retrying(
        stop=stop_after_attempt(prof.launcher.max_attempts) | stop_when_event_set(session.stop),
        wait=wait, sleep=sleep,
        retry=retry_if_exception_type(AttemptFailed), reraise=True, before_sleep=log_backoff)
    try:
        for retry in retrying:
            with retry:
                if session.stop.is_set():
                    raise Stopped
                outcome, child = run_attempt(session, overrides)
                if child is not None:
                    return _handed_over(session, child, outcome, overrides)
                if outcome.kind is EndKind.STOPPED:
                    raise Stopped
                once = list(session.store.data.get("ladder_once") or [])  # once-per-run steps taken (state)
                step = ladder.next_step(prof, overrides, outcome.diagnosis, version=session.vllm.semantics,
                                        free_fraction=session.free_fraction(), tried=tried, done=once)
                if step.once is not None:
                    session.store.update(ladder_once=[*once, step.once])
                if step.once == ladder.MOVE_COMPILE_CACHE:
                    move_compile_cache(cache_dir({**session.environ, **prof.env}), outcome.attempt, session.store.update)
                tried.append(dict(overrides))
                same_flags[0] = same_flags[0] + 1 if dict(step.overrides) == overrides else 0
                log.info("ladder.step", attempt=outcome.attempt, failure=outcome.diagnosis.cls,
                         change=step.change, reason=step.reason)
                session.store.record_decision(Decision(outcome.attempt, outcome.diagnosis.cls, step.change, step.reason),
                                              counter="ladder_steps")
                overrides = dict(step.overrides)
                raise AttemptFailed(outcome)
    except (ladder.Stop, ladder.Exhausted) as stop:
        if session.stop.is_set():
            raise Stopped from None
        raise type(stop)(f"{stop} — attempts: {session.attempts_summary()}") from None
    except AttemptFailed:
        if session.stop.is_set():
            raise Stopped from None
        raise LadderExhausted(f"no attempt became ready within launcher.max_attempts "
                              f"({prof.launcher.max_attempts}) — attempts: {session.attempts_summary()}") from None
    raise Stopped  # tenacity stopped because the stop event is set


def _handed_over(session: Session, child: Child, outcome: Ending, overrides: Mapping[str, FlagValue | None]) -> Ready:
    """The ready attempt's child is the run's from here: stopped at once should recording READY fail."""
    try:
        return _ready(session, child, child.plan, outcome, overrides)
    except BaseException:
        upkeep.stop(session, child, supervisor.FAILED_ATTEMPT_GRACE_S)
        raise


def _ready(session: Session, child: supervisor.Child, plan: command.Plan, outcome: supervisor.Ending,
           overrides: Mapping[str, FlagValue | None]) -> Ready:
    """READY: record the capacity and the rung that worked, tell systemd, print the summary."""
    numbers = outcome.diagnosis.numbers
    length = numbers.get("served_max_model_len") or plan.max_model_len
    tokens = numbers.get("kv_tokens")
    sessions = round(tokens / length, 2) if isinstance(tokens, int) and length else None
    elapsed = time.monotonic() - child.started
    capacity = Capacity(tokens if isinstance(tokens, int) else None, length, sessions,
                        numbers.get("max_concurrency"), numbers.get("available_kv_gib"), plan.kv_cache_dtype,
                        plan.utilization)
    session.store.update(phase=Phase.SERVING, capacity=capacity.to_dict(), ready_at=time.time(),
                         time_to_ready_s=round(elapsed, 1), child=supervisor.describe(child))
    try:
        state.save_lkg(session.store.directory, session.vllm.lkg_key, {"overrides": dict(overrides), "kv_tokens": tokens,
                                                                  "max_model_len": length})
    except OSError as exc:  # a full disk must not end a server that just became ready
        log.warning("last_known_good.not_saved", error=str(exc))
    _record_calibration(session, plan, numbers, length)
    status = "ready"
    if isinstance(tokens, int):
        status = f"ready: {tokens:,} KV tokens, {sessions} sessions of {length:,}, {plan.kv_cache_dtype}"
        if plan.utilization:
            status += f", util {plan.utilization}"
    record = next((a for a in reversed(session.attempts) if a.number == child.attempt), None)
    phases = dict(record.phases) if record is not None else {}
    if phases:  # where the start-up's time went, for `systemctl status` too
        status += f"; {short(phases)}"
    unchecked = unchecked_requirement(session.profile.launcher.require, outcome)
    if unchecked is not None:
        log.warning("ready.require_unchecked", attempt=child.attempt, why=unchecked)
        attempt.warn(session, {"attempt": child.attempt, "text": unchecked})
        status += "; launcher.require NOT checked (no KV figure in vLLM's log)"
    session.notify(READY=1, STATUS=status)
    log.info("ready", attempt=child.attempt, url=plan.base_url, served_model_name=plan.served_model_name,
             kv_tokens=tokens, sessions=sessions, max_model_len=length, time_to_ready_s=round(elapsed, 1),
             overrides=dict(overrides), phases=phases)
    if session.config.console:
        _summary(session, plan, capacity, elapsed, phases)
    return Ready(child.attempt, dict(overrides), plan, capacity, child)


def _record_calibration(session: Session, plan: command.Plan, numbers: Mapping[str, Any], length: int | None) -> None:
    """What vLLM measured on this GPU becomes the next plan's answer for the same setup (GPU runs only)."""
    name, count, driver = session.vllm.gpu
    if session.profile.launcher.device == "cpu" or not count:
        return
    table = match_gpu(name)
    version = session.vllm.semantics
    record = calibration.measured(
        numbers, record_key=calibration.key(table.name if table else name, count, version.version,
                                             session.profile.model, plan.flags),
        vllm_version=version.version, utilization=version.utilization(plan.utilization),
        max_model_len=int(length or 0), source="start-up", driver=driver)
    if record is None:
        return
    try:
        calibration.save(session.store.directory, record)
    except OSError as exc:  # a full disk must not end a server that just became ready
        log.warning("calibration.not_saved", error=str(exc))


def _summary(session: Session, plan: command.Plan, capacity: Capacity, elapsed: float,
             phases: Mapping[str, float]) -> None:
    decisions = session.store.data.get("decisions") or []
    why = "; ".join(f"{d['change']} ({d['class']})" for d in decisions) or "the profile as written"
    tokens, sessions = capacity.kv_tokens, capacity.sessions
    rows = [
        ("url", f"{plan.base_url}/v1"),
        ("model", f"{plan.served_model_name} ({session.profile.model})"),
        ("KV cache", f"{tokens:,} tokens ({plan.kv_cache_dtype})" if isinstance(tokens, int) else "not reported"),
        ("sessions", f"{sessions} full sessions of {capacity.max_model_len or 0:,} tokens" if sessions else "-"),
        ("rung", f"attempt {len(session.attempts)}: {plan.describe_overrides()} — {why}"),
        ("ready in", format_duration(elapsed) + (f" ({short(dict(phases))})" if phases else "")),
    ]
    public = _public_url(session)
    if public:
        rows.insert(1, ("public url", public))
    if session.profile.launcher.log_file:
        rows.append(("vLLM log", str(session.profile.launcher.log_file)))
    width = max(len(k) for k, _ in rows)
    text = "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)
    logs.echo_summary(f"vllm-launch: {session.profile.name} is ready\n{text}")


def _public_url(session: Session) -> str | None:
    pod = session.environ.get("RUNPOD_POD_ID")
    return f"https://{pod}-{session.profile.port}.proxy.runpod.net/v1" if pod else None

