"""Fold log events into one diagnosis: the failure class, its root-cause line, its numbers.

The same fold runs live (the supervisor feeds it every line) and offline (`vllm-launch diagnose LOGFILE`).

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
import functools
import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from launcher.vllm.classify import TRACEBACK_WORDS, normalize, read_line
from launcher.vllm.phases import PhaseClock, line_time, timed
from launcher.vllm.signatures import (
    CONFIG,
    DISTRIBUTED_INIT,
    ENGINE_DEAD,
    KV_INSUFFICIENT,
    OK,
    STARTUP_MEMORY,
    UNKNOWN,
    FailureClass,
    LogEvent,
)
from launcher.vllm.versions import DEFAULT_BLOCK_SIZE


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """What a log says happened, as data the ladder can act on."""

    cls: FailureClass
    reason: str | None = None  # config reasons (tool_parser, port_in_use, …) and sub-kinds
    root_cause: str | None = None
    numbers: Mapping[str, Any] = field(default_factory=dict)
    state: str = "starting"  # how far the server got: starting, serving, stopped
    line_number: int | None = None
    warnings: tuple[str, ...] = ()  # failure lines that progress afterwards acquitted
    evidence: str | None = None  # what convicted the failure: traceback, engine_start_failed, same_class, …

    @property
    def failed(self) -> bool:
        return self.cls != OK

    def to_dict(self) -> dict[str, Any]:
        return {"class": self.cls, "reason": self.reason, "root_cause": self.root_cause,
                "numbers": dict(self.numbers), "state": self.state, "line": self.line_number,
                "evidence": self.evidence, "warnings": list(self.warnings)}


# The numbers a diagnosis reports (documented in docs/commands.md); other captured values stay internal.
REPORTED_NUMBERS = (
    "kv_tokens", "max_concurrency", "concurrency_len", "estimated_max_model_len", "available_kv_gib",
    "model_loading_gib", "free_gib", "total_gib", "requested_gib", "utilization", "needed_gib", "max_model_len",
    "derived_max_model_len", "vllm_version", "valid_tool_parsers", "tool_parser", "kv_cache_memory_fit",
    "kv_cache_memory_full", "gpu_blocks", "kv_tokens_from_blocks", "estimate_derived_by_launcher", "world_size",
    "gpus", "tried", "arguments", "argument", "package", "weights_gib", "activation_gib", "non_torch_gib", "cudagraph_gib",
)
# Numbers that describe the server's capacity. With TP/PP every rank prints its own line and the
# engine uses the smallest, so these keep the minimum; a new start in the same log starts afresh.
_PER_RANK_MIN = ("kv_tokens", "max_concurrency", "available_kv_gib", "gpu_blocks")
_CAPACITY_KEYS = ("concurrency_len", "model_loading_gib", "vllm_version", "kv_cache_memory_fit",
                  "kv_cache_memory_full", "weights_gib", "activation_gib", "non_torch_gib", "cudagraph_gib")
# Where a CUDA out-of-memory happened, from the traceback's frames and vLLM's "processing method X".
_OOM_PHASES = (
    ("sampler_warmup", ("_dummy_sampler_run", "sampler_warmup")),
    ("cuda_graphs", ("capture_model", "_capture_cudagraphs", "capture_end", "capture_begin", "cuda.graph(")),
    ("profiling", ("profile_run", "determine_num_available_blocks", "determine_available_memory")),
    ("weights", ("load_model", "load_weights", "create_weights", "process_weights_after_loading", "repack",
                 "initialize_model")),
)
_PHASE_REASON = {"weights": "weights", "profiling": "profiling", "cuda_graphs": "cuda_graphs"}
_FRAME = re.compile(r'File "[^"]*", line \d+, in (\w+)|processing method (\w+)|(torch\.cuda\.graph\()')
_HINT_WINDOW = 80  # lines before the out-of-memory line whose frames still describe it
# Lines that show the start-up moving on: a failure line read before one of these did not end it.
ACQUITTING = frozenset({"progress", "model_loading", "kv_tokens", "concurrency", "available_kv", "gpu_blocks",
                        "memory_budget", "server_starting", "startup_complete", "joined"})
# Lines that show that a start-up happened at all (a pasted error without any of these is never `ok`).
_STARTUP_EVIDENCE = ACQUITTING | {"request", "serving", "version", "joined"}
# Lines a rank prints only inside an assembled group (vLLM forms the group before it loads the model).
_JOINED = frozenset({"joined", "model_loading", "available_kv", "kv_tokens"})
# An exception line, `[module.]TypeError: text`: the last line of a traceback.
_EXCEPTION_FORM = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)\b")
_TRACEBACK = TRACEBACK_WORDS[3]  # "Traceback (most recent call last)"
_CHAINED = ("The above exception was the direct cause of the following exception",
            "During handling of the above exception, another exception occurred")
_TRACEBACK_SPAN = 400  # lines after a traceback's header in which its final exception is looked for
_MAX_WARNINGS = 20
_MAX_TRACEBACKS = 64  # processes whose open traceback is remembered
# Failures a server can still meet after "Application startup complete": uvicorn binds its port after it.
_AFTER_STARTUP_REASONS = frozenset({"port_in_use"})
# A rank's name without its index: `Worker_TP1` and `Worker_TP0` are ranks of one kind, `EngineCore_DP0` too.
_RANK_SUFFIX = re.compile(r"[_ ]?(?:TP|PP|DP|EP|rank)?\d+$")  # one suffix; linear on any name


@functools.lru_cache(maxsize=256)  # a log names a few processes, each on every line it prints; bounded for any other
def _rank_kind(name: str) -> str:
    """`Worker_PP0_TP1` → `Worker`: the name without its rank suffixes (at most three are stripped)."""
    for _ in range(3):
        stripped = _RANK_SUFFIX.sub("", name, count=1)
        if stripped == name:
            break
        name = stripped
    return name


def _sibling_ranks(accused: LogEvent, other: LogEvent) -> bool:
    """Two different processes of the same kind (TP/PP/DP ranks): one's progress says nothing of the other's
    failure, since every rank loads and profiles on its own."""
    if accused.proc is None or other.proc is None or (accused.proc, accused.pid) == (other.proc, other.pid):
        return False
    return _rank_kind(accused.proc) == _rank_kind(other.proc)


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
        self.lines = 0
        self.hints: deque[tuple[int, str]] = deque(maxlen=256)  # (line number, frame or method name)
        self.last_exception_line = 0
        self.last_progress_line = 0
        self.started = False  # any line that shows a start-up happened (version, progress, capacity, serving)
        self.errors = 0  # ERROR/CRITICAL records and exception lines seen
        self.first_error: str | None = None  # the first ERROR/CRITICAL record, as its message
        self.confirmed: str | None = None  # what convicted the standing failure (None: only accused)
        self.acquitted: list[LogEvent] = []
        self.tracebacks: dict[str | None, int] = {}  # process prefix → line of its open traceback's header
        self.joined = False  # this rank is part of an assembled group: its place in the world, or it loads
        self.completed = False  # the start-up completed ("Application startup complete") or requests were served

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
        self.failure = self.failure_line = self.phase_at_failure = None
        return event

    def _warn(self, event: LogEvent) -> None:
        if len(self.acquitted) < _MAX_WARNINGS:  # a log that repeats one harmless line stays small in state
            self.acquitted.append(event)

    def expect_shutdown(self) -> None:
        """The launcher itself is stopping the server: engine-death lines are not failures then."""
        self.shutting_down = True

    def feed(self, line: str) -> LogEvent | None:
        self.lines += 1
        # read_line's one search tells the lines that hold none of the words below (most of a log), and their
        # event; it reads a line's first 64 KiB, so a longer line is looked at here in any case.
        event, words = read_line(line)
        if words or len(line) > 4096:
            self._traceback_words(line)
        if event is not None:
            self.observe(event)
        return event

    def _traceback_words(self, line: str) -> None:
        """Frames, traceback headers and error records: what the fold reads of a line besides its event."""
        if ("File \"" in line or "processing method" in line or "cuda.graph(" in line) and len(line) < 4096:
            found = _FRAME.search(line)
            if found:
                self.hints.append((self.lines, found.group(1) or found.group(2) or found.group(3)))
        if _TRACEBACK in line and len(line) < 4096:
            if len(self.tracebacks) >= _MAX_TRACEBACKS:  # hostile lines naming endless processes stay bounded
                self.tracebacks.clear()
            self.tracebacks[normalize(line)[0]] = self.lines
        elif self.confirmed == "traceback" and (_CHAINED[0] in line or _CHAINED[1] in line) \
                and self.lines - (self.failure_line or 0) <= 3:
            # The failure was only a cause: another exception follows, and that one ends the traceback.
            self.confirmed = None
        if "ERROR" in line or "CRITICAL" in line:
            if not self.errors:
                self.first_error = normalize(line[:4096])[2].strip()
            self.errors += 1

    def _ends_traceback(self, event: LogEvent) -> bool:
        """The event is the final exception of a traceback its process printed (and closes that traceback)."""
        opened = self.tracebacks.get(event.proc)
        if opened is None or self.lines - opened > _TRACEBACK_SPAN or not _EXCEPTION_FORM.match(event.message):
            return False
        del self.tracebacks[event.proc]
        return True

    def observe(self, event: LogEvent) -> None:
        kind = event.kind
        if kind == "request" and self.completed and self.started and not event.values:
            # A served request once the start-up is known complete (a serving vLLM's access log: most events of
            # a long log) moves only the last progress: the rest below would set what is already set.
            self.last_progress_line = self.lines
            return
        if kind == "failure":
            self._failure(event)
        elif kind == "exception":
            if not self.errors:
                self.first_error = event.message
            self.errors += 1
            self._ends_traceback(event)
            if "initialization failed" not in event.message:
                self.last_exception = event
                self.last_exception_line = self.lines
        elif kind == "shutdown":
            self.shutting_down = True
        elif kind in ("server_starting", "startup_complete", "request", "serving"):
            self.serving = True
            # Only the start-up's end, or a request that reached the server, completes it: a request-path module
            # (kind "serving") also logs while the server is still being set up.
            self.completed = self.completed or kind in ("startup_complete", "request")
        elif kind == "progress":
            self.phase = str(event.values.get("phase", self.phase))
        if kind in _STARTUP_EVIDENCE:
            self.started = True
        if kind in _JOINED:
            self.joined = True
        if kind in ACQUITTING and self.failure is not None and not _sibling_ranks(self.failure, event):
            self.acquit()
        if kind not in ("failure", "exception"):
            self.last_progress_line = self.lines
        if kind == "version" and "vllm_version" in event.values and self.failure is None:
            for key in _PER_RANK_MIN:  # a new start of vLLM in the same log: its capacity replaces the last
                self.numbers.pop(key, None)
        for key, value in event.values.items():
            if key in _PER_RANK_MIN and isinstance(value, int | float) and isinstance(self.numbers.get(key), int | float):
                self.numbers[key] = min(self.numbers[key], value)
            elif key in _PER_RANK_MIN or key in _CAPACITY_KEYS or kind == "kv_detail" or key not in self.numbers:
                self.numbers[key] = value

    def _failure(self, event: LogEvent) -> None:
        if event.failure == DISTRIBUTED_INIT and self.completed:
            # The group formed long ago: NCCL failing under a serving engine is that engine's death.
            event = dataclasses.replace(event, failure=ENGINE_DEAD)
        if event.failure == ENGINE_DEAD and self.shutting_down:
            return
        ends_traceback = self._ends_traceback(event)
        if self.completed and event.failure != ENGINE_DEAD and event.reason not in _AFTER_STARTUP_REASONS:
            # Once vLLM served, a start-up class (a model, memory or KV-cache line) describes no start-up: one
            # request's error, or another program's lines in the same file. It is a warning, never a verdict.
            self._warn(event)
            return
        if event.fatal == "specific":
            if self.failure is None or (self.confirmed is None and ends_traceback
                                        and event.failure != self.failure.failure):
                # The first failure line stands; a traceback that ends in another failure replaces a mere accusation.
                self.failure, self.failure_line = event, self.lines
                self.phase_at_failure = self.phase
                if ends_traceback:
                    self.confirmed = "traceback"
                elif self.generic is not None:
                    self.confirmed = "engine_start_failed"  # vLLM said the engine failed before naming the cause
            elif self.confirmed is None and event.failure == self.failure.failure:
                self.confirmed = "traceback" if ends_traceback else "same_class"
        else:
            if self.generic is None:
                self.generic, self.generic_line = event, self.lines
            self.convict("engine_start_failed")  # vLLM's own word that the start-up failed

    def diagnosis(self) -> Diagnosis:
        """The verdict of the log so far; a standing accusation counts (the log, or the process, ended on it)."""
        # The failure's own numbers (its max_model_len, free memory) win over earlier capacity lines.
        numbers = MappingProxyType(self._derived_numbers({**self.numbers,
                                                          **(self.failure.values if self.failure else {})}))
        state = "stopped" if self.shutting_down else "serving" if self.serving else "starting"
        warnings = tuple(event.message for event in self.acquitted)
        if self.failure is not None:
            event = self.failure
            reason = event.reason
            if reason is None and event.failure == STARTUP_MEMORY:
                reason = self._oom_phase()
            return Diagnosis(event.failure or UNKNOWN, reason, event.message, numbers, state, self.failure_line,
                             warnings, self.confirmed or "accused")
        if self.generic is not None:
            cause = self.last_exception or self.generic
            cls = ENGINE_DEAD if self.generic.failure == ENGINE_DEAD else UNKNOWN
            return Diagnosis(cls, None, cause.message, numbers, state, self.generic_line, warnings,
                             "engine_start_failed")
        if self.last_exception is not None and not self.serving and self.last_exception_line > self.last_progress_line:
            # The log ends in a traceback no signature knows: vLLM failed, the cause is that exception.
            return Diagnosis(UNKNOWN, None, self.last_exception.message, numbers, state, self.last_exception_line,
                             warnings, "log_end")
        if self.errors and not self.started:
            # A pasted error with no sign of a start-up: nothing shows that this server ever worked.
            return Diagnosis(UNKNOWN, None, self.first_error, numbers, state, None, warnings, "no_startup")
        return Diagnosis(OK, None, None, numbers, state, None, warnings)

    def _oom_phase(self) -> str | None:
        """The start-up phase an out-of-memory happened in: its traceback first, then the log's progress."""
        start = (self.failure_line or 0) - _HINT_WINDOW
        names = [name for line, name in self.hints if line >= start]
        for name in names:
            for phase, markers in _OOM_PHASES:
                if any(marker in name for marker in markers):
                    return phase
        return _PHASE_REASON.get(self.phase_at_failure or "")

    def _derived_numbers(self, numbers: dict[str, Any]) -> dict[str, Any]:
        if "model_loading_gb" in numbers:  # 0.6–0.7 print GiB labelled "GB"
            numbers.setdefault("model_loading_gib", numbers.pop("model_loading_gb"))
        if "kv_tokens" not in numbers and "gpu_blocks" in numbers:
            numbers["kv_tokens"] = numbers["gpu_blocks"] * self.block_size
            numbers["kv_tokens_from_blocks"] = True
        if ("estimated_max_model_len" not in numbers and self.failure is not None
                and self.failure.failure == KV_INSUFFICIENT and numbers.get("needed_gib")):
            # 0.8.4–0.8.5 lost the estimate from the message: derive it from the two sizes.
            ratio = numbers["available_kv_gib"] / numbers["needed_gib"]
            tokens = int(ratio * numbers["max_model_len"])
            numbers["estimated_max_model_len"] = tokens // self.block_size * self.block_size
            numbers["estimate_derived_by_launcher"] = True
        if "valid_tool_parsers" in numbers:
            numbers["valid_tool_parsers"] = list(numbers["valid_tool_parsers"])
        return {key: numbers[key] for key in REPORTED_NUMBERS if key in numbers}


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


def is_config(diagnosis: Diagnosis) -> bool:
    return diagnosis.cls == CONFIG
