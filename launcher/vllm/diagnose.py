"""Fold log events into one diagnosis: the failure class, its root-cause line, its numbers.

The same fold runs live (the supervisor feeds it every line) and offline (`vllm-launch diagnose LOGFILE`). What a
reader takes from more than one line (tracebacks per process, wrapped messages, a pipeline's stages) is paste.py's;
an exception no signature knows is judged by vLLM's own raise site (raise_sites.py).

A failure line *accuses*; it does not convict. vLLM prints ERROR lines it survives (a retried Hub
lookup, an optional feature's traceback), so a line only makes a candidate:
- the log convicts it when a traceback ends in an exception that carries the failure (the candidate
  itself, or a later line of the same class), or vLLM's engine-start failure line follows;
- progress after it (weights, KV-cache lines, graph capture, the server starting) acquits it: the
  line is kept as a warning, and the start-up goes on;
- the supervisor convicts it too when the process exits or stays silent for `launcher.confirm_window`
  (run/readiness.py); offline, a log that ends on a standing candidate is convicted by its end.
Confirmation changes *whether* the launcher acts, never *what* it does: the class is the candidate's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from launcher.vllm import deaths, paste, raise_sites, signatures
from launcher.vllm.classify import normalize, read_line
from launcher.vllm.diagnosis import Diagnosis, reported_numbers
from launcher.vllm.phases import PhaseClock, line_time, timed
from launcher.vllm.signature_kit import EXCEPTION_LINE, PYDANTIC, PYDANTIC_ASSERTION
from launcher.vllm.signatures import (
    DISTRIBUTED_INIT,
    ENGINE_DEAD,
    KV_INSUFFICIENT,
    OK,
    STARTUP_MEMORY,
    UNKNOWN,
    EventKind,
    LogEvent,
)
from launcher.vllm.versions import DEFAULT_BLOCK_SIZE

# Numbers that describe the server's capacity. With TP/PP every rank prints its own line and the engine uses the
# smallest, so these keep the minimum; a new start in the log clears them, and the weights figure (the first rank's).
_PER_RANK_MIN = frozenset({"kv_tokens", "max_concurrency", "available_kv_gib", "gpu_blocks"})
_CAPACITY_KEYS = frozenset({"concurrency_len", "vllm_version", "kv_cache_memory_fit", "max_model_len", "utilization",
                            "kv_cache_memory_full", "weights_gib", "activation_gib", "non_torch_gib", "cudagraph_gib"})
# Lines that show the start-up moving on: a failure line read before one of these did not end it.
ACQUITTING = frozenset({EventKind.PROGRESS, EventKind.MODEL_LOADING, EventKind.KV_TOKENS, EventKind.CONCURRENCY,
                        EventKind.AVAILABLE_KV, EventKind.GPU_BLOCKS, EventKind.MEMORY_BUDGET, EventKind.SERVER_STARTING,
                        EventKind.STARTUP_COMPLETE, EventKind.JOINED})
# Lines that show that a start-up happened at all (a pasted error without any of these is never `ok`).
_STARTUP_EVIDENCE = ACQUITTING | {EventKind.REQUEST, EventKind.SERVING, EventKind.VERSION, EventKind.JOINED}
# Lines a rank prints only inside an assembled group (vLLM forms the group before it loads the model).
_JOINED = frozenset({EventKind.JOINED, EventKind.MODEL_LOADING, EventKind.AVAILABLE_KV, EventKind.KV_TOKENS})
# Lines that show a server up, or answering.
_SERVING = frozenset({EventKind.SERVER_STARTING, EventKind.STARTUP_COMPLETE, EventKind.REQUEST, EventKind.SERVING})
# Kinds bound once: `EventKind.X` is a class-attribute lookup per use, 7x an identity test (observe: 1 line in 3).
_FAILURE, _EXCEPTION, _REQUEST, _SHUTDOWN, _PROGRESS, _WAITING, _VERSION, _KV_DETAIL, _COMPLETE, _INFO = (
    EventKind.FAILURE, EventKind.EXCEPTION, EventKind.REQUEST, EventKind.SHUTDOWN, EventKind.PROGRESS, EventKind.WAITING,
    EventKind.VERSION, EventKind.KV_DETAIL, EventKind.STARTUP_COMPLETE, EventKind.INFO)
_WORKER_FAILED = paste.WORKER_FAILED
_CHAINED = ("The above exception was the direct cause of the following", "During handling of the above exception")
_MAX_WARNINGS = 20
# vLLM's 60-second shared-memory wait, this often with no progress between: stalled (a long compile waits a few).
STALLED_WAITS = 10
# Failures a server can still meet after "Application startup complete": uvicorn binds its port after it.
_AFTER_STARTUP_REASONS = frozenset({"port_in_use"})
class Diagnoser:
    """Stateful fold over a log; `decided` turns true on the first specific fatal line."""

    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        self.block_size = block_size
        self.numbers: dict[str, Any] = {}
        self.failure: LogEvent | None = None
        self.failure_line: int | None = None
        self.generic: LogEvent | None = None
        self.generic_line: int | None = None
        self.last_exception: LogEvent | None = None
        self.shutting_down = False  # a shutdown was requested: EngineDeadError is then expected
        self.serving = False
        self.phase: str | None = None
        self.phase_at_failure: str | None = None
        self.lines = self.last_exception_line = self.last_progress_line = 0
        self.started = False  # any line that shows a start-up happened (version, progress, capacity, serving)
        self.errors = 0  # ERROR/CRITICAL records and exception lines seen
        self.first_error: str | None = None  # the first ERROR/CRITICAL record, as its message
        self.confirmed: str | None = None  # what convicted the standing failure (None: only accused)
        self.acquitted: list[LogEvent] = []
        self.tracebacks = paste.Tracebacks()  # every process's open traceback, its frames, the module that raised
        self.last_exception_module: str | None = None
        self.pointed = False  # the standing failure's root cause is the exception its pointer line pointed at
        self.only_cause = False  # the standing failure is the cause of an exception chained after it
        self.error_text: tuple[str, int] | None = None  # the latest error line a process printed, and its number
        self.last_acquitted: tuple[LogEvent, int | None, str | None] | None = None  # with its line and phase
        self.line = self.previous = ""  # the line being read (its pipeline stage, `[Stage-1]`), and the one before
        self.failure_stage: str | None = None
        self.wrapped = paste.Wrapped()  # the failure or exception a wrapped next line may continue
        self.joined = False  # this rank is part of an assembled group: its place in the world, or it loads
        self.completed = False  # the start-up completed ("Application startup complete") or requests were served
        self.completed_line = self.worker_failed_line = 0  # where it completed; where a worker last said it failed
        # An API server's line was read (else `LLM(...)` in a script); where the engine said its init took N s.
        self.api_server, self.engine_ready_line = False, 0
        self.waits: list[int] = []  # lines where vLLM said a process waits, since the last progress
        # The last exception printed once the start-up completed, and its line: what a death after it died of.
        self.raised_serving: tuple[LogEvent, int] | None = None
        self.waiting = ""  # the last of them

    @property
    def decided(self) -> bool:
        """A failure the log itself has convicted: the attempt ends now."""
        return self.failure is not None and self.confirmed is not None

    @property
    def accused(self) -> bool:
        """A failure line stands, not yet convicted or acquitted: the supervisor watches the process."""
        return self.failure is not None and self.confirmed is None

    @property
    def pending(self) -> bool:
        """A generic fatal line was seen and the root cause has not shown up yet."""
        return self.failure is None and self.generic is not None

    def convict(self, evidence: str) -> None:
        """The process confirmed the standing failure (it exited, its engine died, it stayed silent)."""
        if self.failure is not None and self.confirmed is None:
            self.confirmed = evidence

    def acquit(self) -> LogEvent | None:
        """The start-up went on (a log line, or /health answered): the standing failure becomes a warning."""
        if self.failure is None or self.confirmed is not None:
            return None
        event = self.failure
        self._warn(event)
        # With the phase around it: the progress that seemed to acquit it (a bar flushed after it) tells it too.
        self.last_acquitted = (event, self.failure_line, self.phase_at_failure or self.phase)
        self.failure = self.failure_line = self.phase_at_failure = self.failure_stage = None
        self.wrapped.stop()
        return event

    def _warn(self, event: LogEvent) -> None:
        if len(self.acquitted) < _MAX_WARNINGS:  # a log that repeats one harmless line stays small in state
            self.acquitted.append(event)

    def expect_shutdown(self) -> None:
        """The launcher itself is stopping the server: engine-death lines are not failures then."""
        self.shutting_down = True

    def feed(self, line: str) -> LogEvent | None:
        self.lines += 1
        self.previous, self.line = self.line, line
        if self.wrapped.event is not None:  # a message the lines after it may continue
            joined = self.wrapped.take(line, self.lines)
            if joined is not None:
                self._joined(joined)
                return None
        # read_line tells the lines with no traceback or error word (most of a log); it reads 64 KiB of a line.
        event, words = read_line(line)
        if words or len(line) > 4096:
            self._traceback_words(line)
            if event is None and (PYDANTIC in line or PYDANTIC_ASSERTION in line) and not self.completed:
                event = paste.validation_error(line)
                if event is not None:
                    self.tracebacks.raised_in(event.proc, paste.PYDANTIC_MODULE)
        if event is not None:
            self.observe(event)
        return event

    def _traceback_words(self, line: str) -> None:
        """Frames, traceback headers and error records: what the fold reads of a line besides its event."""
        self.tracebacks.read(line, self.lines)
        if self.confirmed == "traceback" and (_CHAINED[0] in line or _CHAINED[1] in line) \
                and self.tracebacks.message_since(self.failure_line or 0, self.lines):
            # The failure was only a cause: another exception follows its message, and that one ends the traceback.
            self.confirmed, self.only_cause = None, True
        if self.failure is not None and not self.completed and signatures.is_native_crash(self.failure) \
                and paste.in_nccl_init(line) and paste.same_process(line, self.failure):
            self.failure = dataclasses.replace(self.failure, failure=DISTRIBUTED_INIT)  # it crashed forming the group
        if _WORKER_FAILED in line:
            self.worker_failed_line = self.lines
        if not self.api_server and paste.API_SERVER in line:
            self.api_server = True
        if ("rror" in line or "Failed" in line) and not self.completed:
            text = paste.error_text(line)
            self.error_text = (text, self.lines) if text is not None else self.error_text
        if "ERROR" in line or "CRITICAL" in line:
            if not self.errors:
                self.first_error = normalize(line[:4096])[2].strip()
            self.errors += 1

    def _joined(self, joined: paste.Joined) -> None:
        """A message read whole: a failure (an exception no signature knew), or more numbers of the standing one."""
        event = self.wrapped.event
        if event is None:
            return
        if event.kind is _EXCEPTION:
            whole = dataclasses.replace(joined.whole, proc=event.proc, pid=event.pid)
            self.wrapped.event = whole
            if whole.kind is not _EXCEPTION:
                self.observe(whole)
            elif self.last_exception is event:  # a bare type's message, read on the next line: the same exception
                self.last_exception = whole
                self.first_error = whole.message if self.first_error == event.message else self.first_error
            return
        self.numbers.update(joined.added)
        more = dataclasses.replace(event, values={**event.values, **joined.added})
        if self.failure is event:
            self.failure = more
        self.wrapped.event = more

    def observe(self, event: LogEvent) -> None:
        kind = event.kind
        if kind is _REQUEST and self.completed and self.started and not event.values:
            # A request once the start-up completed (most events of a long log) moves only the last progress.
            self.last_progress_line = self.lines
            return
        if kind is _FAILURE:
            self._failure(event)
        elif kind is _EXCEPTION:
            if not self.errors:
                self.first_error = event.message
            self.errors += 1
            self.tracebacks.ends(event, self.lines)
            deaths.exception_seen(self, event)
            if not paste.wraps_cause(event.message, self.last_exception):
                self.last_exception = event
                self.last_exception_line = self.lines
                # The innermost frame its process printed since its traceback began: the module that raised it.
                self.last_exception_module = self.tracebacks.module(event.proc)
                self.wrapped.start(event, self.lines)
        elif kind is _SHUTDOWN:
            self.shutting_down = self.shutting_down or deaths.stops_engine(self, event)
        elif kind in _SERVING:
            self.serving = True
            # Only the start-up's end, or a request that reached the server, completes it: a request-path module
            # (kind "serving") also logs while the server is still being set up.
            if not self.completed and (kind is _COMPLETE or kind is _REQUEST):
                self.completed, self.completed_line = True, self.lines
        elif kind is _PROGRESS:
            self.phase = str(event.values.get("phase", self.phase))
        elif kind is _INFO and "engine_init_s" in event.values:
            self.engine_ready_line = self.lines
        if kind in _STARTUP_EVIDENCE:
            self.started = True
        if kind in _JOINED:
            self.joined = True
        # A pipeline of several engines is judged per engine: one stage's progress acquits nothing another said.
        if (kind in ACQUITTING and self.failure is not None and not paste.sibling_ranks(self.failure, event)
                and self.failure_stage in (None, paste.stage_of(self.line))):
            self.acquit()
        if kind is _WAITING:
            # A process waits on another: never progress (see STALLED_WAITS).
            if self.waits and self.waits[0] < self.last_progress_line:
                self.waits.clear()
            self.waits += [self.lines] if len(self.waits) < STALLED_WAITS else []
            self.waiting = event.message
            return
        if kind is not _FAILURE and kind is not _EXCEPTION and (kind is not _PROGRESS or event.values.get("percent") != 0) \
                and not event.values.get("exit"):  # a bar at 0% (tqdm redraws it as it closes), an exit: no work done
            self.last_progress_line = self.lines
        if kind is _VERSION:
            # Its banner (or logo) names the API server; `LLM(...)` in a script prints neither.
            self.api_server = self.api_server or "server version" in event.message or paste.API_SERVER in (event.proc or "")
            if " with" in event.message and "max_model_len" not in event.values:
                self.wrapped.start(event, self.lines)  # the engine's config record, cut by a terminal: read it whole
            if "vllm_version" in event.values and self.failure is None:
                for key in (*_PER_RANK_MIN, "model_loading_gib"):  # a new start of vLLM in the same log: its capacity
                    self.numbers.pop(key, None)
        for key, value in event.values.items():
            if key in _PER_RANK_MIN and isinstance(value, int | float) and isinstance(self.numbers.get(key), int | float):
                self.numbers[key] = min(self.numbers[key], value)
            elif key in _PER_RANK_MIN or key in _CAPACITY_KEYS or kind is _KV_DETAIL or key not in self.numbers:
                self.numbers[key] = value

    def _failure(self, event: LogEvent) -> None:
        if self.completed and (event.failure == DISTRIBUTED_INIT or signatures.is_native_crash(event)):
            # The group formed long ago, or the process crashed: under a serving engine, its death.
            event = dataclasses.replace(event, failure=ENGINE_DEAD)
        if event.failure == ENGINE_DEAD and self.shutting_down:
            return
        ends_traceback = self.tracebacks.ends(event, self.lines)
        named = deaths.named(self, event)
        if named is None:
            return
        event = named
        if self.completed and event.failure != ENGINE_DEAD and event.reason not in _AFTER_STARTUP_REASONS:
            # Once vLLM served, a start-up class (a model, memory or KV-cache line) describes no start-up: one
            # request's error, or another program's lines in the same file. It is a warning, never a verdict.
            self._warn(event)
            return
        if event.fatal == "specific":
            if self.failure is None or (self.confirmed is None and ends_traceback
                                        and event.failure != self.failure.failure):
                # The first failure line stands; a traceback that ends in another failure replaces a mere accusation.
                self.failure, self.failure_line, self.pointed, self.only_cause = event, self.lines, False, False
                self.failure_stage = paste.stage_of(self.line)
                self.wrapped.start(event, self.lines)
                self.phase_at_failure = self.phase
                if ends_traceback:
                    self.confirmed = "traceback"
                elif self.generic is not None:
                    self.confirmed = "engine_start_failed"  # vLLM said the engine failed before naming the cause
            elif event.failure == self.failure.failure:
                if self.confirmed is None:
                    self.confirmed = "traceback" if ends_traceback else "same_class"
                if EXCEPTION_LINE.match(event.message) and (self.only_cause or not EXCEPTION_LINE.match(
                        self.failure.message) or (event.reason and not self.failure.reason)) \
                        and not paste.points_elsewhere(event.message):
                    # vLLM's exception says it better than a figure that accused or the one it chained from: the cause.
                    self.failure = dataclasses.replace(event, values={**self.failure.values, **event.values},
                                                       reason=event.reason or self.failure.reason)
                    self.only_cause, self.failure_line = False, self.lines
        else:
            if not self.completed and self.failure is not None and self.failure.message.startswith(paste.GENERIC_DEATHS):
                self.failure = self.failure_line = self.confirmed = None  # it said only that; vLLM now says why
            if self.generic is None or (self.generic.proc == event.proc and EXCEPTION_LINE.match(event.message)
                                        and not EXCEPTION_LINE.match(self.generic.message)):
                self.generic, self.generic_line = event, self.lines  # the exception ending the traceback says more
            self.convict("engine_start_failed")  # vLLM's own word that the start-up failed

    def diagnosis(self) -> Diagnosis:
        """The verdict of the log so far; a standing accusation counts (the log, or the process, ended on it)."""
        # The failure's own numbers (its max_model_len, free memory) win over earlier capacity lines.
        numbers = MappingProxyType(reported_numbers(
            {**self.numbers, **(self.failure.values if self.failure else {})}, self.block_size,
            kv_insufficient=self.failure is not None and self.failure.failure == KV_INSUFFICIENT))
        state = "stopped" if self.shutting_down else "serving" if self.serving else "starting"
        warnings = tuple(event.message for event in self.acquitted)
        if self.failure is not None:
            event = self.failure
            reason = event.reason
            if reason is None and event.failure == STARTUP_MEMORY:
                reason = self.tracebacks.oom_phase(self.failure_line or 0, self.phase_at_failure)
            return Diagnosis(event.failure or UNKNOWN, reason, event.message, numbers, state, self.failure_line,
                             warnings, self.confirmed or "accused")
        if self.generic is not None:
            cause = self.last_exception or self.generic
            # `LLM(...)` in a script: its engine said it was ready, then failed running the script's requests.
            ran = not self.api_server and 0 < self.engine_ready_line < (self.generic_line or 0)
            if self.generic.failure == ENGINE_DEAD or ran:
                return Diagnosis(ENGINE_DEAD, None, cause.message, numbers, state, self.generic_line, warnings,
                                 "engine_start_failed")
            return self._raised(cause, numbers, state, self.generic_line, warnings, "engine_start_failed")
        offline = not self.api_server and 0 < self.engine_ready_line < self.last_exception_line
        if self.last_exception is not None and not self.serving and self.last_exception_line > self.last_progress_line \
                and not offline:
            # The log ends in a traceback no signature knows: vLLM failed, the cause is that exception (unless an
            # offline engine said it was ready before it: then it is the script's own error).
            return self._raised(self.last_exception, numbers, state, self.last_exception_line, warnings, "log_end")
        open_since = self.tracebacks.open_since()
        if open_since > self.last_progress_line and self.started and not self.serving:
            # The log ends inside a traceback (its final exception never came: the process died, or the paste was
            # cut): the start-up failed. A failure line that progress seemed to acquit is its likeliest cause.
            if self.acquitted:
                cause, reason = self.acquitted[-1], self.acquitted[-1].reason
                if reason is None and cause.failure == STARTUP_MEMORY and self.last_acquitted is not None \
                        and self.last_acquitted[0] is cause:
                    reason = self.tracebacks.oom_phase(self.last_acquitted[1] or 0, self.last_acquitted[2])
                return Diagnosis(cause.failure or UNKNOWN, reason, cause.message, numbers, state, open_since,
                                 warnings[:-1], "log_end_in_traceback")
            return Diagnosis(UNKNOWN, None, self.first_error or "the log ends inside a traceback", numbers, state,
                             open_since, warnings, "log_end_in_traceback")
        if len(self.waits) >= STALLED_WAITS and self.waits[0] > self.last_progress_line and not self.completed:
            # Its last word, again and again with nothing between, is that a process waits (a rank hung): stalled.
            return Diagnosis(UNKNOWN, None, self.waiting, numbers, state, self.waits[0], warnings, "stalled")
        if self.errors and not self.started:
            # A pasted error with no sign of a start-up: nothing shows that this server ever worked.
            return Diagnosis(UNKNOWN, None, self.first_error, numbers, state, None, warnings, "no_startup")
        return Diagnosis(OK, None, None, numbers, state, None, warnings)

    def _raised(self, cause: LogEvent, numbers: Mapping[str, Any], state: str, line: int | None,
                warnings: tuple[str, ...], evidence: str) -> Diagnosis:
        """A start-up that failed on an exception no signature knows: what its raise site says (raise_sites.py)."""
        module = self.last_exception_module if cause is self.last_exception else None
        cached = self.numbers.get("compile_cache") == "hit" and self.tracebacks.through_cache(cause.proc)
        verdict = raise_sites.judge(cause.message, module, from_cache=cached)
        if verdict is None or verdict.cls == UNKNOWN:
            return Diagnosis(UNKNOWN, None, self.tracebacks.why(cause.message), numbers, state, line, warnings, evidence)
        numbers = {**(verdict.numbers or {}), **numbers}  # what the message states, where the log said nothing else
        return Diagnosis(verdict.cls, verdict.reason, self.tracebacks.why(cause.message), numbers, state, line, warnings,
                         f"{evidence}, raise site by {verdict.how}")


def diagnose_lines(lines: Iterable[str], block_size: int = DEFAULT_BLOCK_SIZE) -> Diagnosis:
    """Diagnose a whole log (the first failure wins, later capacity numbers win)."""
    diagnoser = Diagnoser(block_size)
    for line in lines:
        diagnoser.feed(line)
    return diagnoser.diagnosis()


def diagnose_log(lines: Iterable[str], block_size: int = DEFAULT_BLOCK_SIZE) -> tuple[Diagnosis, PhaseClock]:
    """`diagnose_lines`, and where the start-up's time went (each timed line at its own timestamp)."""
    diagnoser, clock = Diagnoser(block_size), PhaseClock()
    for line in lines:
        event = diagnoser.feed(line)
        if clock.first is None:
            clock.first = line_time(line)  # the start-up's total counts from the log's first timestamp
        if event is not None and timed(event):
            clock.feed(event, line_time(line))
    return diagnoser.diagnosis(), clock
