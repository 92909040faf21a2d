"""The one table of vLLM log signatures, 0.5 → 0.33, GPU and CPU: what a line means and which numbers it holds.

Each signature matches the stable part of a message (the exception type, the key phrase and its
numbers), not the whole sentence, so that rewordings between versions, user trims and pasted
excerpts still match. Each has a literal needle that must occur in the raw line before its regex
runs. `launcher.vllm.classify` applies the table; docs/vllm-logs.md lists every signature with the
versions that print it and a real example line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
    any_level: bool = False  # a failure that vLLM logs at INFO (zero blocks, negative KV memory)


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
         fatal: str | None = None, convert: Callable[[dict[str, str | None]], dict[str, Any]] | None = None,
         any_level: bool = False) -> Signature:
    return Signature(kind, needle, re.compile(pattern), failure, reason, fatal, convert, any_level)




def _memory_profile(groups: dict[str, str | None]) -> dict[str, Any]:
    """V0's `Memory profiling results: key=value, …` (its pairs survive a pasted line being wrapped)."""
    pairs = dict(re.findall(r"(total_gpu_memory|kv_cache_size|gpu_memory_utilization)=([\d.]+)", groups["text"] or ""))
    names = {"total_gpu_memory": "total_gib", "kv_cache_size": "available_kv_gib", "gpu_memory_utilization": "utilization"}
    values = {key: value.rstrip(".") for key, value in pairs.items()}  # "…=0.98." ends a sentence
    return {names[key]: float(value) for key, value in values.items() if value and value.count(".") <= 1}


def _world(groups: dict[str, str | None]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key in ("world_size", "gpus"):
        if groups.get(key):
            values[key] = int(float(groups[key] or 0))
    return values


_GIB = r"-?[\d.]+"
_FREE = rf"\((?P<free_gib>{_GIB})/(?P<total_gib>{_GIB}) GiB\)"
_MAX_SEQ = r"max seq len \((?P<max_model_len>\d+)\)"
_KV_NEEDED = (rf"\(?(?P<needed_gib>{_GIB}) Gi?B KV cache is needed, which is larger than the available KV cache memory "
              rf"\((?P<available_kv_gib>{_GIB}) Gi?B\)")
_ENGINE_EXC = r"^\s*(?:[\w.]+\.)?"  # an exception line: the type starts the message, client text cannot
SIGNATURES: tuple[Signature, ...] = (
    # ---- no room at all for KV: INFO lines that mean the attempt is lost (vLLM raises right after)
    _sig("failure", "blocks: 0,", r"^# (?:GPU|cuda|CUDA|[A-Za-z]+) blocks: (?P<gpu_blocks>0), # CPU blocks",
         NO_CACHE_BLOCKS, fatal="specific", convert=_numbers(gpu_blocks="int"), any_level=True),
    _sig("failure", "Available KV cache memory: -", r"Available KV cache memory: (?P<available_kv_gib>-[\d.]+) GiB",
         NO_CACHE_BLOCKS, fatal="specific", convert=_numbers(available_kv_gib="float"), any_level=True),
    _sig("failure", "reserved for KV Cache is -", r"the rest of the memory reserved for KV Cache is "
         r"(?P<available_kv_gib>-[\d.]+) ?GiB", NO_CACHE_BLOCKS, fatal="specific",
         convert=_numbers(available_kv_gib="float"), any_level=True),
    # ---- capacity and memory: what the engine got (per rank with TP/PP: the diagnosis keeps the minimum)
    _sig("kv_tokens", "KV cache size:",
         r"(?:GPU|[A-Z]+(?: \+ host)?) KV cache size: (?P<kv_tokens>[\d,]+) tokens"
         r"(?:, Maximum concurrency for (?P<concurrency_len>[\d,]+) tokens per request: (?P<max_concurrency>[\d.]+)x)?",
         convert=_numbers(kv_tokens="int", concurrency_len="int", max_concurrency="float")),
    _sig("concurrency", "Maximum concurrency for",
         r"Maximum concurrency for (?P<concurrency_len>[\d,]+) tokens per request: (?P<max_concurrency>[\d.]+)x",
         convert=_numbers(concurrency_len="int", max_concurrency="float")),
    _sig("gpu_blocks", " blocks: ",
         r"^#? ?(?:GPU|cuda|[A-Za-z]+) blocks: (?P<gpu_blocks>\d+)(?:, # CPU blocks: (?P<cpu_blocks>\d+))?",
         convert=_numbers(gpu_blocks="int", cpu_blocks="int")),
    _sig("gpu_blocks", "num_gpu_blocks is:", r"num_gpu_blocks is: (?P<gpu_blocks>\d+)", convert=_numbers(gpu_blocks="int")),
    _sig("available_kv", "Available KV cache memory:", rf"Available KV cache memory: (?P<available_kv_gib>{_GIB}) GiB",
         convert=_numbers(available_kv_gib="float")),
    _sig("available_kv", "the rest of the memory reserved for KV Cache",
         rf"model weights take (?P<weights_gib>[\d.]+) ?GiB; non_torch_memory takes (?P<non_torch_gib>[\d.]+) ?GiB; "
         rf"PyTorch activation peak memory takes (?P<activation_gib>[\d.]+) ?GiB; "
         rf"the rest of the memory reserved for KV Cache is (?P<available_kv_gib>{_GIB}) ?GiB"
         rf"|the rest of the memory reserved for KV Cache is (?P<kv_only_gib>{_GIB}) ?GiB",
         convert=lambda g: {**_numbers(weights_gib="float", non_torch_gib="float", activation_gib="float",
                                        available_kv_gib="float")(g),
                            **({"available_kv_gib": float(g["kv_only_gib"] or 0)} if g.get("kv_only_gib") else {})}),
    _sig("memory_budget", "total_gpu_memory (", r"can use total_gpu_memory \((?P<total_gib>[\d.]+) ?GiB\) x "
         r"gpu_memory_utilization \((?P<utilization>[\d.]+)\) = (?P<requested_gib>[\d.]+) ?GiB",
         convert=_numbers(total_gib="float", utilization="float", requested_gib="float")),
    _sig("memory_budget", "total_gpu_memory=", r"(?P<text>total_gpu_memory=.*)", convert=_memory_profile),
    _sig("memory_budget", "kv_cache_size=", r"(?P<text>kv_cache_size=.*)", convert=_memory_profile),
    _sig("memory_budget", "Desired GPU memory utilization is",  # 0.10.x, a successful start: the breakdown
         rf"Free memory on device(?: \S+)? {_FREE} on startup\. Desired GPU memory utilization is "
         rf"\((?P<utilization>[\d.]+), (?P<requested_gib>{_GIB}) GiB\)(?:\. Actual usage is (?P<weights_gib>[\d.]+) GiB "
         r"for weight, (?P<activation_gib>[\d.]+) GiB for peak activation, (?P<non_torch_gib>[\d.]+) GiB for "
         r"non-torch memory, and (?P<cudagraph_gib>[\d.]+) GiB for CUDAGraph memory)?",
         convert=_numbers(free_gib="float", total_gib="float", utilization="float", requested_gib="float",
                          weights_gib="float", activation_gib="float", non_torch_gib="float", cudagraph_gib="float")),
    _sig("available_kv", "GiB for KV cache on node",  # CPU backend, vLLM 0.3x
         r"(?:Explicitly|Auto) set \((?P<available_kv_gib>[\d.]+)/(?P<total_gib>[\d.]+)\) GiB for KV cache",
         convert=_numbers(available_kv_gib="float", total_gib="float")),
    _sig("model_loading", "took",
         r"(?:Model loading took (?P<model_loading_gib>[\d.]+) Gi?B(?: memory)?(?: and (?P<seconds>[\d.]+) seconds)?"
         r"|Loading model weights took (?P<model_loading_gb>[\d.]+) GB)",
         convert=_numbers(model_loading_gib="float", model_loading_gb="float", seconds="float")),
    _sig("kv_cache_memory_hint", "--kv-cache-memory=",
         r"--kv-cache-memory=(?P<kv_cache_memory_fit>-?\d+)` \([^)]*\) to fit into requested memory, "
         r"or `--kv-cache-memory=(?P<kv_cache_memory_full>-?\d+)",
         convert=_numbers(kv_cache_memory_fit="int", kv_cache_memory_full="int")),
    # ---- the settings vLLM started with: the calibration of a start-up needs its utilization and length
    _sig("engine_args", "gpu_memory_utilization", r"(?:non-default args: |args: Namespace\().*?"
         r"'?gpu_memory_utilization'?(?:: |=)(?P<utilization>[\d.]+)",
         convert=_numbers(utilization="float")),
    # ---- the version, and the engine's own view of its configuration
    _sig("version", "LLM engine", r"Initializing (?:a V[01] |an )LLM engine(?: \(v(?P<vllm_version>[^)\s]+)\))?"
         r" with config(?:.*?max_seq_len=(?P<max_model_len>\d+))?", convert=_numbers(vllm_version="str", max_model_len="int")),
    _sig("version", "server version", r"vLLM (?:API )?server version (?P<vllm_version>\S+?),?(?:\s|$)",
         convert=_numbers(vllm_version="str")),
    _sig("version", "version ", r"(?:[▄█▀]\s*)+version (?P<vllm_version>\d+\.\d+\.\d+\S*)\s*$",  # 0.15+ logo
         convert=_numbers(vllm_version="str")),
    # ---- progress: the phase a start-up is in (a CUDA OOM's reason is the phase it happened in)
    _sig("progress", "Starting to load model", r"^Starting to load model", convert=lambda g: {"phase": "weights"}),
    _sig("progress", "checkpoint shards", r"Loading \S+ checkpoint shards:\s+(?P<percent>\d+)% Completed",
         convert=lambda g: {"phase": "weights", "percent": _int(g.get("percent"))}),
    _sig("progress", "Memory profiling", r"^Memory profiling", convert=lambda g: {"phase": "profiling"}),
    _sig("progress", "Starting profile run", r"^Starting profile run", convert=lambda g: {"phase": "profiling"}),
    _sig("progress", "Capturing CUDA graph", r"Capturing CUDA graph", convert=lambda g: {"phase": "cuda_graphs"}),
    _sig("progress", "Graph capturing finished", r"Graph capturing finished", convert=lambda g: {"phase": "cuda_graphs"}),
    _sig("progress", "Warming up", r"Warming up", convert=lambda g: {"phase": "warmup"}),
    _sig("progress", "Compil", r"Compil(?:ing|ation)", convert=lambda g: {"phase": "compile"}),
    _sig("progress", "Download", r"(?:Downloading|Download(?:ed|ing)? \S+|Fetching \d+ files)",
         convert=lambda g: {"phase": "download"}),
    # ---- readiness markers (informational: readiness itself is /health + /v1/models)
    _sig("server_starting", "server", r"^Starting vLLM (?:API )?server(?: \d+)? on (?P<address>\S+)",
         convert=_numbers(address="str")),
    _sig("server_starting", "Uvicorn running on", r"^Uvicorn running on (?P<address>.+?)(?: \(Press CTRL\+C|$)",
         convert=_numbers(address="str")),
    _sig("startup_complete", "Application startup complete", r"^Application startup complete"),
    _sig("shutdown", "hutting down", r"^(?:Shutting down FastAPI HTTP server|Shutting down$)"),
    _sig("shutdown", "shutdown triggered", r"\[shutdown\] API server: shutdown triggered"),
    # ---- start-up memory (GPU and CPU backend)
    _sig("failure", "is less than desired",
         rf"Free memory on device(?: \S+)? {_FREE}(?: on startup)? is less than (?:desired GPU memory utilization "
         rf"\((?P<utilization>[\d.]+), (?P<requested_gib>{_GIB}) GiB\)|the engine's budget)",
         STARTUP_MEMORY, "free_below_utilization", "specific",
         _numbers(free_gib="float", total_gib="float", utilization="float", requested_gib="float")),
    _sig("failure", "is less than the engine's budget",
         rf"Free memory on device(?: \S+)? {_FREE}(?: on startup)? is less than the engine's budget",
         STARTUP_MEMORY, "free_below_utilization", "specific", _numbers(free_gib="float", total_gib="float")),
    _sig("failure", "on startup is less than desired CPU",
         rf"Available memory on node \d+ {_FREE} on startup is less than "
         rf"desired CPU memory utilization \((?P<utilization>[\d.]+), (?P<requested_gib>{_GIB}) GiB\)",
         STARTUP_MEMORY, "free_below_utilization", "specific",
         _numbers(free_gib="float", total_gib="float", utilization="float", requested_gib="float")),
    _sig("failure", "on kv cache allocation is less than requested memory",  # CPU backend, 0.31+
         rf"Available memory on node \d+ {_FREE} on kv cache allocation is less than requested memory for kv",
         STARTUP_MEMORY, "free_below_utilization", "specific", _numbers(free_gib="float", total_gib="float")),
    _sig("failure", "Externally held weights on device",
         rf"Externally held weights on device(?: \S+)? {_FREE} exceed the desired GPU memory utilization",
         STARTUP_MEMORY, "free_below_utilization", "specific"),
    _sig("failure", "warming up", r"CUDA out of memory occurred when warming up (?:sampler|pooler)",
         STARTUP_MEMORY, "sampler_warmup", "specific"),
    _sig("failure", "not enough GPU memory", r"Failed to load model - not enough GPU memory", STARTUP_MEMORY,
         "weights", "specific"),
    _sig("failure", "out of memory",
         r"(?:CUDA|HIP|XPU) (?:driver )?(?:error: )?out of memory(?:\. Tried to allocate (?P<tried>[\d.]+ [GM]iB))?",
         STARTUP_MEMORY, fatal="specific", convert=_numbers(tried="str")),
    _sig("failure", "CUBLAS_STATUS_ALLOC_FAILED", r"CUBLAS_STATUS_ALLOC_FAILED", STARTUP_MEMORY, fatal="specific"),
    _sig("failure", "Error in memory profiling", r"Error in memory profiling", STARTUP_MEMORY, "memory_changed",
         "specific"),
    # ---- FP8 KV cache (or FP8 kernels) on a GPU without native fp8
    _sig("failure", "fp8", r"does not support fp8 kv-cache on this device|fp8e4nv (?:data type is )?not supported"
         r"|needs native fp8e4nv", FP8_UNSUPPORTED, fatal="specific"),
    _sig("failure", "not supported with --kv-cache-dtype", r"not supported with --kv-cache-dtype", FP8_UNSUPPORTED,
         fatal="specific"),
    _sig("failure", "FP8 KV cache", r"FP8 KV cache is not supported by|with FP8 KV cache not yet supported"
         r"|FlashAttention V1 with FP8 KV cache", FP8_UNSUPPORTED, fatal="specific"),
    _sig("failure", "is not supported by", r"--kv-cache-dtype \S+ is not supported by (?:the CPU attention backend"
         r"|MLA attention on CPU)", FP8_UNSUPPORTED, fatal="specific"),
    _sig("failure", "kv_cache_dtype not supported", r"kv_cache_dtype not supported", FP8_UNSUPPORTED, fatal="specific"),
    # ---- KV cache too small for the context; a wrapped paste keeps its numbers on the next lines
    _sig("failure", "max seq len",
         rf"To serve at least one request with the models?'s {_MAX_SEQ},?\s*(?:{_KV_NEEDED}|\(?(?P<needed_only>{_GIB}) Gi?B)?"
         r"(?:.*?the estimated maximum model length is (?P<estimated_max_model_len>\d+))?",
         KV_INSUFFICIENT, fatal="specific",
         convert=lambda g: {**_numbers(max_model_len="int", needed_gib="float", available_kv_gib="float",
                                        estimated_max_model_len="int")(g),
                            **({"needed_gib": float(g["needed_only"] or 0)} if g.get("needed_only") else {})}),
    _sig("failure", "maximum number of tokens that can be stored",
         rf"The model's {_MAX_SEQ} is larger than the maximum number of tokens that can be "
         r"stored in KV cache \((?P<estimated_max_model_len>\d+)\)",
         KV_INSUFFICIENT, fatal="specific",
         convert=lambda g: {**_numbers(max_model_len="int", estimated_max_model_len="int")(g),
                            "kv_tokens": _int(g.get("estimated_max_model_len"))}),
    _sig("kv_detail", "KV cache is needed", rf"^\s*{_KV_NEEDED}",
         convert=_numbers(needed_gib="float", available_kv_gib="float")),
    _sig("kv_detail", "larger than the available KV cache memory",
         rf"larger than the available KV cache memory \((?P<available_kv_gib>{_GIB}) Gi?B\)",
         convert=_numbers(available_kv_gib="float")),
    _sig("kv_detail", "estimated maximum model length is", r"estimated maximum model length is (?P<estimated_max_model_len>\d+)",
         convert=_numbers(estimated_max_model_len="int")),
    # ---- no room at all for KV
    _sig("failure", "No available memory for the cache blocks", r"No available memory for the cache blocks",
         NO_CACHE_BLOCKS, fatal="specific"),
    _sig("failure", "leaving none for the KV cache", r"^\s*(?:\w+: )?The worker already uses [\d.]+ GiB .*leaving none "
         r"for the KV cache", NO_CACHE_BLOCKS, fatal="specific"),
    _sig("failure", "Cannot auto-fit max_model_len", r"Cannot auto-fit max_model_len", NO_CACHE_BLOCKS, fatal="specific"),
    # ---- configuration: never retried
    _sig("failure", "invalid tool call parser",
         r"invalid tool call parser: (?P<name>\S+) \(chose from \{ ?(?P<valid>[^}]*?) ?\}\)",
         CONFIG, "tool_parser", "specific", _tool_parser),
    _sig("failure", "error: argument --tool-call-parser",
         r"error: argument --tool-call-parser: invalid choice: '(?P<name>[^']+)' \(choose from (?P<valid>[^)]*)\)?",
         CONFIG, "tool_parser", "specific",
         lambda g: _tool_parser({"name": g.get("name"), "valid": (g.get("valid") or "").replace("'", "")})),
    _sig("failure", "which has not been registered",
         r"--enable-auto-tool-choice requires tool_parser:'(?P<name>[^']+)' which has not been registered",
         CONFIG, "tool_parser", "specific", _tool_parser),
    _sig("failure", "requires --tool-call-parser", r"--enable-auto-tool-choice requires --tool-call-parser",
         CONFIG, "tool_parser", "specific"),
    _sig("failure", "easoning parser", r"invalid reasoning parser: (?P<name>\S+)|Reasoning parser '(?P<quoted>[^']+)' "
         r"not found", CONFIG, "reasoning_parser", "specific"),
    _sig("failure", "reasoning_parser_name=", r"reasoning_parser_name=\S+ has not been registered", CONFIG,
         "reasoning_parser", "specific"),
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
    _sig("failure", "RepositoryNotFoundError", r"RepositoryNotFoundError", CONFIG, "model_not_found", "specific"),
    # "If you are trying to access a private or gated repo" is Hugging Face's hint under a repository
    # that does not exist: not a gated model.
    _sig("failure", "gated", r"(?<!private or )[Gg]ated ?[Rr]epo|Access to model \S+ is restricted",
         CONFIG, "gated_repo", "specific"),
    _sig("failure", "Client Error", r"40[13] Client Error", CONFIG, "gated_repo", "specific"),
    _sig("failure", "Invalid repository ID", r"Invalid repository ID or local directory specified", CONFIG,
         "model_not_found", "specific"),
    _sig("failure", "Repo id must be", r"Repo id must be in the form", CONFIG, "model_not_found", "specific"),
    _sig("failure", "model identifier", r"is not a valid model identifier", CONFIG, "model_not_found", "specific"),
    _sig("failure", "couldn't connect to", r"We couldn't connect to '[^']*' to load the files", CONFIG,
         "model_not_found", "specific"),
    _sig("failure", "model weights with", r"Cannot find any (?:safetensors )?model weights with", CONFIG,
         "model_not_found", "specific"),
    _sig("failure", "referenced in index but missing", r"Weight files referenced in index but missing", CONFIG,
         "model_not_found", "specific"),
    _sig("failure", "no config file found", r"Could not detect config format for no config file found", CONFIG,
         "model_not_found", "specific"),
    _sig("failure", "Failed to load the model config", r"Failed to load the model config\. If the model is a custom "
         r"model not yet available", CONFIG, "unsupported_model", "specific"),
    _sig("failure", "does not support `--runner", r"This model does not support `--runner \w+`", CONFIG,
         "unsupported_model", "specific"),
    _sig("failure", "not supported for now", r"Model architectures? \[[^\]]*\] (?:are|is) not supported", CONFIG,
         "unsupported_model", "specific"),
    _sig("failure", "does not recognize this architecture", r"does not recognize this architecture", CONFIG,
         "unsupported_model", "specific"),
    _sig("failure", "ddress already in use", r"(?i)\[errno 98\].*address already in use", CONFIG, "port_in_use",
         "specific"),
    _sig("failure", "EADDRINUSE", r"name: EADDRINUSE", CONFIG, "port_in_use", "specific"),
    _sig("failure", "larger than the number of available GPUs",
         r"World size \((?P<world_size>\d+)\) is larger than the number of available GPUs \((?P<gpus>\d+)\)",
         CONFIG, "not_enough_gpus", "specific", _world),
    _sig("failure", "must be less than or equal to the number of visible devices",
         r"local_world_size \((?P<world_size>\d+)\) must be less than or equal to the number of visible devices "
         r"\((?P<gpus>\d+)\)", CONFIG, "not_enough_gpus", "specific", _world),
    _sig("failure", "exceeds the total number of available GPUs",
         r"number of required GPUs exceeds the total number of available GPUs", CONFIG, "not_enough_gpus", "specific"),
    _sig("failure", "available. current_node_resource", r"Current node has no GPU available\. current_node_resource",
         CONFIG, "not_enough_gpus", "specific"),
    _sig("failure", "Cannot provide a placement group",
         r"Cannot provide a placement group requiring (?P<world_size>[\d.]+) GPUs", CONFIG, "not_enough_gpus",
         "specific", _world),
    _sig("failure", "must be divisible by tensor parallel size",
         r"must be divisible by tensor parallel size", CONFIG, "bad_argument", "specific"),
    _sig("failure", "not supported for quantization method", r"is not supported for quantization method", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "does not match the quantization method",
         r"Quantization method specified in the model config \(\S+\) does not match the quantization method",
         CONFIG, "bad_argument", "specific"),
    _sig("failure", "Bfloat16 is only supported on GPUs", r"Bfloat16 is only supported on GPUs with compute capability",
         CONFIG, "bad_argument", "specific"),
    _sig("failure", "is not supported for the current GPU", r"The quantization method \S+(?: \+ \w+)? is not supported "
         r"for the current GPU\. Minimum capability", CONFIG, "bad_argument", "specific"),
    _sig("failure", "is smaller than max_model_len", r"max_num_batched_tokens \(\d+\) is smaller than max_model_len "
         r"\(\d+\)", CONFIG, "bad_argument", "specific"),
    _sig("failure", "GPU memory utilization must be", r"GPU memory utilization must be less than 1\.0", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "Unknown quantization method", r"Unknown quantization method: \S+ Must be one of", CONFIG,
         "bad_argument", "specific"),
    _sig("failure", "Pipeline parallelism is not supported for this model",
         r"Pipeline parallelism is not supported for this model", CONFIG, "bad_argument", "specific"),
    _sig("failure", "attention backend", r"No valid attention backend found for", CONFIG, "bad_argument", "specific"),
    _sig("failure", "No model specified", r"No model (?:specified|_tag specified)", CONFIG, "bad_argument", "specific"),
    # ---- engine death; ignored once a shutdown is under way. Anchored at the start of the message: an
    # exception type or vLLM's own sentence starts it, where text a client sent never stands.
    _sig("failure", "EngineDeadError", rf"{_ENGINE_EXC}(?:Async)?EngineDeadError\b", ENGINE_DEAD, fatal="specific"),
    _sig("failure", "encountered a fatal error", r"^\s*EngineCore encountered a fatal error", ENGINE_DEAD,
         fatal="specific"),
    _sig("failure", "died unexpectedly", r"^\s*(?:Engine core|Worker) proc (?P<dead_proc>\S+) died unexpectedly",
         ENGINE_DEAD, fatal="specific", convert=_numbers(dead_proc="str")),
    _sig("failure", "engine core exited unexpectedly", r"engine core exited unexpectedly", ENGINE_DEAD, fatal="specific"),
    _sig("failure", "Engine iteration timed out", r"^\s*Engine iteration timed out", ENGINE_DEAD, fatal="specific"),
    _sig("failure", "died.", r"Engine process \(pid \d+\) died\.", ENGINE_DEAD, fatal="specific"),
    _sig("failure", "MQLLMEngine is already dead", r"^\s*MQLLMEngine is already dead", ENGINE_DEAD, fatal="specific"),
    _sig("failure", "NCCL", rf"{_ENGINE_EXC}\w*Error: NCCL error|ProcessGroupNCCL\S* .*watchdog thread terminated with "
         r"exception", ENGINE_DEAD, fatal="specific"),
    _sig("failure", "rror", rf"{_ENGINE_EXC}\w*Error: CUDA error: (?:an illegal (?:memory access|instruction) was "
         r"encountered|device-side assert triggered|unspecified launch failure)|^\s*Failed: Cuda error \S+ 'an illegal",
         ENGINE_DEAD, fatal="specific"),
    _sig("failure", "Got fatal signal", r"Got fatal signal from worker processes", ENGINE_DEAD, fatal="generic"),
    # ---- generic start-up failure: the root cause is printed just before or just after
    _sig("failure", "failed to start", r"(?:EngineCore|WorkerProc|Engine process) failed to start", UNKNOWN,
         fatal="generic"),
    _sig("failure", "initialization failed", r"(?:Engine core|WorkerProc) initialization failed", UNKNOWN,
         fatal="generic"),
    _sig("failure", "hit an exception", r"EngineCore hit an exception", UNKNOWN, fatal="generic"),
    _sig("failure", "please check the stack trace above", r"Worker failed with error .*please check the stack trace",
         UNKNOWN, fatal="generic"),
)
