"""One start-up attempt, from spawn to verdict: launch vLLM with the ladder's overrides, watch it to READY or to a
proven failure, and stop it when it failed. What the next attempt changes is the ladder's (run/ladder.py);
when it starts is startup.py's.

The verdict comes from two witnesses on one loop (`watch`). The log speaks through the pump's messages
(run/logpump.py): a failure line accuses, and the log convicts it itself (a traceback that ends in it,
vLLM's "engine failed to start") or progress acquits it. The process convicts an accused line when vLLM
or one of its engine processes exits, or when nothing acquits it within `launcher.confirm_window`; the
server answering /health and /v1/models acquits it. Before READY every probe proves that the server is
our own vLLM (run/listener.py); after the probes, the capacity gate (run/readiness.py) and the agent
probe (run/agentprobe.py) may still fail the attempt as configured.
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from launcher.config.profile import FlagValue
from launcher.config.settings import default_seconds
from launcher.procstat import is_vllm_title
from launcher.run import agentprobe, gpurelease, health, ladder, listener, progress, state, supervisor, upkeep
from launcher.run.agentprobe import AgentCheck
from launcher.run.health import Probe
from launcher.run.listener import NotOurServer
from launcher.run.logpump import Mark, RotatingFile
from launcher.run.oomkill import explain_oom, oom_kill_count
from launcher.run.processes import remembered
from launcher.run.readiness import capacity_gate
from launcher.run.session import Attempt, Session, Stopped
from launcher.run.supervisor import Child, Ending, EndKind, outcome
from launcher.runstate import Phase, Written
from launcher.vllm import api, command
from launcher.vllm.config_reasons import ConfigReason
from launcher.vllm.diagnosis import Diagnosis
from launcher.vllm.phases import PhaseClock, observe, timed
from launcher.vllm.signatures import CONFIG, EventKind, LogEvent

log = structlog.get_logger("vllm_launch")

# How long a generic fatal line ("EngineCore failed to start") waits for its root cause.
ROOT_CAUSE_WAIT_S = 2.0


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    """How to tell that the server is ready: /health, /v1/models, optionally a completion, then the agent probe."""

    health: Callable[[], Probe]
    models: Callable[[], Probe]  # its max_model_len is what the server says it serves
    completion: Callable[[], Probe] | None = None
    interval_s: float = 0.5
    agent: Callable[[], AgentCheck] | None = None  # the agent probe (run/agentprobe.py), once the rest answer


@dataclass(frozen=True, slots=True)
class Hooks:
    """What the watch tells the run as it goes (all optional: the unit tests watch with none)."""

    on_line: Callable[[LogEvent], None] = lambda event: None
    on_acquit: Callable[[LogEvent, str], None] = lambda event, why: None
    tick: Callable[[], None] = lambda: None  # the watchdog, systemd's start timeout, the process record
    last_progress: Callable[[], float] = lambda: 0.0  # a silent download's last growth


def run(session: Session, overrides: Mapping[str, FlagValue | None]) -> tuple[Ending, Child | None]:
    """One attempt: spawn vLLM with these overrides, watch it to a verdict, stop it if it failed. A ready
    attempt returns its child, still serving, and hands it over; a failed one returns None with its outcome.
    The attempt stops its own child on every other way out: a signal hands it to the daemon's shutdown
    (`Stopped.live`), and an error stops it before it propagates."""
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
    if not session.config.worker:
        listener.check_port(prof.host, prof.port)  # before every launch: a port taken while vLLM was down
    echo = session.config.console and (session.config.verbose or prof.launcher.log_file is None)
    child = supervisor.spawn(plan, attempt=number, secrets=session.vllm.secrets, sink=sink, echo=echo,
                             environ=session.environ, block_size=ladder.block_size(plan.flags))
    clock = PhaseClock(first=time.time())  # where this attempt's time goes, from its launch
    try:
        verdict = _verdict(session, child, overrides, clock)
    except Stopped:
        record.outcome = "stopped"
        raise Stopped(child) from None
    except BaseException:
        upkeep.stop(session, child, supervisor.FAILED_ATTEMPT_GRACE_S)
        raise
    record.seconds, record.phases = round(time.monotonic() - child.started, 1), clock.seconds(time.time())
    if verdict.kind is EndKind.READY:
        record.outcome = "ready"
        _costs(session, record, clock)
        return verdict, child
    if verdict.kind is EndKind.STOPPED:
        record.outcome = "stopped"
        raise Stopped(child)  # the daemon's shutdown stops it (start-up grace) and reports its exit and leftovers
    report = upkeep.stop(session, child, supervisor.FAILED_ATTEMPT_GRACE_S)
    verdict = dataclasses.replace(verdict, diagnosis=explain_oom(verdict.diagnosis, oom_before, oom_kill_count()))
    record.outcome, record.cls, record.detail = verdict.kind, verdict.diagnosis.cls, verdict.detail
    _costs(session, record, clock)
    d = verdict.diagnosis
    log.warning("attempt.failed", attempt=number, outcome=verdict.kind, failure=d.cls, reason=d.reason,
                root_cause=d.root_cause, detail=verdict.detail, returncode=report.returncode, seconds=record.seconds,
                phases=dict(record.phases),
                numbers=dict(d.numbers), tail=list(verdict.tail[-8:]) if d.cls == "unknown" else None)
    session.notify(STATUS=f"attempt {number} failed: {d.cls}")
    return verdict, None


def _verdict(session: Session, child: Child, overrides: Mapping[str, FlagValue | None], clock: PhaseClock) -> Ending:
    """Watch the spawned child to its verdict, with the gate a ready server must still pass; `clock` is fed
    every line that moves a phase, at the moment it was read."""
    prof, number, plan = session.profile, child.attempt, child.plan
    _started(session, child, overrides)
    growth = progress.CacheGrowth(prof.model, {**session.environ, **prof.env})
    phases = progress.PhaseReporter(growth)
    keep = upkeep.Upkeep(session, child)

    def on_line(event: LogEvent) -> None:
        _said(session, event)
        phases.on_event(event)
        if timed(event):
            clock.feed(event, time.time())

    def tick() -> None:
        phases.tick()
        keep.tick(growth.last_growth)

    def on_acquit(event: LogEvent, why: str) -> None:
        """A failure line the start-up survived: a warning for the operator, never the end of the attempt."""
        log.warning("attempt.line_acquitted", attempt=number, line=event.message[:300], failure=event.failure,
                    reason=event.reason, why=why)
        warn(session, {"attempt": number, "line": event.message[:300], "class": event.failure, "why": why})

    verdict = watch(child, session.stop, ready_check(session, child), confirm_window_s=prof.launcher.confirm_window_s,
                    hooks=Hooks(on_line, on_acquit, tick, lambda: growth.last_growth))
    if verdict.kind is EndKind.READY:
        verdict = capacity_gate(prof.launcher.require, verdict, plan, ladder.block_size(plan.flags)) or verdict
    return verdict


CONFIRM_WINDOW_S = default_seconds("confirm_window")
NO_HOOKS = Hooks()


def watch(child: Child, stop: threading.Event, check: ReadyCheck, *, confirm_window_s: float = CONFIRM_WINDOW_S,
          hooks: Hooks = NO_HOOKS, clock: Callable[[], float] = time.monotonic) -> Ending:
    """Block until the server is ready, a proven failure ends the attempt, it exits, stalls, or we are stopped.

    A generic fatal line waits ROOT_CAUSE_WAIT_S for its root cause. `startup_stall` counts from the last
    output line or the last `hooks.last_progress()` (a download's growth)."""
    plan = child.plan
    deadline = child.started + plan.startup_timeout_s
    next_probe = next_snapshot = clock()
    generic_since: float | None = None
    accused: tuple[LogEvent, float] | None = None  # the standing failure line, and since when
    while True:
        if stop.is_set():
            return outcome(child, EndKind.STOPPED, "stop requested")
        try:
            message = child.pump.messages.get(timeout=0.1)
        except queue.Empty:
            message = None
        now = clock()
        mark = message.mark if message is not None else None
        if message is not None and mark is Mark.LINE and message.event is not None:
            hooks.on_line(message.event)
        elif message is not None and mark is Mark.CONVICTED:
            return outcome(child, EndKind.FAILED, f"fatal log line, confirmed by its {message.evidence}")
        elif message is not None and mark is Mark.ACCUSED and message.event is not None:
            accused, generic_since = (message.event, now), None
            child.remember_descendants()  # the engine must have been seen alive to be seen gone
        elif message is not None and mark is Mark.ACQUITTED and message.event is not None:
            hooks.on_acquit(message.event, "progress after it")
            if accused is not None and accused[0] is message.event:
                accused = None
        elif mark is Mark.PENDING:
            generic_since = generic_since or now
        hooks.tick()
        if accused is not None:
            gone = _engine_exited(child)
            if gone is not None:
                return _convicted(child, "engine_exited", f"fatal log line, confirmed: {gone} exited after it")
            # A silent download (the model's cache folder growing) is progress too: the window waits for it.
            if now - max(accused[1], hooks.last_progress()) >= confirm_window_s:
                return _convicted(child, "no_progress", f"fatal log line, confirmed: no progress for "
                                                      f"{confirm_window_s:g}s after it (launcher.confirm_window)")
        if generic_since is not None and now - generic_since >= ROOT_CAUSE_WAIT_S:
            return outcome(child, EndKind.FAILED, "start-up failed (no specific root cause)")
        if mark is Mark.EXITED or child.popen.poll() is not None:
            child.pump.join(timeout=2.0)
            return _convicted(child, "exit", f"vLLM exited with {child.popen.wait()}")
        if now >= next_snapshot:
            child.remember_descendants()  # often: an engine that dies must have been seen alive
            next_snapshot = now + 0.5
        silent = now - max(child.pump.last_output, hooks.last_progress())
        if silent >= plan.startup_stall_s:
            return outcome(child, EndKind.TIMED_OUT, f"no output and no download progress for {silent:.0f}s "
                                                "(launcher.startup_stall)")
        if now >= deadline:
            return outcome(child, EndKind.TIMED_OUT, f"not ready after {plan.startup_timeout_s:.0f}s "
                                                "(launcher.startup_timeout)")
        if now >= next_probe:
            next_probe = now + check.interval_s
            answered = _answered(child, check, hooks)
            if answered is not None:
                return answered


def _answered(child: Child, check: ReadyCheck, hooks: Hooks) -> Ending | None:
    """One round of probes: READY, a failure (a stranger on the port, the agent probe), or None (not yet)."""
    done = [check.health()]
    if done[-1].ok:
        done.append(check.models())
    if done[-1].ok and len(done) == 2:
        done.append(check.completion() if check.completion is not None else done[-1])
    stranger = next((probe.not_ours for probe in done if probe.not_ours), None)
    if stranger is not None:
        return _port_taken(child, stranger)
    if len(done) < 3 or not all(probe.ok for probe in done):
        return None
    if check.agent is not None:
        try:
            verdict = check.agent()
        except NotOurServer as exc:
            return _port_taken(child, exc.holder)
        if verdict.failed:
            return _agent_failed(child, verdict)
    cleared = child.pump.acquit()  # the server answers: a standing line did not end it
    if cleared is not None:
        hooks.on_acquit(cleared, "the server answered /health and /v1/models")
    child.remember_descendants()
    return outcome(child, EndKind.READY, done[1].detail, max_model_len=done[1].max_model_len)


def _engine_exited(child: Child) -> str | None:
    """The title of a vLLM process (engine, worker) of this attempt seen alive before and gone now."""
    engine = {pid: title for pid, title in child.titles.items() if is_vllm_title(title)}
    if not engine:
        return None
    alive = {proc.pid for proc in remembered({pid: child.known[pid] for pid in engine})}
    return next((f"{title} (PID {pid})" for pid, title in engine.items() if pid not in alive), None)


def _convicted(child: Child, evidence: str, detail: str) -> Ending:
    """The process proved the standing line (or, with none standing, vLLM just ended): the verdict says by what."""
    child.pump.convict(evidence)
    return outcome(child, EndKind.FAILED, detail)


def _port_taken(child: Child, holder: str) -> Ending:
    """A stranger answers on our port: never READY, and it got nothing (the probe proved it before sending)."""
    port = urllib.parse.urlsplit(child.plan.base_url).port
    root = f"port {port} is held by {holder}, not by the vLLM this launcher started"
    diagnosis = Diagnosis(CONFIG, ConfigReason.PORT_IN_USE, root, {"port": port, "holder": holder}, "starting")
    return Ending(EndKind.FAILED, child.attempt, diagnosis, child.popen.poll(), tuple(child.pump.tail), root)


def _agent_failed(child: Child, verdict: AgentCheck) -> Ending:
    """The server answers, but an agent cannot work with it: a configuration failure, never READY."""
    shown = f" (the answer began {verdict.evidence[:80]!r})" if verdict.evidence else ""
    root = f"agent probe: {verdict.detail}{shown}; {verdict.fix}"
    diagnosis = Diagnosis(CONFIG, verdict.reason, root, {"agent": verdict.to_dict()}, "starting")
    return Ending(EndKind.FAILED, child.attempt, diagnosis, child.popen.poll(), tuple(child.pump.tail), root)


def ready_check(session: Session, child: Child) -> ReadyCheck:
    """The probes of this attempt. Every one proves, before it sends a byte (the key above all), that our own
    child holds the server's end; a headless rank probes its head on another node, which nothing of ours can
    prove: it is ready when its own vLLM says it joined the group and its head answers."""
    plan, prof = child.plan, session.profile
    api_key = session.vllm.secrets.get("VLLM_API_KEY")
    ours = None if session.config.worker else functools.partial(listener.verify_connection, ours=child.live_pids)
    check = ReadyCheck(
        health=lambda: health.check_health(plan.base_url, ca_file=plan.ca_file, verify=ours),
        models=lambda: health.check_models(plan.base_url, plan.served_model_name, api_key, ca_file=plan.ca_file,
                                           verify=ours),
        completion=(lambda: health.check_completion(plan.base_url, plan.served_model_name, api_key,
                                                    ca_file=plan.ca_file, verify=ours))
        if prof.launcher.health.completion_probe else None)
    if ours is not None and agentprobe.wanted(prof.launcher.agent_probe, plan.flags):
        check = dataclasses.replace(check, agent=lambda: _agent_probe(session, plan, child.attempt, api_key, ours))
    if session.config.worker:
        def joined() -> health.Probe:
            if not child.pump.joined:
                return health.Probe(False, "this rank has not joined its group yet")
            return health.Probe(child.popen.poll() is None, "this rank joined the group and its head serves")

        check = dataclasses.replace(check, completion=None, models=joined)
    return check


def _costs(session: Session, record: Attempt, clock: PhaseClock) -> None:
    """What the attempt cost, in state: the run's attempts, the histogram of every phase, the served start-up's."""
    histogram = observe(dict(session.store.data.get("phase_histogram") or {}), dict(record.phases))
    fields: Written = {"attempts": [a.to_dict() for a in session.attempts[-state.MAX_DECISIONS:]],
                       "phase_histogram": histogram}
    if record.outcome == "ready":
        fields["startup_phases"] = clock.to_dict(time.time())
    session.store.update(**fields)


def _said(session: Session, event: LogEvent) -> None:
    """What a notable line tells the operator while vLLM starts: its capacity, its phase, a fatal line."""
    if event.kind is EventKind.KV_TOKENS:
        log.info("vllm.capacity", **{k: v for k, v in event.values.items() if v is not None})
    elif event.kind is EventKind.PROGRESS and event.values.get("phase"):
        session.store.note(loading_phase=str(event.values["phase"]))
    elif event.kind is EventKind.FAILURE and event.fatal == "specific":
        log.info("vllm.fatal_line", failure=event.failure, reason=event.reason, line=event.message[:300])


def _started(session: Session, child: Child, overrides: Mapping[str, FlagValue | None]) -> None:
    plan, number = child.plan, child.attempt
    rung = plan.describe_overrides()
    log.info("attempt.started", attempt=number, pid=child.pid, overrides=dict(overrides), argv=list(plan.argv))
    trust = api.certificate_trust(plan.base_url, plan.ca_file)
    if trust is not None and number == 1:  # how every probe of this run checks vLLM's certificate, said once
        log.info("tls.certificate", url=plan.base_url, certificate=trust)
    session.store.update(phase=Phase.STARTING, attempt=number, child=supervisor.describe(child), rung=dict(overrides),
                         rung_description=rung, url=plan.base_url, tls=trust, served_model_name=plan.served_model_name,
                         vllm_version=session.vllm.semantics.version,
                         log_file=str(session.profile.launcher.log_file or ""))
    session.notify(STATUS=f"attempt {number}: starting vLLM ({rung})")


def _agent_probe(session: Session, plan: command.Plan, number: int, api_key: str | None,
                 verify: health.Verify) -> AgentCheck:
    """The agent probe against our own server; its verdict and evidence go to state."""
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
        warn(session, {"attempt": number, "text": f"agent probe inconclusive: {verdict.detail}"})
    else:
        (log.error if verdict.failed else log.info)("agent.probe", attempt=number, verdict=verdict.verdict,
                                                    detail=verdict.detail, parser=verdict.parser,
                                                    evidence=verdict.evidence, seconds=seconds)
    return verdict


def _text_flag(plan: command.Plan, name: str) -> str | None:
    value = plan.flags.get(name)
    return value if isinstance(value, str) else None


def warn(session: Session, warning: dict[str, Any]) -> None:
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
