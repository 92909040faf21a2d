"""After READY: watch the engine (its log, its exit, /health) and decide whether to restart it."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

import structlog

from launcher.errors import LadderExhausted
from launcher.run import health
from launcher.run.logpump import EOF
from launcher.run.session import Session, Stopped
from launcher.run.supervisor import FAILED_ATTEMPT_GRACE_S, Child, Outcome, outcome
from launcher.units import format_duration

log = structlog.get_logger("vllm_launch")


def watch(child: Child, stop: threading.Event, *, health: Callable[[], bool], interval_s: float, failures: int,
          tick: Callable[[], None], clock: Callable[[], float] = time.monotonic,
          reload: threading.Event | None = None) -> Outcome:
    """After READY: return when we are stopped, asked to reload, or the engine dies (log, exit, or failed
    health checks)."""
    failed = 0
    next_probe = clock() + interval_s
    next_snapshot = clock()
    while True:
        if stop.is_set():
            return outcome(child, "stopped", "stop requested")
        if reload is not None and reload.is_set():
            reload.clear()
            return outcome(child, "reload", "SIGHUP")
        try:
            event = child.pump.events.get(timeout=0.5)
        except queue.Empty:
            event = None
        if event is not None and event.kind == "failure" and event.failure == "engine_dead":
            return outcome(child, "engine_dead", event.message)
        if event is EOF or child.popen.poll() is not None:
            child.pump.join(timeout=2.0)
            return outcome(child, "engine_dead", f"vLLM exited with {child.popen.wait()} while serving")
        tick()
        now = clock()
        if now >= next_snapshot:
            child.remember_descendants()
            next_snapshot = now + 10.0
        if now >= next_probe:
            next_probe = now + interval_s
            failed = 0 if health() else failed + 1
            if failed >= failures:
                return outcome(child, "engine_dead", f"/health failed {failed} times in a row")


def serve(session: Session) -> Outcome:
    """Watch the ready child until it dies or we are stopped."""
    child = session.child
    if child is None:
        raise Stopped  # the child was stopped while becoming ready
    policy = session.profile.launcher.health
    plan = child.plan
    return watch(child, session.stop, health=lambda: health.check_health(plan.base_url, policy.timeout_s).ok,
                 interval_s=policy.interval_s, failures=policy.failures, tick=lambda: session.tick(child),
                 reload=session.reload)


def restart_or_give_up(session: Session, outcome: Outcome) -> None:
    """The engine died while serving: stop what is left, back off, and let the daemon start again (or give up)."""
    policy = session.profile.launcher.restart
    log.error("restart.engine_dead", attempt=outcome.attempt, detail=outcome.detail,
              root_cause=outcome.diagnosis.root_cause, returncode=outcome.returncode)
    session.stop_child(FAILED_ATTEMPT_GRACE_S)
    session.serving = False
    now = time.monotonic()
    session.restarts = [t for t in session.restarts if now - t < policy.window_s] + [now]
    session.store.record_decision("restarts", attempt=outcome.attempt, change="restart with the same flags",
                                  reason=f"engine_dead: {outcome.detail}", **{"class": "engine_dead"})
    if len(session.restarts) > policy.max_restarts:
        raise LadderExhausted(f"the engine died {len(session.restarts)} times within "
                              f"{format_duration(policy.window_s)} (launcher.restart.max {policy.max_restarts}); "
                              f"last: {outcome.detail}")
    delay = min(policy.backoff_max_s, policy.backoff_min_s * 2 ** (len(session.restarts) - 1))
    session.store.update(phase="restarting")
    session.notify(STATUS=f"engine died; restarting in {delay:.0f}s ({len(session.restarts)}/{policy.max_restarts})")
    log.info("restart.backoff", seconds=delay, restarts=len(session.restarts))
    if session.stop.wait(delay):
        raise Stopped
