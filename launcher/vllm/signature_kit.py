"""What a signature is and the helpers that build one: the failure classes, the event kinds, `LogEvent`,
`Signature`, `_sig` and the converters that turn a match's groups into numbers. The tables are
`launcher.vllm.signatures` and `launcher.vllm.config_signatures`; a configuration failure's reasons are
`launcher.vllm.config_reasons`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

# An exception line, `[module.]TypeError: text`: the last line of a traceback (`type`, and `text` after ": "). The type
# is named as exceptions are (`…Error`, `…Exception`, `…Interrupt`), or is any class of a module that holds a package's
# exceptions (`triton.runtime.errors.OutOfResources`, `torch._dynamo.exc.Unsupported`).
EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?(?P<type>\w*(?:Error|Exception|Interrupt)|(?:(?<=\.errors\.)|(?<=\.exc\.)"
                            r"|(?<=\.exceptions\.))[A-Z]\w*)(?:: (?P<text>.*))?$")
PYDANTIC = "Value error, "  # how pydantic's ValidationError shows a ValueError its validator raised
PYDANTIC_ASSERTION = "Assertion failed, "  # and an assertion its validator made
# pydantic's words for what a validator of vLLM's config raised → the exception that is
PYDANTIC_FORMS = {PYDANTIC: "ValueError", PYDANTIC_ASSERTION: "AssertionError"}

class FailureClass(enum.StrEnum):
    """What ended a start-up (diagnose JSON `class`; the ladder's key). A StrEnum: logs and JSON keep the
    same strings."""

    OK = "ok"
    STARTUP_MEMORY = "startup_memory"
    FP8_UNSUPPORTED = "fp8_unsupported"
    KV_INSUFFICIENT = "kv_insufficient"
    NO_CACHE_BLOCKS = "no_cache_blocks"
    COMPILE_CACHE = "compile_cache"  # a corrupted torch.compile artifact from an earlier start
    DISTRIBUTED_INIT = "distributed_init"  # NCCL or torch.distributed could not form the group (before READY)
    ENGINE_DEAD = "engine_dead"
    CONFIG = "config"
    UNKNOWN = "unknown"


OK = FailureClass.OK
STARTUP_MEMORY = FailureClass.STARTUP_MEMORY
FP8_UNSUPPORTED = FailureClass.FP8_UNSUPPORTED
KV_INSUFFICIENT = FailureClass.KV_INSUFFICIENT
NO_CACHE_BLOCKS = FailureClass.NO_CACHE_BLOCKS
COMPILE_CACHE = FailureClass.COMPILE_CACHE
DISTRIBUTED_INIT = FailureClass.DISTRIBUTED_INIT
ENGINE_DEAD = FailureClass.ENGINE_DEAD
CONFIG = FailureClass.CONFIG
UNKNOWN = FailureClass.UNKNOWN


class EventKind(enum.StrEnum):
    """What one log line says (`LogEvent.kind`, `Signature.kind`). A StrEnum: logs and JSON keep the same strings."""

    FAILURE = "failure"  # a failure signature: `LogEvent.failure` holds its class
    EXCEPTION = "exception"  # an exception line no signature knows: the root cause when nothing better comes
    # capacity and memory: what the engine got
    KV_TOKENS = "kv_tokens"
    CONCURRENCY = "concurrency"
    GPU_BLOCKS = "gpu_blocks"
    AVAILABLE_KV = "available_kv"
    MEMORY_BUDGET = "memory_budget"
    MODEL_LOADING = "model_loading"
    KV_CACHE_MEMORY_HINT = "kv_cache_memory_hint"
    KV_DETAIL = "kv_detail"  # a wrapped KV-cache (or out-of-memory) failure's numbers, on the lines after it
    ENGINE_ARGS = "engine_args"  # the settings vLLM started with
    VERSION = "version"  # vLLM's version, and the engine's own view of its configuration
    JOINED = "joined"  # this rank's place in an assembled torch.distributed world
    INFO = "info"  # a duration vLLM reports (weights, torch.compile, engine init) or a compile-cache hit
    PROGRESS = "progress"  # the phase a start-up is in
    SERVER_STARTING = "server_starting"
    STARTUP_COMPLETE = "startup_complete"
    SERVING = "serving"  # a line only vLLM's request handling prints: the server serves
    REQUEST = "request"  # a client's request (access or request log) reached the server; its text carries nothing
    SHUTDOWN = "shutdown"
    # vLLM says a process has waited on another (its shared-memory broadcast, every 60 s): long work, or a hang.
    # Never progress: a start-up that prints only this is not moving (launcher.startup_stall counts through it).
    WAITING = "waiting"


NO_VALUES: Mapping[str, Any] = MappingProxyType({})  # an event with no numbers: one shared, read-only mapping


@dataclass(frozen=True, slots=True)
class LogEvent:
    """What one line says: a kind, its numbers, and whether it ends the attempt."""

    kind: EventKind
    message: str
    values: Mapping[str, Any] = field(default_factory=dict)
    failure: FailureClass | None = None  # for failure kinds
    reason: str | None = None  # a ConfigReason for a configuration failure, else the failure's sub-kind
    fatal: str | None = None  # "specific" (decide now) or "generic" (wait briefly for the root cause)
    proc: str | None = None  # vLLM's process prefix, `(Worker_TP1 pid=42)`: its name …
    pid: int | None = None  # … and its pid


def _event_maker() -> Callable[..., LogEvent]:
    """`LogEvent(kind, message, values, failure, reason, fatal, proc, pid)` at half the cost, for the classifier's
    path (a third of a log's lines make an event): a frozen dataclass's own `__init__` sets each field through
    `object.__setattr__`; this sets its slots directly. The same object: equal, frozen, every field given."""
    new = object.__new__
    s_kind, s_message, s_values, s_failure, s_reason, s_fatal, s_proc, s_pid = (
        LogEvent.__dict__[name].__set__ for name in ("kind", "message", "values", "failure", "reason", "fatal", "proc",
                                                     "pid"))

    def make(kind: EventKind, message: str, values: Mapping[str, Any], failure: FailureClass | None, reason: str | None,
             fatal: str | None, proc: str | None, pid: int | None) -> LogEvent:
        event: LogEvent = new(LogEvent)
        s_kind(event, kind)
        s_message(event, message)
        s_values(event, values)
        s_failure(event, failure)
        s_reason(event, reason)
        s_fatal(event, fatal)
        s_proc(event, proc)
        s_pid(event, pid)
        return event

    return make


new_event = _event_maker()


@dataclass(frozen=True, slots=True)
class Signature:
    kind: EventKind
    needle: str
    pattern: re.Pattern[str]
    failure: FailureClass | None = None
    reason: str | None = None  # a ConfigReason for a configuration failure, else the failure's sub-kind
    fatal: str | None = None
    convert: Callable[[dict[str, str | None]], dict[str, Any]] | None = None
    any_level: bool = False  # a failure that vLLM logs at INFO (zero blocks, negative KV memory)
    # What every match says where nothing is read from the line (a phase): one read-only mapping, no call per line.
    values: Mapping[str, Any] = field(default_factory=lambda: NO_VALUES)


def _int(text: str | None) -> int | None:
    return int(text.replace(",", "")) if text else None


def _float(text: str | None) -> float | None:
    return float(text) if text else None


def _numbers(**spec: str) -> Callable[[dict[str, str | None]], dict[str, Any]]:
    """Convert named groups: spec maps group name → "int" | "float" | "str"."""
    casts: dict[str, Callable[[str | None], Any]] = {"int": _int, "float": _float, "str": lambda s: s}

    def convert(groups: dict[str, str | None]) -> dict[str, Any]:
        return {name: casts[kind](groups.get(name)) for name, kind in spec.items() if groups.get(name) is not None}

    return convert


def _tool_parser(groups: dict[str, str | None]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if groups.get("name"):
        values["tool_parser"] = groups["name"]
    if groups.get("valid"):
        values["valid_tool_parsers"] = [p.strip() for p in (groups["valid"] or "").split(",") if p.strip()]
    return values


def _sig(kind: EventKind, needle: str, pattern: str, failure: FailureClass | None = None, reason: str | None = None,
         fatal: str | None = None, convert: Callable[[dict[str, str | None]], dict[str, Any]] | None = None,
         any_level: bool = False, values: Mapping[str, Any] | None = None) -> Signature:
    return Signature(kind, needle, re.compile(pattern), failure, reason, fatal, convert, any_level,
                     MappingProxyType(dict(values)) if values else NO_VALUES)




def _world(groups: dict[str, str | None]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key in ("world_size", "gpus"):
        if groups.get(key):
            values[key] = int(float(groups[key] or 0))
    return values
