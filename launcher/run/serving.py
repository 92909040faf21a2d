"""After READY: watch the engine (its log, its exit, /health) and decide whether to restart it."""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from launcher.errors import LadderExhausted
from launcher.run import health, listener, upkeep
from launcher.run.liveness import Verdict, Work, judge, parse_work
from launcher.run.logpump import EOF, Mark
from launcher.run.retry import Backoff
from launcher.run.session import Session, Stopped
from launcher.run.supervisor import FAILED_ATTEMPT_GRACE_S, Child, Ending, EndKind, outcome
from launcher.runstate import Decision, Phase
from launcher.units import format_duration
from launcher.vllm.signatures import DISTRIBUTED_INIT, ENGINE_DEAD, EventKind

log = structlog.get_logger("vllm_launch")
_MAX_METRICS_BYTES = 8 * 1024 * 1024  # vLLM's /metrics is ~100 KiB; a larger answer is cut, not held whole


@dataclass(frozen=True, slots=True)
class Reading:
    """One /metrics read: whether it answered, and vLLM's work series if it served them."""

    answered: bool
    work: Work | None


@dataclass(frozen=True, slots=True)
class ProbeResult:
    ok: bool
    verdict: Verdict | None = None  # for a failed probe: what vLLM's counters say it means
    before: Work | None = None
    after: Work | None = None


class CompletionCheck:
    """A 1-token completion in a thread of its own, so a wedged engine never blocks the watch loop.

    The thread reads /metrics before it sends the completion and again when it failed, so that a probe
    that waited in a busy server's queue is told apart from one a wedged engine never answered
    (launcher/run/liveness.py)."""

    def __init__(self, send: Callable[[], health.Probe], interval_s: float, clock: Callable[[], float],
                 read_metrics: Callable[[], Reading] | None = None) -> None:
        self.send = send
        self.read_metrics = read_metrics
        self.interval_s = interval_s
        self.next_at = clock() + interval_s
        self.thread: threading.Thread | None = None
        self.result: ProbeResult | None = None

    def due(self, now: float) -> bool:
        return self.interval_s > 0 and self.thread is None and now >= self.next_at

    def start(self) -> None:
        self.result = None

        def run() -> None:
            before = self.read_metrics() if self.read_metrics is not None else None
            if self.send().ok:
                self.result = ProbeResult(True)
                return
            if before is None or self.read_metrics is None:
                self.result = ProbeResult(False, Verdict.UNKNOWN)
                return
            after = self.read_metrics()
            verdict = judge(before.work, after.work, answered=after.answered,
                            absent=before.work is None or after.work is None)
            self.result = ProbeResult(False, verdict, before.work, after.work)

        self.thread = threading.Thread(target=run, name="completion-probe", daemon=True)
        self.thread.start()

    def finished(self) -> ProbeResult | None:
        """The answer once the probe is over (the HTTP timeouts bound it), else None."""
        if self.thread is None or self.thread.is_alive():
            return None
        self.thread = None
        return self.result or ProbeResult(False, Verdict.UNKNOWN)


def watch(child: Child, stop: threading.Event, *, probe_health: Callable[[], health.Probe], interval_s: float,
          failures: int, tick: Callable[[], None], clock: Callable[[], float] = time.monotonic,
          reload: threading.Event | None = None, completion: CompletionCheck | None = None) -> Ending:
    """After READY: return when we are stopped, asked to reload, or the engine dies: it exits, `failures`
    probes fail in a row (/health, or the periodic completion), or vLLM logs its death and /health agrees.

    A death line alone restarts nothing: a client's prompt or URL can carry any text into the log, so
    the engine is dead when its process exits or its /health fails too."""
    failed = wedged = 0
    warned_no_metrics = False
    next_probe = clock() + interval_s
    next_snapshot = clock()
    suspect: str | None = None  # a death line read: probe /health at once
    while True:
        if stop.is_set():
            return outcome(child, EndKind.STOPPED, "stop requested")
        if reload is not None and reload.is_set():
            reload.clear()
            return outcome(child, EndKind.RELOAD, "SIGHUP")
        try:
            message = child.pump.messages.get(timeout=0.5)
        except queue.Empty:
            message = None
        event = message.event if message is not None and message.mark is Mark.LINE else None
        if event is not None and event.kind is EventKind.FAILURE and event.failure in (ENGINE_DEAD, DISTRIBUTED_INIT):
            suspect, next_probe = event.message, clock()
        if message is EOF or child.popen.poll() is not None:
            child.pump.join(timeout=2.0)
            return outcome(child, EndKind.ENGINE_DEAD, f"vLLM exited with {child.popen.wait()} while serving")
        tick()
        now = clock()
        if now >= next_snapshot:
            child.remember_descendants()
            next_snapshot = now + 10.0
        answered = completion.finished() if completion is not None else None
        if completion is not None and answered is not None:
            # A wedged engine answers /health: its failed completions count on their own, not reset by it.
            retry_at_once = False
            if answered.ok:
                wedged = 0
            elif answered.verdict is Verdict.BUSY:
                # Tokens flowed while our probe waited in the queue: busy, not wedged. Nothing counts.
                log.info("serving.busy", **_work_fields(answered), failures=wedged, of=failures)
            else:
                wedged += 1
                retry_at_once = True
                if answered.verdict is Verdict.UNKNOWN and not warned_no_metrics:
                    warned_no_metrics = True
                    log.warning("serving.no_metrics", reason="/metrics has no vllm:num_requests_* or "
                                "vllm:generation_tokens series: every failed completion counts")
                log.warning("serving.completion_failed", failures=wedged, of=failures,
                            verdict=str(answered.verdict), **_work_fields(answered))
            completion.next_at = now + (0.0 if retry_at_once else completion.interval_s)
            if wedged >= failures:
                return outcome(child, EndKind.ENGINE_DEAD, f"/health answers but {wedged} 1-token completions in a row "
                                                     "failed while vLLM generated no token "
                                                     "(launcher.health.completion_interval): the engine is wedged")
        if now >= next_probe:
            next_probe = now + interval_s
            if probe_health().ok:
                if suspect is not None:
                    log.warning("serving.death_line_ignored", line=suspect[:300],
                                reason="/health still answers and vLLM runs: not vLLM's own record")
                    suspect = None
                failed = 0
                if completion is not None and completion.due(now):
                    completion.start()
            else:
                failed += 1
                if suspect is not None:
                    return outcome(child, EndKind.ENGINE_DEAD, suspect)
        if failed >= failures:
            return outcome(child, EndKind.ENGINE_DEAD, f"/health failed {failed} times in a row")


def _work_fields(result: ProbeResult) -> dict[str, float]:
    """The counters behind a verdict, for the log line that states it."""
    fields: dict[str, float] = {}
    for label, work in (("before", result.before), ("after", result.after)):
        if work is not None:
            fields.update({f"running_{label}": work.running, f"waiting_{label}": work.waiting,
                           f"generated_{label}": work.generated})
    return fields


def read_metrics(base_url: str, timeout_s: float, ca_file: str | None = None) -> Reading:
    """vLLM's /metrics once: not answering is evidence; answering without vLLM's series is none."""
    try:
        status, body = health.get(f"{base_url}/metrics", timeout=timeout_s, ca_file=ca_file)
    except health.PROBE_ERRORS:
        return Reading(False, None)
    if status >= 500:
        return Reading(False, None)
    return Reading(True, parse_work(body[:_MAX_METRICS_BYTES].decode("utf-8", errors="replace"))
                   if status == 200 else None)


def serve(session: Session) -> Ending:
    """Watch the ready child until it dies or we are stopped."""
    if session.ready is None:
        raise Stopped  # nothing is serving
    child = session.ready.child
    policy = session.profile.launcher.health
    plan = child.plan
    api_key = session.vllm.secrets.get("VLLM_API_KEY")
    # A headless rank probes its head on another node: there is no socket table of ours to prove it by.
    ours = None if session.config.worker else functools.partial(listener.verify_connection, ours=child.live_pids)

    def send_completion() -> health.Probe:
        return health.check_completion(plan.base_url, plan.served_model_name, api_key,
                                       timeout=policy.completion_timeout_s, ca_file=plan.ca_file, verify=ours)

    # A worker rank watches its head's /health: a head that is gone means the group is gone; restart the rank.
    completion = None if session.config.worker else CompletionCheck(
        send_completion, policy.completion_interval_s, time.monotonic,
        read_metrics=lambda: read_metrics(plan.base_url, policy.timeout_s, plan.ca_file))
    return watch(child, session.stop,
                 probe_health=lambda: health.check_health(plan.base_url, policy.timeout_s, ca_file=plan.ca_file,
                                                          verify=ours),
                 interval_s=policy.interval_s, failures=policy.failures, tick=upkeep.Upkeep(session, child).tick,
                 reload=session.reload, completion=completion)


def restart_or_give_up(session: Session, child: Child, outcome: Ending) -> None:
    """The engine died while serving: stop what is left of `child`, back off, and let the daemon start again (or
    give up)."""
    policy = session.profile.launcher.restart
    log.error("restart.engine_dead", attempt=outcome.attempt, detail=outcome.detail,
              root_cause=outcome.diagnosis.root_cause, returncode=outcome.returncode)
    upkeep.stop(session, child, FAILED_ATTEMPT_GRACE_S)
    now = time.monotonic()
    session.restarts = [t for t in session.restarts if now - t < policy.window_s] + [now]
    session.store.record_decision(Decision(outcome.attempt, ENGINE_DEAD, "restart with the same flags",
                                           f"engine_dead: {outcome.detail}"), counter="restarts")
    if len(session.restarts) > policy.max_restarts:
        raise LadderExhausted(f"the engine died {len(session.restarts)} times within "
                              f"{format_duration(policy.window_s)} (launcher.restart.max {policy.max_restarts}); "
                              f"last: {outcome.detail}")
    delay = Backoff(policy.backoff_min_s, policy.backoff_max_s).delay(len(session.restarts))
    session.store.update(phase=Phase.RESTARTING)
    session.notify(STATUS=f"engine died; restarting in {delay:.0f}s ({len(session.restarts)}/{policy.max_restarts})")
    log.info("restart.backoff", seconds=delay, restarts=len(session.restarts))
    if session.wait(delay):
        raise Stopped
