"""Turn vLLM log lines into events: one table of signatures, 0.6 → 0.33, GPU and CPU.

`classify(line)` is pure and fast (it runs on every line vLLM prints). Lines are
normalised first: ANSI colours and `\\r` continuations stripped, then docker-compose,
timestamp, `[rank0]:`, `(EngineCore pid=…)` and `LEVEL date [file:line]` prefixes
removed. Each signature has a literal needle that must occur before its regex runs.
Strings come from vLLM's own source, 0.6 → 0.33, and real logs (docs/vllm-logs.md lists each one).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

# Failure classes (diagnose JSON `class`) and config reasons (`reason`).
OK = "ok"
STARTUP_MEMORY = "startup_memory"
FP8_UNSUPPORTED = "fp8_unsupported"
KV_INSUFFICIENT = "kv_insufficient"
NO_CACHE_BLOCKS = "no_cache_blocks"
ENGINE_DEAD = "engine_dead"
CONFIG = "config"
UNKNOWN = "unknown"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_OUTER = re.compile(
    r"^(?:[\w.-]+\s*\|\s)?"  # docker-compose: "vllm-1  | "
    r"(?:\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\s+)?"  # docker logs -t / ISO timestamps
    r"(?:\[rank\d+\]:\s?)?"  # torch.distributed
    r"(?:\((?P<proc>[^)]*?) pid=(?P<pid>\d+)\)\s+)?"  # vLLM process prefix
    r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[?[^\]\s]+:\d+\] ?"
    r"|(?P<ulevel>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+)?"  # vLLM logger or uvicorn
)


@dataclass(frozen=True, slots=True)
class LogEvent:
    """What one line says: a kind, its numbers, and whether it ends the attempt."""

    kind: str
    message: str
    values: Mapping[str, Any] = field(default_factory=dict)
    failure: str | None = None  # failure class, for failure kinds
    reason: str | None = None  # config reason
    fatal: str | None = None  # "specific" (decide now) or "generic" (wait briefly for the root cause)
    proc: str | None = None


@dataclass(frozen=True, slots=True)
class Signature:
    kind: str
    needle: str
    pattern: re.Pattern[str]
    failure: str | None = None
    reason: str | None = None
    fatal: str | None = None
    convert: Callable[[dict[str, str | None]], dict[str, Any]] | None = None


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


def _sig(kind: str, needle: str, pattern: str, failure: str | None = None, reason: str | None = None,
         fatal: str | None = None, convert: Callable[[dict[str, str | None]], dict[str, Any]] | None = None
         ) -> Signature:
    return Signature(kind, needle, re.compile(pattern), failure, reason, fatal, convert)


_GIB = r"-?[\d.]+"
SIGNATURES: tuple[Signature, ...] = (
    # ---- capacity and progress
    _sig("kv_tokens", "KV cache size:",
         r"(?:GPU|[A-Z]+(?: \+ host)?) KV cache size: (?P<kv_tokens>[\d,]+) tokens"
         r"(?:, Maximum concurrency for (?P<concurrency_len>[\d,]+) tokens per request: (?P<max_concurrency>[\d.]+)x)?",
         convert=_numbers(kv_tokens="int", concurrency_len="int", max_concurrency="float")),
    _sig("concurrency", "Maximum concurrency for",
         r"^Maximum concurrency for (?P<concurrency_len>[\d,]+) tokens per request: (?P<max_concurrency>[\d.]+)x",
         convert=_numbers(concurrency_len="int", max_concurrency="float")),
    _sig("gpu_blocks", " blocks: ",
         r"^# (?:GPU|cuda|[A-Za-z]+) blocks: (?P<gpu_blocks>\d+)(?:, # CPU blocks: (?P<cpu_blocks>\d+))?",
         convert=_numbers(gpu_blocks="int", cpu_blocks="int")),
    _sig("available_kv", "Available KV cache memory:", rf"Available KV cache memory: (?P<available_kv_gib>{_GIB}) GiB",
         convert=_numbers(available_kv_gib="float")),
    _sig("available_kv", "the rest of the memory reserved for KV Cache",
         rf"the rest of the memory reserved for KV Cache is (?P<available_kv_gib>{_GIB}) ?GiB",
         convert=_numbers(available_kv_gib="float")),
    _sig("available_kv", "GiB for KV cache on node",  # CPU backend, vLLM 0.3x
         r"(?:Explicitly|Auto) set \((?P<available_kv_gib>[\d.]+)/(?P<total_gib>[\d.]+)\) GiB for KV cache",
         convert=_numbers(available_kv_gib="float", total_gib="float")),
    _sig("model_loading", "took",
         r"(?:Model loading took (?P<model_loading_gib>[\d.]+) Gi?B(?: memory)? and (?P<seconds>[\d.]+) seconds"
         r"|Loading model weights took (?P<model_loading_gb>[\d.]+) GB)",
         convert=_numbers(model_loading_gib="float", model_loading_gb="float", seconds="float")),
    _sig("kv_cache_memory_hint", "--kv-cache-memory=",
         r"--kv-cache-memory=(?P<kv_cache_memory_fit>-?\d+)` \([^)]*\) to fit into requested memory, "
         r"or `--kv-cache-memory=(?P<kv_cache_memory_full>-?\d+)",
         convert=_numbers(kv_cache_memory_fit="int", kv_cache_memory_full="int")),
    _sig("version", "LLM engine (v", r"Initializing (?:a V[01] |an )LLM engine \(v(?P<vllm_version>[^)\s]+)\)",
         convert=_numbers(vllm_version="str")),
    _sig("version", "server version", r"vLLM (?:API )?server version (?P<vllm_version>\S+?),?(?:\s|$)",
         convert=_numbers(vllm_version="str")),
    _sig("version", "version ", r"(?:[▄█▀]\s*)+version (?P<vllm_version>\d+\.\d+\.\d+\S*)\s*$",  # 0.15+ logo
         convert=_numbers(vllm_version="str")),
    _sig("progress", "Starting to load model", r"^Starting to load model", convert=lambda g: {"phase": "weights"}),
    _sig("progress", "checkpoint shards", r"Loading \S+ checkpoint shards:\s+(?P<percent>\d+)% Completed",
         convert=lambda g: {"phase": "weights", "percent": _int(g.get("percent"))}),
    _sig("progress", "Memory profiling", r"^Memory profiling", convert=lambda g: {"phase": "profiling"}),
    _sig("progress", "Capturing CUDA graph", r"Capturing CUDA graph", convert=lambda g: {"phase": "cuda_graphs"}),
    _sig("progress", "Graph capturing finished", r"Graph capturing finished", convert=lambda g: {"phase": "cuda_graphs"}),
    _sig("progress", "Warming up", r"Warming up", convert=lambda g: {"phase": "warmup"}),
    _sig("progress", "Compil", r"Compil(?:ing|ation)", convert=lambda g: {"phase": "compile"}),
    _sig("progress", "Download", r"(?:Downloading|Download(?:ed|ing)? \S+|Fetching \d+ files)",
         convert=lambda g: {"phase": "download"}),
    # ---- readiness markers (informational: readiness itself is /health + /v1/models)
    _sig("server_starting", "server", r"^Starting vLLM (?:API )?server(?: \d+)? on (?P<address>\S+)",
         convert=_numbers(address="str")),
    _sig("startup_complete", "Application startup complete", r"^Application startup complete"),
    _sig("shutdown", "hutting down", r"^(?:Shutting down FastAPI HTTP server|Shutting down$)"),
    _sig("shutdown", "shutdown triggered", r"\[shutdown\] API server: shutdown triggered"),
    # ---- start-up memory (GPU and CPU backend)
    _sig("failure", "on startup is less than",
         rf"Free memory on device(?: (?P<device>\S+))? \((?P<free_gib>{_GIB})/(?P<total_gib>{_GIB}) GiB\) on startup "
         rf"is less than (?:desired GPU memory utilization \((?P<utilization>[\d.]+), (?P<requested_gib>{_GIB}) GiB\)"
         r"|the engine's budget)",
         STARTUP_MEMORY, fatal="specific",
         convert=_numbers(free_gib="float", total_gib="float", utilization="float", requested_gib="float")),
    _sig("failure", "on startup is less than desired CPU",
         rf"Available memory on node \d+ \((?P<free_gib>{_GIB})/(?P<total_gib>{_GIB}) GiB\) on startup is less than "
         rf"desired CPU memory utilization \((?P<utilization>[\d.]+), (?P<requested_gib>{_GIB}) GiB\)",
         STARTUP_MEMORY, fatal="specific",
         convert=_numbers(free_gib="float", total_gib="float", utilization="float", requested_gib="float")),
    _sig("failure", "warming up", r"CUDA out of memory occurred when warming up (?:sampler|pooler)",
         STARTUP_MEMORY, reason="sampler_warmup", fatal="specific"),
    _sig("failure", "not enough GPU memory", r"Failed to load model - not enough GPU memory",
         STARTUP_MEMORY, reason="weights", fatal="specific"),
    _sig("failure", "out of memory",
         r"(?:OutOfMemoryError|RuntimeError): CUDA out of memory(?:\. Tried to allocate (?P<tried>[\d.]+ [GM]iB))?"
         r"|CUDA error: out of memory",
         STARTUP_MEMORY, fatal="specific", convert=_numbers(tried="str")),
    _sig("failure", "CUBLAS_STATUS_ALLOC_FAILED", r"CUBLAS_STATUS_ALLOC_FAILED", STARTUP_MEMORY, fatal="specific"),
    _sig("failure", "Error in memory profiling", r"Error in memory profiling", STARTUP_MEMORY,
         reason="memory_changed", fatal="specific"),
    # ---- FP8 KV cache on a GPU without native fp8
    _sig("failure", "fp8", r"does not support fp8 kv-cache on this device|fp8e4nv not supported in this architecture"
         r"|needs native fp8e4nv", FP8_UNSUPPORTED, fatal="specific"),
    _sig("failure", "not supported with --kv-cache-dtype", r"not supported with --kv-cache-dtype", FP8_UNSUPPORTED,
         fatal="specific"),
    _sig("failure", "FP8 KV cache", r"FP8 KV cache is not supported by|with FP8 KV cache not yet supported",
         FP8_UNSUPPORTED, fatal="specific"),
    _sig("failure", "kv_cache_dtype not supported", r"kv_cache_dtype not supported", FP8_UNSUPPORTED, fatal="specific"),
    # ---- KV cache too small for the context
    _sig("failure", "max seq len",
         rf"To serve at least one request with the models?'s max seq len \((?P<max_model_len>\d+)\), "
         rf"\((?P<needed_gib>{_GIB}) Gi?B KV cache is needed, which is larger than the available KV cache memory "
         rf"\((?P<available_kv_gib>{_GIB}) Gi?B\)(?:.*?the estimated maximum model length is (?P<estimated_max_model_len>\d+))?",
         KV_INSUFFICIENT, fatal="specific",
         convert=_numbers(max_model_len="int", needed_gib="float", available_kv_gib="float",
                          estimated_max_model_len="int")),
    _sig("failure", "maximum number of tokens that can be stored",
         r"The model's max seq len \((?P<max_model_len>\d+)\) is larger than the maximum number of tokens that can be "
         r"stored in KV cache \((?P<estimated_max_model_len>\d+)\)",
         KV_INSUFFICIENT, fatal="specific", convert=_numbers(max_model_len="int", estimated_max_model_len="int")),
    # ---- no room at all for KV
    _sig("failure", "No available memory for the cache blocks", r"No available memory for the cache blocks",
         NO_CACHE_BLOCKS, fatal="specific"),
    _sig("failure", "Cannot auto-fit max_model_len", r"Cannot auto-fit max_model_len", NO_CACHE_BLOCKS, fatal="specific"),
    # ---- configuration: never retried
    _sig("failure", "invalid tool call parser",
         r"invalid tool call parser: (?P<name>\S+) \(chose from \{ ?(?P<valid>[^}]*?) ?\}\)",
         CONFIG, "tool_parser", "specific", _tool_parser),
    _sig("failure", "requires --tool-call-parser", r"--enable-auto-tool-choice requires --tool-call-parser",
         CONFIG, "tool_parser", "specific"),
    _sig("failure", "invalid reasoning parser", r"invalid reasoning parser: (?P<name>\S+)", CONFIG, "reasoning_parser",
         "specific"),
    _sig("failure", "unrecognized arguments", r"error: unrecognized arguments: (?P<arguments>.+)", CONFIG,
         "unknown_flag", "specific", _numbers(arguments="str")),
    _sig("failure", "error: argument", r"error: argument (?P<argument>\S+?):? (?P<problem>.+)", CONFIG, "bad_argument",
         "specific", _numbers(argument="str")),
    _sig("failure", "is greater than the derived max_model_len",
         r"User-specified max_model_len \((?P<max_model_len>\d+)\) is greater than the derived max_model_len "
         r"\((?P<derived_key>\w+)=(?P<derived_max_model_len>[\d.]+)",
         CONFIG, "max_model_len_above_model", "specific",
         lambda g: {"max_model_len": _int(g.get("max_model_len")),
                    "derived_max_model_len": int(float(g.get("derived_max_model_len") or 0))}),
    _sig("failure", "gated", r"[Gg]ated ?[Rr]epo|You are trying to access a gated repo|Access to model \S+ is restricted",
         CONFIG, "gated_repo", "specific"),
    _sig("failure", "401 Client Error", r"401 Client Error", CONFIG, "gated_repo", "specific"),
    _sig("failure", "Invalid repository ID", r"Invalid repository ID or local directory specified", CONFIG,
         "model_not_found", "specific"),
    _sig("failure", "Repo", r"RepositoryNotFoundError|Repo id must be in the form", CONFIG, "model_not_found",
         "specific"),
    _sig("failure", "model identifier", r"is not a valid model identifier", CONFIG, "model_not_found", "specific"),
    _sig("failure", "couldn't connect to", r"We couldn't connect to '[^']*' to load the files", CONFIG,
         "model_not_found", "specific"),
    _sig("failure", "ddress already in use", r"\[Errno 98\] (?:error while attempting to bind on address .*: )?"
         r"[Aa]ddress already in use$", CONFIG, "port_in_use", "specific"),
    _sig("failure", "larger than the number of available GPUs",
         r"World size \((?P<world_size>\d+)\) is larger than the number of available GPUs \((?P<gpus>\d+)\)",
         CONFIG, "not_enough_gpus", "specific", _numbers(world_size="int", gpus="int")),
    _sig("failure", "must be divisible by tensor parallel size",
         r"must be divisible by tensor parallel size", CONFIG, "bad_argument", "specific"),
    _sig("failure", "No model specified", r"No model (?:specified|_tag specified)", CONFIG, "bad_argument", "specific"),
    # ---- engine death; ignored once a shutdown is under way
    _sig("failure", "EngineDeadError", r"EngineDeadError", ENGINE_DEAD, fatal="specific"),
    _sig("failure", "encountered a fatal error", r"EngineCore encountered a fatal error", ENGINE_DEAD, fatal="specific"),
    _sig("failure", "died unexpectedly", r"(?:Engine core|Worker) proc (?P<dead_proc>\S+) died unexpectedly",
         ENGINE_DEAD, fatal="specific", convert=_numbers(dead_proc="str")),
    _sig("failure", "engine core exited unexpectedly", r"engine core exited unexpectedly", ENGINE_DEAD, fatal="specific"),
    _sig("failure", "Got fatal signal", r"Got fatal signal from worker processes", ENGINE_DEAD, fatal="generic"),
    # ---- generic start-up failure: the root cause is printed just before or just after
    _sig("failure", "failed to start", r"(?:EngineCore|WorkerProc|Engine process) failed to start", UNKNOWN,
         fatal="generic"),
    _sig("failure", "initialization failed", r"(?:Engine core|WorkerProc) initialization failed", UNKNOWN,
         fatal="generic"),
    _sig("failure", "hit an exception", r"EngineCore hit an exception", UNKNOWN, fatal="generic"),
)

# Failure signatures only run on lines that look troubled: every failure vLLM prints is an exception,
# an error or critical record, or an "unexpectedly"/"failed"/"fatal" line (a WARNING only when it says
# so). Quiet lines, most of a log, then cost a few substring checks and one fast regex: this keeps
# classify() well above 200k lines/s on one core (benchmarks/classifier.py).
_TROUBLE = ("rror", "RROR", "RITICAL", "xception", "failed", "unexpectedly", "fatal", "Reason:")
_QUIET_SIGNATURES = tuple(sig for sig in SIGNATURES if sig.kind != "failure")
# A quiet line can only carry a capacity, progress or readiness event if it holds one of these; the
# alternatives start with rare characters, so the regex engine skips most positions of a line at once.
_QUIET_GATE = re.compile(r"KV |Maximum concurrency|# |Model loading|Loading|LLM engine|API server version"
                         r"|vLLM server version|\u2588|Starting|Memory profiling|Capturing|Graph capturing|Warming"
                         r"|Compil|Download|Fetching|Application startup|Shutting down|\[shutdown\] API|Replace")
_FAILURE_GATE = re.compile("|".join(sorted({re.escape(sig.needle) for sig in SIGNATURES if sig.kind == "failure"},
                                           key=len, reverse=True)))
_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?(?P<type>\w*(?:Error|Exception|Interrupt))(?:: (?P<text>.*))?$")
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def normalize(line: str) -> tuple[str | None, str | None, str]:
    """(process name, level, message) of a raw line, with prefixes and escapes removed."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:
        pieces = [piece for piece in line.split("\r") if piece.strip()]
        line = pieces[-1] if pieces else ""
    line = line.rstrip("\n")
    match = _OUTER.match(line)
    if match is None or match.end() == 0:
        return None, None, line
    return match.group("proc"), match.group("level") or match.group("ulevel"), line[match.end():]


def classify(line: str) -> LogEvent | None:
    """The event one raw log line carries, or None for the many lines that say nothing we use."""
    troubled = False
    for word in _TROUBLE:
        if word in line:
            troubled = True
            break
    if _QUIET_GATE.search(line) is None and (not troubled or _FAILURE_GATE.search(line) is None):
        return _exception(line) if troubled else None
    normalized: tuple[str | None, str | None, str] | None = None
    for sig in SIGNATURES if troubled else _QUIET_SIGNATURES:
        if sig.needle not in line:  # cheap test on the raw line before any regex
            continue
        if normalized is None:
            normalized = normalize(line)
            if normalized[2].lstrip().startswith(("raise ", "File \"")):
                return None  # source lines inside tracebacks repeat the message that follows them
        match = sig.pattern.search(normalized[2])
        if match:
            values = sig.convert(match.groupdict()) if sig.convert else _EMPTY
            return LogEvent(sig.kind, normalized[2].lstrip(), values, sig.failure, sig.reason, sig.fatal,
                            normalized[0])
    return _exception(line) if troubled else None


def _exception(line: str) -> LogEvent | None:
    """An exception line (`ValueError: …`): the root cause when no signature matched."""
    if "Error" not in line and "Exception" not in line:
        return None
    proc, level, message = normalize(line)
    stripped = message.lstrip()
    if level in (None, "ERROR", "CRITICAL") and not stripped.startswith(("raise ", "File \"")):
        found = _EXCEPTION.match(stripped)
        if found:
            return LogEvent("exception", stripped, MappingProxyType({"type": found.group("type")}), proc=proc)
    return None
