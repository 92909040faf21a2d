"""Fold log events into one diagnosis: the failure class, its root-cause line, its numbers.

The same fold runs live (the supervisor feeds it every line and acts on the first
fatal one) and offline (`vllm-launch diagnose LOGFILE`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from launcher.vllm import signatures
from launcher.vllm.signatures import CONFIG, ENGINE_DEAD, KV_INSUFFICIENT, OK, UNKNOWN, LogEvent

DEFAULT_BLOCK_SIZE = 16


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """What a log says happened, as data the ladder can act on."""

    cls: str  # ok, startup_memory, fp8_unsupported, kv_insufficient, no_cache_blocks, engine_dead, config, unknown
    reason: str | None = None  # config reasons (tool_parser, port_in_use, …) and sub-kinds
    root_cause: str | None = None
    numbers: Mapping[str, Any] = field(default_factory=dict)
    state: str = "starting"  # how far the server got: starting, serving, stopped
    line_number: int | None = None

    @property
    def failed(self) -> bool:
        return self.cls != OK

    def to_dict(self) -> dict[str, Any]:
        return {"class": self.cls, "reason": self.reason, "root_cause": self.root_cause,
                "numbers": dict(self.numbers), "state": self.state, "line": self.line_number}


# The numbers a diagnosis reports (documented in README); other captured values stay internal.
REPORTED_NUMBERS = (
    "kv_tokens", "max_concurrency", "concurrency_len", "estimated_max_model_len", "available_kv_gib",
    "model_loading_gib", "free_gib", "total_gib", "requested_gib", "utilization", "needed_gib", "max_model_len",
    "derived_max_model_len", "vllm_version", "valid_tool_parsers", "tool_parser", "kv_cache_memory_fit",
    "kv_cache_memory_full", "gpu_blocks", "kv_tokens_from_blocks", "estimate_derived_by_launcher", "world_size",
    "gpus", "tried", "arguments", "argument",
)
# Numbers that describe the server's capacity; later lines (a later attempt) replace earlier ones.
_CAPACITY_KEYS = ("kv_tokens", "max_concurrency", "concurrency_len", "available_kv_gib", "model_loading_gib",
                  "vllm_version", "gpu_blocks", "kv_cache_memory_fit", "kv_cache_memory_full")


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
        self.lines = 0

    @property
    def decided(self) -> bool:
        return self.failure is not None

    @property
    def pending(self) -> bool:
        """A generic fatal line was seen and the root cause has not shown up yet."""
        return self.failure is None and self.generic is not None

    def expect_shutdown(self) -> None:
        """The launcher itself is stopping the server: engine-death lines are not failures then."""
        self.shutting_down = True

    def feed(self, line: str) -> LogEvent | None:
        self.lines += 1
        event = signatures.classify(line)
        if event is not None:
            self.observe(event)
        return event

    def observe(self, event: LogEvent) -> None:
        kind = event.kind
        if kind == "failure":
            self._failure(event)
        elif kind == "exception":
            if "initialization failed" not in event.message:
                self.last_exception = event
        elif kind == "shutdown":
            self.shutting_down = True
        elif kind in ("server_starting", "startup_complete"):
            self.serving = True
        elif kind == "progress":
            self.phase = str(event.values.get("phase", self.phase))
        for key, value in event.values.items():
            if key in _CAPACITY_KEYS or key not in self.numbers:
                self.numbers[key] = value

    def _failure(self, event: LogEvent) -> None:
        if event.failure == ENGINE_DEAD and self.shutting_down:
            return
        if event.fatal == "specific":
            if self.failure is None:
                self.failure, self.failure_line = event, self.lines
        elif self.generic is None:
            self.generic, self.generic_line = event, self.lines

    def diagnosis(self) -> Diagnosis:
        # The failure's own numbers (its max_model_len, free memory) win over earlier capacity lines.
        numbers = self._derived_numbers({**self.numbers, **(self.failure.values if self.failure else {})})
        state = "stopped" if self.shutting_down else "serving" if self.serving else "starting"
        if self.failure is not None:
            event = self.failure
            return Diagnosis(event.failure or UNKNOWN, event.reason, event.message, MappingProxyType(numbers),
                             state, self.failure_line)
        if self.generic is not None:
            cause = self.last_exception or self.generic
            cls = ENGINE_DEAD if self.generic.failure == ENGINE_DEAD else UNKNOWN
            return Diagnosis(cls, None, cause.message, MappingProxyType(numbers), state, self.generic_line)
        return Diagnosis(OK, None, None, MappingProxyType(numbers), state, None)

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


def is_config(diagnosis: Diagnosis) -> bool:
    return diagnosis.cls == CONFIG
