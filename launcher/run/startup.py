"""Start-up: attempts until one is ready, each spawned, watched to READY and checked against the capacity gate.

tenacity decides *when* the next attempt starts (no wait after a change the ladder
made, exponential backoff when the same flags are retried); `ladder.next_step`
decides *what* changes.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping
from typing import Any

import structlog
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, stop_when_event_set

from launcher.config.profile import FlagValue
from launcher.errors import ConfigError, LadderExhausted
from launcher.gpu.match import match_gpu
from launcher.plan import calibration
from launcher.run import agentprobe, gpurelease, health, ladder, listener, logs, progress, state, supervisor
from launcher.run.compilecache import cache_dir, move_compile_cache
from launcher.run.logpump import RotatingFile
from launcher.run.oomkill import explain_oom, oom_kill_count
from launcher.run.readiness import ReadyCheck, capacity_gate, unchecked_requirement, wait_ready
from launcher.run.retry import Backoff
from launcher.run.session import Attempt, Ready, Session, Stopped
from launcher.run.supervisor import Kind
from launcher.runstate import Capacity, Decision, Phase
from launcher.units import format_duration
from launcher.vllm import api, command
from launcher.vllm.signatures import LogEvent

log = structlog.get_logger("vllm_launch")


class AttemptFailed(Exception):
    """One start-up attempt failed; tenacity retries with the ladder's next overrides."""

    def __init__(self, outcome: supervisor.Outcome) -> None:
        super().__init__(outcome.detail)
        self.outcome = outcome


def start(session: Session, overrides: dict[str, FlagValue | None]) -> Ready:
    """Attempts until one is ready; returns it (the overrides that worked, its plan and capacity)."""
    prof = session.profile
    tried: list[Mapping[str, FlagValue | None]] = []

    policy = prof.launcher.restart
    # No wait after a change the ladder made (it resets the count); backoff when the same flags are retried.
    wait = Backoff(policy.backoff_min_s, policy.backoff_max_s).wait(lambda: session.same_flags_retries)

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
                outcome, ready = attempt(session, overrides)
                if ready is not None:
                    return ready
                if outcome.kind is Kind.STOPPED:
                    raise Stopped
                once = list(session.store.data.get("ladder_once") or [])  # once-per-run steps taken (state)
                step = ladder.next_step(prof, overrides, outcome.diagnosis, version=session.vllm.semantics,
                                        free_fraction=session.free_fraction(), tried=tried, done=once)
                if step.once is not None:
                    session.store.update(ladder_once=[*once, step.once])
                if step.once == ladder.MOVE_COMPILE_CACHE:
                    move_compile_cache(cache_dir({**session.environ, **prof.env}), outcome.attempt, session.store.update)
                tried.append(dict(overrides))
                session.same_flags_retries = (session.same_flags_retries + 1
                                              if dict(step.overrides) == overrides else 0)
                log.info("ladder.step", attempt=outcome.attempt, failure=outcome.diagnosis.cls,
                         change=step.change, reason=step.reason)
                session.store.record_decision(Decision(outcome.attempt, outcome.diagnosis.cls, step.change, step.reason),
                                              counter="ladder_steps")
                overrides = dict(step.overrides)
                raise AttemptFailed(outcome)
    except ladder.Stop as stop:
        if session.stop.is_set():
            raise Stopped from None
        summary = session.attempts_summary()
        if isinstance(stop, ladder.Exhausted):
            raise LadderExhausted(f"{stop} — attempts: {summary}") from None
        raise ConfigError(f"{stop} — attempts: {summary}") from None
    except AttemptFailed:
        if session.stop.is_set():
            raise Stopped from None
        raise LadderExhausted(f"no attempt became ready within launcher.max_attempts "
                              f"({prof.launcher.max_attempts}) — attempts: {session.attempts_summary()}") from None
    raise Stopped  # tenacity stopped because the stop event is set


def attempt(session: Session, overrides: Mapping[str, FlagValue | None]) -> tuple[supervisor.Outcome, Ready | None]:
    """One attempt: spawn vLLM with these overrides, wait for READY or failure, stop it if it failed."""
    prof = session.profile
    number = len(session.attempts) + 1
    record = Attempt(number, dict(overrides))
    session.attempts.append(record)
    plan = command.build_plan(prof, overrides, vllm_bin=session.vllm.vllm_bin, catalog=session.vllm.catalog,
                              placement=session.config.placement)
    _wait_for_gpu_memory(session)
    oom_before = oom_kill_count()  # the OOM killer leaves no line in vLLM's log: its cgroup counts the kills
    sink = RotatingFile(prof.launcher.log_file, prof.launcher.log_max_bytes,
                        prof.launcher.log_backups) if prof.launcher.log_file else None
    rung = plan.describe_overrides()
    if not session.config.worker:
        listener.check_port(prof.host, prof.port)  # before every launch: a port taken while vLLM was down
    child = session.spawn(plan, attempt=number, sink=sink, block_size=ladder.block_size(plan.flags))
    log.info("attempt.started", attempt=number, pid=child.pid, overrides=dict(overrides), argv=list(plan.argv))
    trust = api.certificate_trust(plan.base_url, plan.ca_file)
    if trust is not None and number == 1:  # how every probe of this run checks vLLM's certificate, said once
        log.info("tls.certificate", url=plan.base_url, certificate=trust)
    session.store.update(phase=Phase.STARTING, attempt=number, child=supervisor.describe(child), rung=dict(overrides),
                         rung_description=rung, url=plan.base_url, tls=trust, served_model_name=plan.served_model_name,
                         vllm_version=session.vllm.semantics.version, log_file=str(prof.launcher.log_file or ""))
    session.notify(STATUS=f"attempt {number}: starting vLLM ({rung})")
    api_key = session.vllm.secrets.get("VLLM_API_KEY")
    # Every probe proves, before it sends a byte (the key above all), that our own child holds the server's end.
    # A headless rank probes its head on another node: no socket table of ours can prove that one.
    ours = None if session.config.worker else functools.partial(listener.verify_connection, ours=child.live_pids)
    check = ReadyCheck(
        health=lambda: health.check_health(plan.base_url, ca_file=plan.ca_file, verify=ours),
        models=lambda: health.check_models(plan.base_url, plan.served_model_name, api_key, ca_file=plan.ca_file,
                                           verify=ours),
        completion=(lambda: health.check_completion(plan.base_url, plan.served_model_name, api_key,
                                                    ca_file=plan.ca_file, verify=ours))
        if prof.launcher.health.completion_probe else None)
    if ours is not None and agentprobe.wanted(prof.launcher.agent_probe, plan.flags):
        check = dataclasses.replace(check, agent=lambda: _agent_probe(session, plan, number, api_key, ours))
    if session.config.worker:
        # A headless rank serves no API: it is ready when its own vLLM says it joined the group (its place in
        # the world, loading, its KV cache) and its head answers (plan.base_url is the head's). Something else
        # answering on the head's port proves nothing about this rank.
        def joined() -> health.Probe:
            with child.pump.lock:
                member = child.pump.diagnoser.joined
            if not member:
                return health.Probe(False, "this rank has not joined its group yet")
            return health.Probe(child.popen.poll() is None, "this rank joined the group and its head serves")

        check = dataclasses.replace(check, completion=None, models=joined)
    growth = progress.CacheGrowth(prof.model, {**session.environ, **prof.env})
    phases = progress.PhaseReporter(growth)
    session.download = growth

    def on_event(event: LogEvent) -> None:
        session.on_event(event)
        phases.on_event(event)

    def tick() -> None:
        phases.tick()
        session.tick(child)

    def on_acquit(event: LogEvent, why: str) -> None:
        """A failure line the start-up survived: a warning for the operator, never the end of the attempt."""
        log.warning("attempt.line_acquitted", attempt=number, line=event.message[:300], failure=event.failure,
                    reason=event.reason, why=why)
        _warn(session, {"attempt": number, "line": event.message[:300], "class": event.failure, "why": why})

    outcome = wait_ready(child, session.stop, check, on_event=on_event, tick=tick,
                         last_progress=lambda: growth.last_growth, confirm_window_s=prof.launcher.confirm_window_s,
                         on_acquit=on_acquit)
    if outcome.kind is Kind.STOPPED:
        record.outcome = "stopped"
        return outcome, None  # the daemon's shutdown stops the child (start-up grace) and reports its exit and leftovers
    if outcome.kind is Kind.READY:
        gated = capacity_gate(prof.launcher.require, outcome, plan, ladder.block_size(plan.flags))
        if gated is None:
            record.outcome = "ready"
            return outcome, _ready(session, child, plan, outcome, overrides)
        outcome = gated
    report = session.stop_child(supervisor.FAILED_ATTEMPT_GRACE_S)
    outcome = dataclasses.replace(outcome, diagnosis=explain_oom(outcome.diagnosis, oom_before, oom_kill_count()))
    record.outcome, record.cls, record.detail = outcome.kind, outcome.diagnosis.cls, outcome.detail
    d = outcome.diagnosis
    log.warning("attempt.failed", attempt=number, outcome=outcome.kind, failure=d.cls, reason=d.reason,
                root_cause=d.root_cause, detail=outcome.detail, returncode=report.returncode if report else None,
                numbers=dict(d.numbers), tail=list(outcome.tail[-8:]) if d.cls == "unknown" else None)
    session.notify(STATUS=f"attempt {number} failed: {d.cls}")
    return outcome, None


def _agent_probe(session: Session, plan: command.Plan, number: int, api_key: str | None,
                 verify: health.Verify) -> agentprobe.AgentCheck:
    """The agent probe (run/agentprobe.py) against our own server; its verdict and evidence go to state."""
    started = time.monotonic()
    verdict = agentprobe.probe(plan.base_url, plan.served_model_name, api_key,
                               timeout=session.profile.launcher.health.completion_timeout_s,
                               tool_call_parser=_text_flag(plan, "tool-call-parser"),
                               reasoning_parser=_text_flag(plan, "reasoning-parser"), verify=verify,
                               ca_file=plan.ca_file)
    seconds = round(time.monotonic() - started, 2)
    session.store.update(agent={**verdict.to_dict(), "attempt": number, "seconds": seconds})
    if verdict.verdict is agentprobe.AgentVerdict.INCONCLUSIVE:
        log.warning("agent.probe", attempt=number, verdict=verdict.verdict, detail=verdict.detail, seconds=seconds)
        _warn(session, {"attempt": number, "text": f"agent probe inconclusive: {verdict.detail}"})
    else:
        (log.error if verdict.failed else log.info)("agent.probe", attempt=number, verdict=verdict.verdict,
                                                    detail=verdict.detail, parser=verdict.parser,
                                                    evidence=verdict.evidence, seconds=seconds)
    return verdict


def _text_flag(plan: command.Plan, name: str) -> str | None:
    value = plan.flags.get(name)
    return value if isinstance(value, str) else None


def _warn(session: Session, warning: dict[str, Any]) -> None:
    """A warning `status` shows (state keeps the latest few)."""
    warnings = [*(session.store.data.get("warnings") or []), warning]
    session.store.update(warnings=warnings[-state.MAX_WARNINGS:])


def _wait_for_gpu_memory(session: Session) -> None:
    """The previous attempt's memory must be back before the next launch (run/gpurelease.py)."""
    if session.gpu_baseline is None:
        return
    probe = session.probe()
    if probe is not None and not gpurelease.wait_for_release(probe, session.gpu_baseline, session.wait,
                                                             ours=session.stopped_pids,
                                                             timeout_s=session.profile.launcher.gpu_release_timeout_s):
        raise Stopped


def _ready(session: Session, child: supervisor.Child, plan: command.Plan, outcome: supervisor.Outcome,
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
    unchecked = unchecked_requirement(session.profile.launcher.require, outcome)
    if unchecked is not None:
        log.warning("ready.require_unchecked", attempt=child.attempt, why=unchecked)
        _warn(session, {"attempt": child.attempt, "text": unchecked})
        status += "; launcher.require NOT checked (no KV figure in vLLM's log)"
    session.notify(READY=1, STATUS=status)
    log.info("ready", attempt=child.attempt, url=plan.base_url, served_model_name=plan.served_model_name,
             kv_tokens=tokens, sessions=sessions, max_model_len=length, time_to_ready_s=round(elapsed, 1),
             overrides=dict(overrides))
    if session.config.console:
        _summary(session, plan, capacity, elapsed)
    return Ready(child.attempt, dict(overrides), plan, capacity)


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


def _summary(session: Session, plan: command.Plan, capacity: Capacity, elapsed: float) -> None:
    decisions = session.store.data.get("decisions") or []
    why = "; ".join(f"{d['change']} ({d['class']})" for d in decisions) or "the profile as written"
    tokens, sessions = capacity.kv_tokens, capacity.sessions
    rows = [
        ("url", f"{plan.base_url}/v1"),
        ("model", f"{plan.served_model_name} ({session.profile.model})"),
        ("KV cache", f"{tokens:,} tokens ({plan.kv_cache_dtype})" if isinstance(tokens, int) else "not reported"),
        ("sessions", f"{sessions} full sessions of {capacity.max_model_len or 0:,} tokens" if sessions else "-"),
        ("rung", f"attempt {len(session.attempts)}: {plan.describe_overrides()} — {why}"),
        ("ready in", format_duration(elapsed)),
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

