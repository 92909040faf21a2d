"""Waiting for one attempt to become ready (/health, /v1/models, optionally a completion, or the log's verdict),
and the capacity gate a ready server must pass."""

from __future__ import annotations

import queue
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from launcher.config.profile import Requirements, parse_max_model_len
from launcher.config.settings import default_seconds
from launcher.procstat import is_vllm_title
from launcher.run.agentprobe import AgentCheck
from launcher.run.health import Probe
from launcher.run.listener import NotOurServer
from launcher.run.logpump import EOF
from launcher.run.processes import remembered
from launcher.run.supervisor import Child, Kind, Outcome, outcome
from launcher.vllm.command import Plan
from launcher.vllm.diagnose import Diagnosis
from launcher.vllm.signatures import CONFIG, KV_INSUFFICIENT, LogEvent
from launcher.vllm.versions import DEFAULT_BLOCK_SIZE

# How long a generic fatal line ("EngineCore failed to start") waits for its root cause.
ROOT_CAUSE_WAIT_S = 2.0


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    """How to tell that the server is ready: /health, /v1/models, optionally a completion."""

    health: Callable[[], Probe]
    models: Callable[[], Probe]  # its max_model_len is what the server says it serves
    completion: Callable[[], Probe] | None = None
    interval_s: float = 0.5
    agent: Callable[[], AgentCheck] | None = None  # the agent probe (run/agentprobe.py), once the rest answer


class Accusation:
    """A failure line that stands, unconfirmed: since when. The process convicts it: the API server, the engine
    or a worker exits, or nothing acquits it within the confirm window (vLLM can hang after a fatal error)."""

    def __init__(self, child: Child, since: float, line: LogEvent | None) -> None:
        self.since = since
        self.child = child
        self.line = line  # the standing failure line: another one starts its own clock
        child.remember_descendants()

    def engine_exited(self) -> str | None:
        """The title of a vLLM process (engine, worker) of this attempt seen alive before and gone now."""
        engine = {pid: title for pid, title in self.child.titles.items() if is_vllm_title(title)}
        if not engine:
            return None
        alive = {proc.pid for proc in remembered({pid: self.child.known[pid] for pid in engine})}
        for pid, title in engine.items():
            if pid not in alive:
                return f"{title} (PID {pid})"
        return None


def wait_ready(child: Child, stop: threading.Event, check: ReadyCheck, *, on_event: Callable[[LogEvent], None],
               tick: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.monotonic,
               last_progress: Callable[[], float] = lambda: 0.0, confirm_window_s: float = default_seconds("confirm_window"),
               on_acquit: Callable[[LogEvent, str], None] = lambda event, why: None) -> Outcome:
    """Block until the server is ready, a confirmed failure ends the attempt, it exits, stalls, or we are stopped.

    A failure line accuses (launcher/vllm/diagnose.py): the attempt ends on it once the log convicts it (a
    traceback that ends in it, vLLM's engine-start failure line), or the process does (vLLM or its engine
    exits, or `confirm_window_s` passes with no progress). Progress, or /health answering, acquits it; the
    line is handed to `on_acquit` and the start-up goes on. A generic fatal line ("EngineCore failed to
    start") waits briefly for its root cause. `startup_stall` counts from the last output line or the last
    `last_progress()` (a download's growth).
    """
    plan = child.plan
    deadline = child.started + plan.startup_timeout_s
    next_probe = clock()
    next_snapshot = clock()
    generic_since: float | None = None
    accusation: Accusation | None = None
    acquitted_seen = 0
    diagnoser = child.pump.diagnoser
    while True:
        if stop.is_set():
            return outcome(child, Kind.STOPPED, "stop requested")
        try:
            event = child.pump.events.get(timeout=0.1)
        except queue.Empty:
            event = None
        if event is not None and event is not EOF:
            on_event(event)
        tick()
        with child.pump.lock:
            decided, pending, accused = diagnoser.decided, diagnoser.pending, diagnoser.accused
            acquitted = diagnoser.acquitted[acquitted_seen:]
            evidence, standing = diagnoser.confirmed, diagnoser.failure
        for line in acquitted:
            on_acquit(line, "progress after it")
        acquitted_seen += len(acquitted)
        if decided:
            return outcome(child, Kind.FAILED, f"fatal log line, confirmed by its {evidence}")
        now = clock()
        if accused:
            if accusation is None or accusation.line is not standing:
                accusation = Accusation(child, now, standing)
            gone = accusation.engine_exited()
            if gone is not None:
                _convict(child, "engine_exited")
                return outcome(child, Kind.FAILED, f"fatal log line, confirmed: {gone} exited after it")
            # A silent download (the model's cache folder growing) is progress too: the window waits for it.
            if now - max(accusation.since, last_progress()) >= confirm_window_s:
                _convict(child, "no_progress")
                return outcome(child, Kind.FAILED, f"fatal log line, confirmed: no progress for {confirm_window_s:g}s "
                                                "after it (launcher.confirm_window)")
        else:
            accusation = None
        if pending:
            generic_since = generic_since or now
            if now - generic_since >= ROOT_CAUSE_WAIT_S:
                return outcome(child, Kind.FAILED, "start-up failed (no specific root cause)")
        if event is EOF or child.popen.poll() is not None:
            child.pump.join(timeout=2.0)
            _convict(child, "exit")
            return outcome(child, Kind.FAILED, f"vLLM exited with {child.popen.wait()}")
        if now >= next_snapshot:
            child.remember_descendants()  # often: an engine that dies must have been seen alive
            next_snapshot = now + 0.5
        silent = now - max(child.pump.last_output, last_progress())
        if silent >= plan.startup_stall_s:
            return outcome(child, Kind.TIMED_OUT, f"no output and no download progress for {silent:.0f}s "
                                                "(launcher.startup_stall)")
        if now >= deadline:
            return outcome(child, Kind.TIMED_OUT, f"not ready after {plan.startup_timeout_s:.0f}s "
                                                "(launcher.startup_timeout)")
        if now >= next_probe:
            next_probe = now + check.interval_s
            probes = _probe(check)
            stranger = next((probe.not_ours for probe in probes if probe.not_ours), None)
            if stranger is not None:
                return _port_taken(child, stranger)
            if len(probes) == 3 and all(probe.ok for probe in probes):
                if check.agent is not None:
                    try:
                        verdict = check.agent()
                    except NotOurServer as exc:
                        return _port_taken(child, exc.holder)
                    if verdict.failed:
                        return _agent_failed(child, verdict)
                with child.pump.lock:
                    cleared = diagnoser.acquit()  # the server answers: a standing line did not end it
                if cleared is not None:
                    on_acquit(cleared, "the server answered /health and /v1/models")
                child.remember_descendants()
                models = probes[1]
                return outcome(child, Kind.READY, models.detail, max_model_len=models.max_model_len)


def _probe(check: ReadyCheck) -> list[Probe]:
    """/health, then /v1/models, then the completion, each only while the one before passed: [] ... [h, m, c]."""
    done = [check.health()]
    if done[-1].ok:
        done.append(check.models())
    if done[-1].ok and len(done) == 2:
        done.append(check.completion() if check.completion is not None else done[-1])
    return done


def _port_taken(child: Child, holder: str) -> Outcome:
    """A stranger answers on our port: never READY, and it got nothing (the probe proved it before sending)."""
    port = urllib.parse.urlsplit(child.plan.base_url).port
    root = f"port {port} is held by {holder}, not by the vLLM this launcher started"
    diagnosis = Diagnosis(CONFIG, "port_in_use", root, {"port": port, "holder": holder}, "starting")
    return Outcome(Kind.FAILED, child.attempt, diagnosis, child.popen.poll(), tuple(child.pump.tail), root)


def _agent_failed(child: Child, verdict: AgentCheck) -> Outcome:
    """The server answers, but an agent cannot work with it: a configuration failure, never READY."""
    shown = f" (the answer began {verdict.evidence[:80]!r})" if verdict.evidence else ""
    root = f"agent probe: {verdict.detail}{shown}; {verdict.fix}"
    diagnosis = Diagnosis(CONFIG, verdict.reason, root, {"agent": verdict.to_dict()}, "starting")
    return Outcome(Kind.FAILED, child.attempt, diagnosis, child.popen.poll(), tuple(child.pump.tail), root)


def _convict(child: Child, evidence: str) -> None:
    with child.pump.lock:
        child.pump.diagnoser.convict(evidence)


def capacity_gate(require: Requirements, outcome: Outcome, plan: Plan, block_size: int = DEFAULT_BLOCK_SIZE) -> Outcome | None:
    """READY only when the capacity the log reports meets launcher.require (and an `auto` context leaves
    the block vLLM keeps back); else the failed outcome."""
    numbers = dict(outcome.diagnosis.numbers)
    length = numbers.get("served_max_model_len") or plan.max_model_len
    tokens = numbers.get("kv_tokens")
    if not isinstance(tokens, int) or not length:
        return None
    written = plan.flags.get("max-model-len")
    auto = written is not None and parse_max_model_len(written) is None  # `auto` or -1: vLLM fits it
    if auto and length > tokens - block_size:
        # vLLM keeps one null block out of the pool: a request of exactly the fitted length never gets
        # its last block and waits forever. One block lower is the longest context that is served.
        numbers.update(max_model_len=length, estimated_max_model_len=tokens - block_size)
        root = (f"max-model-len auto fitted {length:,} tokens to a pool of {tokens:,}, which leaves no room for "
                f"the null block vLLM keeps; a request that long would never be scheduled")
        return Outcome(Kind.FAILED, outcome.attempt, Diagnosis(KV_INSUFFICIENT, "auto_fit_edge", root, numbers,
                                                            "serving"), None, outcome.tail, root)
    reason = None
    if require.min_sessions is not None and tokens / length < require.min_sessions:
        reason = "below_min_sessions"
    elif require.min_kv_tokens is not None and tokens < require.min_kv_tokens:
        reason = "below_min_kv_tokens"
    if reason is None:
        return None
    numbers["max_model_len"] = length
    root = (f"{tokens:,} KV tokens = {tokens / length:.2f} sessions of {length:,} (launcher.require: "
            f"min_sessions {require.min_sessions}, min_kv_tokens {require.min_kv_tokens})")
    diagnosis = Diagnosis(KV_INSUFFICIENT, reason, root, numbers, "serving")
    return Outcome(Kind.FAILED, outcome.attempt, diagnosis, None, outcome.tail, root)


def unchecked_requirement(require: Requirements, outcome: Outcome) -> str | None:
    """Why launcher.require could not be checked for a ready server (vLLM logged no KV figure), or None.
    Such a server is READY, and this is said in the log, the state and systemd's STATUS, never silently."""
    if require.min_sessions is None and require.min_kv_tokens is None:
        return None
    if isinstance(outcome.diagnosis.numbers.get("kv_tokens"), int):
        return None
    return ("launcher.require was not checked: vLLM logged no KV cache size (is VLLM_LOGGING_LEVEL above INFO?); "
            "the server is ready without that proof")
