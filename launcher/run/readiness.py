"""Waiting for one attempt to become ready (/health, /v1/models, optionally a completion, or the log's verdict),
and the capacity gate a ready server must pass."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from launcher.config.profile import Requirements, parse_max_model_len
from launcher.run.logpump import EOF
from launcher.run.supervisor import Child, Outcome, outcome
from launcher.vllm.command import Plan
from launcher.vllm.diagnose import Diagnosis
from launcher.vllm.signatures import KV_INSUFFICIENT, LogEvent

# How long a generic fatal line ("EngineCore failed to start") waits for its root cause.
ROOT_CAUSE_WAIT_S = 2.0


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    """How to tell that the server is ready: /health, /v1/models, optionally a completion."""

    health: Callable[[], bool]
    models: Callable[[], tuple[bool, str, int | None]]
    completion: Callable[[], tuple[bool, str]] | None = None
    interval_s: float = 0.5


def wait_ready(child: Child, stop: threading.Event, check: ReadyCheck, *, on_event: Callable[[LogEvent], None],
               tick: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.monotonic,
               last_progress: Callable[[], float] = lambda: 0.0) -> Outcome:
    """Block until the server is ready, an attempt-ending line is read, it exits, stalls, or we are stopped.

    The first specific fatal line decides at once: vLLM can hang after a fatal error,
    or exit 0. A generic one ("EngineCore failed to start") waits briefly for its root cause.
    `startup_stall` counts from the last output line or the last `last_progress()` (a download's growth).
    """
    plan = child.plan
    deadline = child.started + plan.startup_timeout_s
    next_probe = clock()
    next_snapshot = clock()
    generic_since: float | None = None
    models_info: tuple[bool, str, int | None] = (False, "", None)
    while True:
        if stop.is_set():
            return outcome(child, "stopped", "stop requested")
        try:
            event = child.pump.events.get(timeout=0.1)
        except queue.Empty:
            event = None
        if event is not None and event is not EOF:
            on_event(event)
        tick()
        diagnoser = child.pump.diagnoser
        with child.pump.lock:
            decided, pending = diagnoser.decided, diagnoser.pending
        if decided:
            return outcome(child, "failed", "fatal log line")
        now = clock()
        if pending:
            generic_since = generic_since or now
            if now - generic_since >= ROOT_CAUSE_WAIT_S:
                return outcome(child, "failed", "start-up failed (no specific root cause)")
        if event is EOF or child.popen.poll() is not None:
            child.pump.join(timeout=2.0)
            return outcome(child, "failed", f"vLLM exited with {child.popen.wait()}")
        if now >= next_snapshot:
            child.remember_descendants()
            next_snapshot = now + 2.0
        silent = now - max(child.pump.last_output, last_progress())
        if silent >= plan.startup_stall_s:
            return outcome(child, "timed_out", f"no output and no download progress for {silent:.0f}s "
                                                "(launcher.startup_stall)")
        if now >= deadline:
            return outcome(child, "timed_out", f"not ready after {plan.startup_timeout_s:.0f}s "
                                                "(launcher.startup_timeout)")
        if now >= next_probe:
            next_probe = now + check.interval_s
            if check.health():
                models_info = check.models()
                if models_info[0] and (check.completion is None or check.completion()[0]):
                    child.remember_descendants()
                    return outcome(child, "ready", models_info[1], max_model_len=models_info[2])


def capacity_gate(require: Requirements, outcome: Outcome, plan: Plan, block_size: int = 16) -> Outcome | None:
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
        return Outcome("failed", outcome.attempt, Diagnosis(KV_INSUFFICIENT, "auto_fit_edge", root, numbers,
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
    return Outcome("failed", outcome.attempt, diagnosis, None, outcome.tail, root)
