"""The one table of vLLM log signatures, 0.5 → 0.33, GPU and CPU: what a line means and which numbers it holds.

Each signature matches the stable part of a message (the exception type, the key phrase and its
numbers), not the whole sentence, so that rewordings between versions, user trims and pasted
excerpts still match. Each has a literal needle that must occur in the raw line before its regex
runs. The configuration failures live in `launcher.vllm.config_signatures` and take their place in
the table below. `launcher.vllm.classify` applies the table; docs/vllm-logs.md lists every signature with
the versions that print it and a real example line.
"""

from __future__ import annotations

import re
from typing import Any

from launcher.vllm.config_signatures import CONFIG_SIGNATURES
from launcher.vllm.signature_kit import (
    COMPILE_CACHE,
    CONFIG,
    DISTRIBUTED_INIT,
    ENGINE_DEAD,
    FP8_UNSUPPORTED,
    KV_INSUFFICIENT,
    NO_CACHE_BLOCKS,
    OK,
    STARTUP_MEMORY,
    UNKNOWN,
    EventKind,
    FailureClass,
    LogEvent,
    Signature,
    _int,
    _numbers,
    _sig,
)

__all__ = ["COMPILE_CACHE", "CONFIG", "DISTRIBUTED_INIT", "ENGINE_DEAD", "FP8_UNSUPPORTED", "KV_INSUFFICIENT",
           "NO_CACHE_BLOCKS", "OK", "SIGNATURES",
           "STARTUP_MEMORY", "UNKNOWN", "EventKind", "FailureClass", "LogEvent", "Signature", "is_native_crash"]


def _memory_profile(groups: dict[str, str | None]) -> dict[str, Any]:
    """V0's `Memory profiling results: key=value, …` (its pairs survive a pasted line being wrapped)."""
    pairs = dict(re.findall(r"(total_gpu_memory|kv_cache_size|gpu_memory_utilization)=([\d.]+)", groups["text"] or ""))
    names = {"total_gpu_memory": "total_gib", "kv_cache_size": "available_kv_gib", "gpu_memory_utilization": "utilization"}
    values = {key: value.rstrip(".") for key, value in pairs.items()}  # "…=0.98." ends a sentence
    return {names[key]: float(value) for key, value in values.items() if value and value.count(".") <= 1}


def _engine_args(groups: dict[str, str | None]) -> dict[str, Any]:
    """The utilization and context length of vLLM's `non-default args: {…}` or `args: Namespace(…)` record (what
    the start-up was asked for, before any line of the engine's own)."""
    text = (groups["text"] or "")[:16384]
    found = {}
    utilization = re.search(r"\bgpu_memory_utilization'?(?:: |=)([\d.]+)", text)
    if utilization is not None and utilization.group(1).count(".") <= 1:
        found["utilization"] = float(utilization.group(1).rstrip(".") or 0)
    length = re.search(r"\bmax_model_len'?(?:: |=)(\d+)\b", text)
    if length is not None:
        found["max_model_len"] = int(length.group(1))
    return found


_GIB = r"-?[\d.]+"
_FREE = rf"\((?P<free_gib>{_GIB})/(?P<total_gib>{_GIB}) GiB\)"
_MAX_SEQ = r"max seq len \((?P<max_model_len>\d+)\)"
_KV_NEEDED = (rf"\(?(?P<needed_gib>{_GIB}) Gi?B KV cache is needed, which is larger than the available KV cache memory "
              rf"\((?P<available_kv_gib>{_GIB}) Gi?B\)")
_ENGINE_EXC = r"^\s*(?:[\w.]+\.)?"  # an exception line: the type starts the message, client text cannot
SIGNATURES: tuple[Signature, ...] = (
    # A CUDA out-of-memory message wrapped by a paste: its device's size on a line of its own.
    _sig(EventKind.KV_DETAIL, "has a total capacity of", r"^\s*(?:Tried to allocate [\d.]+ [GM]iB\. )?GPU \d+ has a "
         r"total capacity of (?P<total_gib>[\d.]+) GiB", convert=_numbers(total_gib="float")),
    _sig(EventKind.KV_DETAIL, "GiB total", r"^\s*(?:Tried to allocate [\d.]+ [GM]iB )?\(GPU \d+; (?P<total_gib>[\d.]+) GiB "
         r"total", convert=_numbers(total_gib="float")),  # the same, as torch before 2.1 wrote it
    # ---- no room at all for KV: INFO lines that mean the attempt is lost (vLLM raises right after)
    _sig(EventKind.FAILURE, "blocks: 0,", r"^# (?:GPU|cuda|CUDA|[A-Za-z]+) blocks: (?P<gpu_blocks>0), # CPU blocks",
         NO_CACHE_BLOCKS, fatal="specific", convert=_numbers(gpu_blocks="int"), any_level=True),
    _sig(EventKind.FAILURE, "Available KV cache memory: -", r"Available KV cache memory: (?P<available_kv_gib>-[\d.]+) GiB",
         NO_CACHE_BLOCKS, fatal="specific", convert=_numbers(available_kv_gib="float"), any_level=True),
    _sig(EventKind.FAILURE, "reserved for KV Cache is -", r"the rest of the memory reserved for KV Cache is "
         r"(?P<available_kv_gib>-[\d.]+) ?GiB", NO_CACHE_BLOCKS, fatal="specific",
         convert=_numbers(available_kv_gib="float"), any_level=True),
    # ---- capacity and memory: what the engine got (per rank with TP/PP: the diagnosis keeps the minimum)
    _sig(EventKind.KV_TOKENS, "KV cache size:",
         r"(?:GPU|[A-Z]+(?: \+ host)?) KV cache size: (?P<kv_tokens>[\d,]+) tokens"
         r"(?:, Maximum concurrency for (?P<concurrency_len>[\d,]+) tokens per request: (?P<max_concurrency>[\d.]+)x)?",
         convert=_numbers(kv_tokens="int", concurrency_len="int", max_concurrency="float")),
    _sig(EventKind.CONCURRENCY, "Maximum concurrency for",
         r"Maximum concurrency for (?P<concurrency_len>[\d,]+) tokens per request: (?P<max_concurrency>[\d.]+)x",
         convert=_numbers(concurrency_len="int", max_concurrency="float")),
    _sig(EventKind.GPU_BLOCKS, " blocks: ",
         r"^\s*#? ?(?:GPU|cuda|[A-Za-z]+) blocks: (?P<gpu_blocks>\d+)(?:, # CPU blocks: (?P<cpu_blocks>\d+))?",
         convert=_numbers(gpu_blocks="int", cpu_blocks="int")),
    _sig(EventKind.GPU_BLOCKS, "num_gpu_blocks is:", r"num_gpu_blocks is: (?P<gpu_blocks>\d+)",
         convert=_numbers(gpu_blocks="int")),
    _sig(EventKind.AVAILABLE_KV, "Available KV cache memory:", rf"Available KV cache memory: (?P<available_kv_gib>{_GIB}) GiB",
         convert=_numbers(available_kv_gib="float")),
    _sig(EventKind.AVAILABLE_KV, "the rest of the memory reserved for KV Cache",
         rf"model weights take (?P<weights_gib>[\d.]+) ?GiB; non_torch_memory takes (?P<non_torch_gib>[\d.]+) ?GiB; "
         rf"PyTorch activation peak memory takes (?P<activation_gib>[\d.]+) ?GiB; "
         rf"the rest of the memory reserved for KV Cache is (?P<available_kv_gib>{_GIB}) ?GiB"
         rf"|the rest of the memory reserved for KV Cache is (?P<kv_only_gib>{_GIB}) ?GiB",
         convert=lambda g: {**_numbers(weights_gib="float", non_torch_gib="float", activation_gib="float",
                                        available_kv_gib="float")(g),
                            **({"available_kv_gib": float(g["kv_only_gib"] or 0)} if g.get("kv_only_gib") else {})}),
    _sig(EventKind.MEMORY_BUDGET, "total_gpu_memory (", r"can use total_gpu_memory \((?P<total_gib>[\d.]+) ?GiB\) x "
         r"gpu_memory_utilization \((?P<utilization>[\d.]+)\) = (?P<requested_gib>[\d.]+) ?GiB",
         convert=_numbers(total_gib="float", utilization="float", requested_gib="float")),
    _sig(EventKind.MEMORY_BUDGET, "total_gpu_memory=", r"(?P<text>total_gpu_memory=.*)", convert=_memory_profile),
    _sig(EventKind.MEMORY_BUDGET, "kv_cache_size=", r"(?P<text>kv_cache_size=.*)", convert=_memory_profile),
    # 0.10.x, a successful start: the breakdown; a paste or a terminal may put its two sentences on two lines.
    _sig(EventKind.MEMORY_BUDGET, "Desired GPU memory utilization is",
         rf"(?:Free memory on device(?: \S{{1,256}})? {_FREE} on startup\.\s*)?Desired GPU memory utilization is "
         rf"\((?P<utilization>[\d.]+), (?P<requested_gib>{_GIB}) GiB\)(?:\. Actual usage is (?P<weights_gib>[\d.]+) GiB "
         r"for weight, (?P<activation_gib>[\d.]+) GiB for peak activation, (?P<non_torch_gib>[\d.]+) GiB for "
         r"non-torch memory, and (?P<cudagraph_gib>[\d.]+) GiB for CUDAGraph memory)?",
         convert=_numbers(free_gib="float", total_gib="float", utilization="float", requested_gib="float",
                          weights_gib="float", activation_gib="float", non_torch_gib="float", cudagraph_gib="float")),
    _sig(EventKind.MEMORY_BUDGET, "Free memory on device", rf"^Free memory on device(?: \S{{1,256}})? {_FREE} on startup\.\s*$",
         convert=_numbers(free_gib="float", total_gib="float")),
    _sig(EventKind.AVAILABLE_KV, "GiB for KV cache on node",  # CPU backend, vLLM 0.3x
         r"(?:Explicitly|Auto) set \((?P<available_kv_gib>[\d.]+)/(?P<total_gib>[\d.]+)\) GiB for KV cache",
         convert=_numbers(available_kv_gib="float", total_gib="float")),
    _sig(EventKind.MODEL_LOADING, "took",
         r"(?:Model loading took (?P<model_loading_gib>[\d.]+) Gi?B(?: memory)?(?: and (?P<model_loading_s>[\d.]+) seconds)?"
         r"|Loading model weights took (?P<model_loading_gb>[\d.]+) GB)",
         convert=_numbers(model_loading_gib="float", model_loading_gb="float", model_loading_s="float")),
    _sig(EventKind.KV_CACHE_MEMORY_HINT, "--kv-cache-memory=",
         r"--kv-cache-memory=(?P<kv_cache_memory_fit>-?\d+)` \([^)]*\) to fit into requested memory, "
         r"or `--kv-cache-memory=(?P<kv_cache_memory_full>-?\d+)",
         convert=_numbers(kv_cache_memory_fit="int", kv_cache_memory_full="int")),
    # ---- the settings vLLM started with: the calibration of a start-up needs its utilization and length
    # (Two needles, each with a rarer character than `args: ` has: a line's needles are found by their rarest.)
    _sig(EventKind.ENGINE_ARGS, "default args: {", r"non-default args: \{(?P<text>.*)", convert=_engine_args),
    _sig(EventKind.ENGINE_ARGS, "args: Namespace(", r"args: Namespace\((?P<text>.*)", convert=_engine_args),
    # 0.21+: the utilization asked, restated when CUDA-graph memory is profiled inside it
    _sig(EventKind.ENGINE_ARGS, "The current --gpu-memory-utilization=",
         r"The current --gpu-memory-utilization=(?P<utilization>[\d.]+) is equivalent to", convert=_numbers(utilization="float")),
    # The free memory a start-up found, where `kv_cache_memory_bytes` skips profiling (and the utilization check)
    _sig(EventKind.ENGINE_ARGS, "Initial free memory", rf"^Initial free memory (?P<free_gib>{_GIB}) GiB, reserved "
         rf"(?P<available_kv_gib>{_GIB}) GiB memory for KV Cache", convert=_numbers(free_gib="float")),
    # TPU (tpu-inference): the HBM a start-up has
    _sig(EventKind.ENGINE_ARGS, "total_hbm_limit_gb=", r"Memory statistics \| total_hbm_limit_gb=(?P<total_gib>[\d.]+) ?GiB",
         convert=_numbers(total_gib="float")),
    # ---- the version, and the engine's own view of its configuration
    _sig(EventKind.VERSION, "LLM engine", r"Initializing (?:a V[01] |an )LLM engine(?: \(v(?P<vllm_version>[^)\s]+)\))?"
         r"(?: with(?: config.*?max_seq_len=(?P<max_model_len>\d+))?|\s*$)",  # ` with` alone: a terminal wrapped it
         convert=_numbers(vllm_version="str", max_model_len="int")),
    # The version as an environment report (vLLM's collect_env: `vLLM Version: 0.22.0`) pasted with the log writes it,
    # or as NVIDIA's container prints it before vLLM starts (`vLLM Version 0.24.0+092c4842`).
    _sig(EventKind.ENGINE_ARGS, "vLLM ", r"^\s*vLLM [Vv]ersion\s*:? (?P<vllm_version>\d+\.\d+[\w.+-]*)\s*$",
         convert=_numbers(vllm_version="str")),
    # The context length vLLM runs with (the model's own when none was asked, shortened where the model's config says
    # so): the last one printed stands (launcher.vllm.diagnose keeps the latest max_model_len).
    _sig(EventKind.ENGINE_ARGS, "Using max model len", r"^\s*Using max model len (?P<max_model_len>\d+)\s*$",
         convert=_numbers(max_model_len="int")),
    # The engine's dump when a step crashed (vllm/logging_utils/dump_input.py) names the version and the config it ran
    # with, as the start-up's record does: numbers only, never a new start (an excerpt of a crash may hold no banner).
    _sig(EventKind.ENGINE_ARGS, "Dumping input data", r"^\s*Dumping input data for V[01] LLM engine \(v(?P<vllm_version>"
         r"[^)\s]+)\)(?: with config.*?max_seq_len=(?P<max_model_len>\d+))?",
         convert=_numbers(vllm_version="str", max_model_len="int")),
    # The same record pasted with its config wrapped over several lines: the length stands on one of them.
    _sig(EventKind.VERSION, "max_seq_len=", r"^(?:dtype=\S{1,256},? )?max_seq_len=(?P<max_model_len>\d+),",
         convert=_numbers(max_model_len="int")),
    _sig(EventKind.VERSION, "server version", r"vLLM (?:API )?server version (?P<vllm_version>\S{1,256}?),?(?:\s|$)",
         convert=_numbers(vllm_version="str")),
    _sig(EventKind.VERSION, "version ", r"(?:[▄█▀]\s*)+version (?P<vllm_version>\d+\.\d+\S*)\s*$",  # 0.15+ logo
         convert=_numbers(vllm_version="str")),
    # ---- a rank of a multi-node group: torch.distributed assembled the world (printed only once every rank came)
    _sig(EventKind.JOINED, "in world size", r"^rank (?P<rank>\d+) in world size (?P<world_size>\d+) is assigned as",
         convert=_numbers(rank="int", world_size="int")),
    # ---- progress: the phase a start-up is in (a CUDA OOM's reason is the phase it happened in)
    # ---- where the start-up's time went: vLLM's own durations (launcher/vllm/phases.py); before the progress lines
    _sig(EventKind.INFO, "Loading weights took", r"^Loading weights took (?P<weights_s>[\d.]+) ?s",
         convert=_numbers(weights_s="float")),
    _sig(EventKind.INFO, "torch.compile t", r"torch\.compile (?:takes|took) (?P<compile_s>[\d.]+) s in total",
         convert=_numbers(compile_s="float")),
    _sig(EventKind.INFO, "Directly load", r"Directly load (?:the compiled graph|AOT compilation)",
         values={"compile_cache": "hit"}),
    _sig(EventKind.PROGRESS, "Compil", r"Compiling a graph for (?:dynamic shape|general shape|compile range "
         r"\S.{0,80}?) takes|Compiling model again due to a load failure",
         values={"compile_cache": "miss", "phase": "compile"}),
    _sig(EventKind.INFO, "(profile, create", r"^init engine \(profile, create kv cache, warmup model\) took "
         r"(?P<engine_init_s>[\d.]+) ?s", convert=_numbers(engine_init_s="float")),
    _sig(EventKind.PROGRESS, "Graph capturing finished in", r"Graph capturing finished in (?P<cuda_graphs_s>\d+) secs",
         convert=lambda g: {"phase": "cuda_graphs", "cuda_graphs_s": float(g["cuda_graphs_s"] or 0)}),
    _sig(EventKind.PROGRESS, "Starting to load model", r"^Starting to load model", values={"phase": "weights"}),
    _sig(EventKind.PROGRESS, "checkpoint shards", r"Loading \S{1,256} checkpoint shards:\s+(?P<percent>\d+)% Completed",
         convert=lambda g: {"phase": "weights", "percent": _int(g.get("percent"))}),
    _sig(EventKind.PROGRESS, "Memory profiling", r"^Memory profiling", values={"phase": "profiling"}),
    _sig(EventKind.PROGRESS, "Starting profile run", r"^Starting profile run", values={"phase": "profiling"}),
    _sig(EventKind.PROGRESS, "Capturing CUDA graph", r"Capturing CUDA graph", values={"phase": "cuda_graphs"}),
    _sig(EventKind.PROGRESS, "Graph capturing finished", r"Graph capturing finished", values={"phase": "cuda_graphs"}),
    _sig(EventKind.PROGRESS, "Warming up", r"Warming up", values={"phase": "warmup"}),
    _sig(EventKind.PROGRESS, "Compil", r"Compil(?:ing|ation)", values={"phase": "compile"}),
    _sig(EventKind.PROGRESS, "Download", r"(?:Downloading|Download(?:ed|ing)? \S{1,256}|Fetching \d+ files)",
         values={"phase": "download"}),
    # ---- readiness markers (informational: readiness itself is /health + /v1/models)
    _sig(EventKind.SERVER_STARTING, "Starting vLLM", r"^Starting vLLM (?:API )?server(?: \d+)? on (?P<address>\S{1,256})",
         convert=_numbers(address="str")),
    _sig(EventKind.SERVER_STARTING, "Uvicorn running on", r"^Uvicorn running on (?P<address>.+?)(?: \(Press CTRL\+C|$)",
         convert=_numbers(address="str")),
    _sig(EventKind.STARTUP_COMPLETE, "Application startup complete", r"^Application startup complete"),
    # Lines only vLLM's request handling prints: a server that logs them is serving (their ERROR lines are
    # one request's trouble, answered with a 4xx/5xx to that client). Records logged by the request-path
    # modules (serving_*.py, the tool and reasoning parsers) count too (launcher/vllm/classify.py).
    # An offline run (`LLM.generate`) with prompts done: the engine generated, as a server that answered would.
    _sig(EventKind.SERVING, "Processed prompts", r"^Processed prompts:\s+(?:[1-9]\d?|100)%"),
    _sig(EventKind.SERVING, "Error in preprocessing prompt inputs", r"Error in preprocessing prompt inputs"),
    _sig(EventKind.SERVING, "present in the request but ignored", r"^The following fields were present in the request "
         r"but ignored"),
    _sig(EventKind.SERVING, "Error in extracting tool call", r"^Error in extracting tool call from response"),
    _sig(EventKind.SERVING, "Error trying to handle streaming tool call", r"^Error trying to handle streaming tool call"),
    _sig(EventKind.SERVING, "Error in applying chat template from request", r"Error in applying chat template from request"),
    _sig(EventKind.SERVING, "Failed to extract tool call spec", r"^Failed to extract tool call spec"),
    _sig(EventKind.SERVING, "Exception in ASGI application", r"^Exception in ASGI application"),
    _sig(EventKind.SHUTDOWN, "hutting down", r"^(?:Shutting down FastAPI HTTP server|Shutting down$)"),
    _sig(EventKind.SHUTDOWN, "shutdown triggered", r"\[shutdown\] API server: shutdown triggered"),
    # torch's warning as a process's interpreter exits (launcher.vllm.deaths.stops_engine: a script's exit only).
    _sig(EventKind.SHUTDOWN, "before program exit", r"^\[W\S{1,32} \S{1,64} ProcessGroupNCCL\.cpp:\d+\] Warning: WARNING: "
         r"destroy_process_group\(\) was not called before program exit", values={"exit": True}),
    _sig(EventKind.WAITING, "No available shared memory broadcast block",
         r"No available shared memory broadcast block found in (?P<waited_s>\d+) seconds?",
         convert=_numbers(waited_s="int")),
    # ---- start-up memory (GPU and CPU backend)
    _sig(EventKind.FAILURE, "is less than desired",
         rf"Free memory on device(?: \S{{1,256}})? {_FREE}(?: on startup)? is less than (?:desired GPU memory utilization "
         rf"\((?P<utilization>[\d.]+), (?P<requested_gib>{_GIB}) GiB\)|the engine's budget)",
         STARTUP_MEMORY, "free_below_utilization", "specific",
         _numbers(free_gib="float", total_gib="float", utilization="float", requested_gib="float")),
    _sig(EventKind.FAILURE, "is less than the engine's budget",
         rf"Free memory on device(?: \S{{1,256}})? {_FREE}(?: on startup)? is less than the engine's budget",
         STARTUP_MEMORY, "free_below_utilization", "specific", _numbers(free_gib="float", total_gib="float")),
    _sig(EventKind.FAILURE, "on startup is less than desired CPU",
         rf"Available memory on node \d+ {_FREE} on startup is less than "
         rf"desired CPU memory utilization \((?P<utilization>[\d.]+), (?P<requested_gib>{_GIB}) GiB\)",
         STARTUP_MEMORY, "free_below_utilization", "specific",
         _numbers(free_gib="float", total_gib="float", utilization="float", requested_gib="float")),
    _sig(EventKind.FAILURE, "on kv cache allocation is less than requested memory",  # CPU backend, 0.31+
         rf"Available memory on node \d+ {_FREE} on kv cache allocation is less than requested memory for kv",
         STARTUP_MEMORY, "free_below_utilization", "specific", _numbers(free_gib="float", total_gib="float")),
    _sig(EventKind.FAILURE, "Externally held weights on device",
         rf"Externally held weights on device(?: \S{{1,256}})? {_FREE} exceed the desired GPU memory utilization",
         STARTUP_MEMORY, "free_below_utilization", "specific"),
    _sig(EventKind.FAILURE, "warming up", r"CUDA out of memory occurred when warming up (?:sampler|pooler)",
         STARTUP_MEMORY, "sampler_warmup", "specific"),
    _sig(EventKind.FAILURE, "not enough GPU memory", r"Failed to load model - not enough GPU memory", STARTUP_MEMORY,
         "weights", "specific"),
    _sig(EventKind.FAILURE, "out of memory",
         r"(?:(?:CUDA|HIP|XPU|NPU) (?:driver )?(?:error: )?|Triton Error \[(?:CUDA|HIP)\]: |MPS backend )out of memory"
         r"(?:\. Tried to allocate (?P<tried>[\d.]+ [GM]iB))?"
         r"(?:\.? GPU \d+ has a total capacity of (?P<total_gib>[\d.]+) GiB| \([GN]PU \d+; (?P<total_old>[\d.]+) GiB total)?",
         STARTUP_MEMORY, fatal="specific",  # torch before 2.1 wrote `(GPU 0; 15.78 GiB total capacity; …)`
         convert=lambda g: _numbers(tried="str", total_gib="float")({**g, "total_gib": g["total_gib"] or g["total_old"]})),
    # torch's host allocator (the CPU backend's weights and KV cache live in host memory)
    _sig(EventKind.FAILURE, "can't allocate memory", r"DefaultCPUAllocator: can't allocate memory", STARTUP_MEMORY,
         fatal="specific"),
    _sig(EventKind.FAILURE, "CUBLAS_STATUS_ALLOC_FAILED", r"CUBLAS_STATUS_ALLOC_FAILED", STARTUP_MEMORY, fatal="specific"),
    _sig(EventKind.FAILURE, "Error in memory profiling", r"Error in memory profiling", STARTUP_MEMORY, "memory_changed",
         "specific"),
    # ---- FP8 KV cache (or FP8 kernels) on a GPU without native fp8
    _sig(EventKind.FAILURE, "fp8", r"does not support fp8 kv-cache on this device|fp8e4nv (?:data type is )?not supported"
         r"|needs native fp8e4nv", FP8_UNSUPPORTED, fatal="specific"),
    _sig(EventKind.FAILURE, "not supported with --kv-cache-dtype", r"not supported with --kv-cache-dtype", FP8_UNSUPPORTED,
         fatal="specific"),
    _sig(EventKind.FAILURE, "FP8 KV cache", r"FP8 KV cache is not supported by|with FP8 KV cache not yet supported"
         r"|FlashAttention V1 with FP8 KV cache", FP8_UNSUPPORTED, fatal="specific"),
    _sig(EventKind.FAILURE, "is not supported by", r"--kv-cache-dtype \S{1,256} is not supported by (?:the CPU attention backend"
         r"|MLA attention on CPU)", FP8_UNSUPPORTED, fatal="specific"),
    _sig(EventKind.FAILURE, "kv_cache_dtype not supported", r"kv_cache_dtype not supported", FP8_UNSUPPORTED, fatal="specific"),
    # ---- KV cache too small for the context; a wrapped paste keeps its numbers on the next lines
    _sig(EventKind.FAILURE, "max seq len",
         rf"To serve at least one request with the models?(?:'s)? {_MAX_SEQ},?\s*"
         rf"(?:{_KV_NEEDED}|\(?(?P<needed_only>{_GIB}) Gi?B)?"
         r"(?:.*?the estimated maximum model length is (?P<estimated_max_model_len>\d+))?",
         KV_INSUFFICIENT, fatal="specific",
         convert=lambda g: {**_numbers(max_model_len="int", needed_gib="float", available_kv_gib="float",
                                        estimated_max_model_len="int")(g),
                            **({"needed_gib": float(g["needed_only"] or 0)} if g.get("needed_only") else {})}),
    _sig(EventKind.FAILURE, "maximum number of tokens that can be stored",
         rf"The model's {_MAX_SEQ} is larger than the maximum number of tokens that can be "
         r"stored in KV cache \((?P<estimated_max_model_len>\d+)\)",
         KV_INSUFFICIENT, fatal="specific",
         convert=lambda g: {**_numbers(max_model_len="int", estimated_max_model_len="int")(g),
                            "kv_tokens": _int(g.get("estimated_max_model_len"))}),
    # A hybrid (Mamba) model keeps one state block per running sequence: fewer blocks than max_num_seqs cannot capture
    # full decode CUDA graphs (config/compilation.py, 0.2x). A shorter context frees no such block: fewer sequences do.
    _sig(EventKind.FAILURE, "exceeds available Mamba cache blocks",
         r"max_num_seqs \((?P<max_num_seqs>\d+)\) exceeds available Mamba cache blocks \((?P<mamba_cache_blocks>\d+)\)",
         KV_INSUFFICIENT, fatal="specific", convert=_numbers(max_num_seqs="int", mamba_cache_blocks="int")),
    _sig(EventKind.KV_DETAIL, "KV cache is needed", rf"^\s*{_KV_NEEDED}",
         convert=_numbers(needed_gib="float", available_kv_gib="float")),
    _sig(EventKind.KV_DETAIL, "larger than the available KV cache memory",
         rf"larger than the available KV cache memory \((?P<available_kv_gib>{_GIB}) Gi?B\)",
         convert=_numbers(available_kv_gib="float")),
    _sig(EventKind.KV_DETAIL, "estimated maximum model length is",
         r"estimated maximum model length is (?P<estimated_max_model_len>\d+)",
         convert=_numbers(estimated_max_model_len="int")),
    # ---- no room at all for KV
    _sig(EventKind.FAILURE, "No available memory for the cache blocks", r"No available memory for the cache blocks",
         NO_CACHE_BLOCKS, fatal="specific"),
    _sig(EventKind.FAILURE, "leaving none for the KV cache", r"^\s*(?:\w+: )?The worker already uses [\d.]+ GiB .*leaving none "
         r"for the KV cache", NO_CACHE_BLOCKS, fatal="specific"),
    _sig(EventKind.FAILURE, "Cannot auto-fit max_model_len", r"Cannot auto-fit max_model_len", NO_CACHE_BLOCKS, fatal="specific"),
    *CONFIG_SIGNATURES,
    # ---- a torch.compile artifact an earlier, failed compilation left in vLLM's cache (compiler_interface.py,
    # 0.9.1+; 0.8–0.9.0 asserted "failed to get the hash of the compiled graph" at the same check)
    _sig(EventKind.FAILURE, "failed to compile the model", rf"{_ENGINE_EXC}\w*Error: vLLM failed to compile the model\. "
         r"The most likely reason", COMPILE_CACHE, fatal="specific"),
    # torch's reader of a compiled artifact vLLM cached (standalone_compile): the bytes on disk are not what was written.
    _sig(EventKind.FAILURE, "Bytes object is corrupted", rf"{_ENGINE_EXC}RuntimeError: Bytes object is corrupted, "
         r"checksum does not match", COMPILE_CACHE, fatal="specific"),
    _sig(EventKind.FAILURE, "failed to get the hash of the compiled graph",
         rf"{_ENGINE_EXC}AssertionError: failed to get the hash of the compiled graph", COMPILE_CACHE, fatal="specific"),
    # ---- the process group could not form: NCCL's own error, torch.distributed's store and rendezvous. Before
    # READY a class of its own (launcher.vllm.diagnose makes it an engine death once vLLM has served).
    _sig(EventKind.FAILURE, "NCCL error", rf"{_ENGINE_EXC}\w*Error: NCCL error", DISTRIBUTED_INIT, fatal="specific"),
    _sig(EventKind.FAILURE, "nccl", r"^\s*nccl(?:System|Internal|UnhandledCuda|Remote|InvalidUsage|InvalidArgument)Error: ",
         DISTRIBUTED_INIT, fatal="specific"),
    _sig(EventKind.FAILURE, "Dist", rf"{_ENGINE_EXC}Dist(?:Store|Network)Error: ", DISTRIBUTED_INIT, fatal="specific"),
    # Ray's head could not start its control service (GCS: a port taken, /tmp full): the cluster vLLM's workers join
    # never formed.
    _sig(EventKind.FAILURE, "Failed to start GCS", rf"{_ENGINE_EXC}RuntimeError: Failed to start GCS\b", DISTRIBUTED_INIT,
         fatal="specific"),
    # Ascend's collective library (HCCL, torch_npu) could not create the communicator: `RuntimeError: create_config:…
    # HCCL function error: hcclCommInitRootInfoConfig(…), error code is 1`.
    _sig(EventKind.FAILURE, "HCCL function error", rf"{_ENGINE_EXC}\w*Error: (?:\S{{1,256}} )?HCCL function error: "
         r"hcclComm\w*Init", DISTRIBUTED_INIT, fatal="specific"),
    # A port of vLLM's own message queues between its processes (ZeroMQ), taken between choosing it and binding it: not
    # the API's port (that one is bound by the server's socket and says `[Errno …]`).
    _sig(EventKind.FAILURE, "ZMQError: Address already in use", rf"{_ENGINE_EXC}ZMQError: Address already in use",
         DISTRIBUTED_INIT, fatal="specific"),
    # ---- engine death; ignored once a shutdown is under way. Anchored at the start of the message: an
    # exception type or vLLM's own sentence starts it, where text a client sent never stands.
    _sig(EventKind.FAILURE, "EngineDeadError", rf"{_ENGINE_EXC}(?:Async)?EngineDeadError\b", ENGINE_DEAD, fatal="specific"),
    _sig(EventKind.FAILURE, "encountered a fatal error", r"^\s*EngineCore encountered a fatal error", ENGINE_DEAD,
         fatal="specific"),
    _sig(EventKind.FAILURE, "died unexpectedly", r"^\s*(?:Engine core|Worker) proc (?P<dead_proc>\S{1,256}) died unexpectedly",
         ENGINE_DEAD, fatal="specific", convert=_numbers(dead_proc="str")),
    _sig(EventKind.FAILURE, "engine core exited unexpectedly", r"engine core exited unexpectedly", ENGINE_DEAD, fatal="specific"),
    _sig(EventKind.FAILURE, "Engine iteration timed out", r"^\s*Engine iteration timed out", ENGINE_DEAD, fatal="specific"),
    _sig(EventKind.FAILURE, "died.", r"Engine process \(pid \d+\) died\.", ENGINE_DEAD, fatal="specific"),
    _sig(EventKind.FAILURE, "MQLLMEngine is already dead", r"^\s*MQLLMEngine is already dead", ENGINE_DEAD, fatal="specific"),
    # V0's async engine: its loop's task ended; the traceback this heads (exc_info) ends in what it died of.
    _sig(EventKind.FAILURE, "background task failed", r"^\s*Engine background task failed", ENGINE_DEAD,
         fatal="specific"),
    _sig(EventKind.FAILURE, "NCCL", r"ProcessGroupNCCL\S* .*watchdog thread terminated with exception", ENGINE_DEAD,
         fatal="specific"),
    # torch's NCCL watchdog: a collective (an all-gather, an all-reduce) never completed within its timeout. A rank
    # stopped taking part; the flight-recorder dump and the termination it prints next are its consequences.
    _sig(EventKind.FAILURE, "Watchdog caught", r"Watchdog caught collective operation timeout", ENGINE_DEAD,
         fatal="specific"),
    _sig(EventKind.FAILURE, "rror", rf"{_ENGINE_EXC}\w*Error: (?:Error in model execution: )?CUDA error: (?:an illegal "
         r"(?:memory access|instruction) was encountered|device-side assert triggered|unspecified launch failure)"
         r"|^\s*Failed: Cuda error \S{1,256} 'an illegal",
         ENGINE_DEAD, fatal="specific"),
    _sig(EventKind.FAILURE, "Got fatal signal", r"Got fatal signal from worker processes", ENGINE_DEAD, fatal="generic"),
    # ---- a native crash: a signal, or the GPU runtime's own fatal report, kills the process with no Python exception.
    # Before READY no flag is known to undo it (unknown: one retry, then the line); once vLLM served, the engine died
    # (launcher.vllm.diagnose). The shell's and Python's words stand alone on their line; Ray's carry its prefix.
    _sig(EventKind.FAILURE, "Fatal Python error", r"^\s*Fatal Python error: \w", UNKNOWN, fatal="specific"),
    _sig(EventKind.FAILURE, "*** SIG", r"\*\*\* SIG(?:SEGV|ABRT|BUS|ILL|FPE) received at time=\d", UNKNOWN, fatal="specific"),
    _sig(EventKind.FAILURE, "(core dumped", r"^\s*(?:\S.{0,120}\s)?(?:Segmentation fault|Aborted|Bus error|Illegal "
         r"instruction|Floating point exception)\s+\(core dumped\)", UNKNOWN, fatal="specific"),
    _sig(EventKind.FAILURE, "by GPU node-", r"^\s*(?:Memory access fault|HW Exception) by GPU node-\d", UNKNOWN,
         fatal="specific"),
    # ---- generic start-up failure: the root cause is printed just before or just after
    _sig(EventKind.FAILURE, "failed to start", r"(?:EngineCore|WorkerProc|Engine process) failed to start", UNKNOWN,
         fatal="generic"),
    _sig(EventKind.FAILURE, "initialization failed", r"(?:Engine core|WorkerProc) initialization failed", UNKNOWN,
         fatal="generic"),
    _sig(EventKind.FAILURE, "hit an exception", r"EngineCore hit an exception", UNKNOWN, fatal="generic"),
    _sig(EventKind.FAILURE, "please check the stack trace above", r"Worker failed with error .*please check the stack trace",
         UNKNOWN, fatal="generic"),
)


def is_native_crash(event: LogEvent) -> bool:
    """A native crash's line (the rows above that decide at once yet name no class): under a serving engine, its
    death. tests/unit/vllm/test_signatures.py checks that no other row is an unknown that decides at once."""
    return event.failure == UNKNOWN and event.fatal == "specific"
