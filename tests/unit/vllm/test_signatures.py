"""Log lines → events: prefixes of every version stripped, numbers read, failures classified."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from launcher.vllm import classify
from launcher.vllm.signature_kit import EventKind, FailureClass, LogEvent, new_event

E = "\x1b"

# (raw line, kind, failure class, a subset of the values)
LINES: list[tuple[str, str, str | None, dict[str, Any]]] = [
    ("(EngineCore pid=30957) INFO 11-29 15:41:36 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, "
     "Maximum concurrency for 2,048 tokens per request: 512.00x", "kv_tokens", None,
     {"kv_tokens": 1048576, "concurrency_len": 2048, "max_concurrency": 512.0}),
    (f"{E}[1;36m(EngineCore_0 pid=4242){E}[0;0m INFO 11-29 15:33:01 [kv_cache_utils.py:634] GPU KV cache size: "
     "218,448 tokens", "kv_tokens", None, {"kv_tokens": 218448}),
    ("INFO 11-29 15:33:01 [kv_cache_utils.py:637] Maximum concurrency for 32,768 tokens per request: 6.67x",
     "concurrency", None, {"max_concurrency": 6.67, "concurrency_len": 32768}),
    ("INFO 11-29 15:33:01 gpu_executor.py:76] # GPU blocks: 13653, # CPU blocks: 2730", "gpu_blocks", None,
     {"gpu_blocks": 13653, "cpu_blocks": 2730}),
    ("INFO 11-29 15:33:01 executor_base.py:111] # cuda blocks: 27306, # CPU blocks: 5461", "gpu_blocks", None,
     {"gpu_blocks": 27306}),
    ("(EngineCore_DP0 pid=1) INFO 11-29 15:33:00 [gpu_worker.py:298] Available KV cache memory: -1.44 GiB",
     "failure", "no_cache_blocks", {"available_kv_gib": -1.44}),  # negative: the attempt is lost, decide now
    ("(Worker pid=31313) INFO 11-29 15:41:36 [cpu_worker.py:260] Explicitly set (1.0/11.84) GiB for KV cache on "
     "node 0.", "available_kv", None, {"available_kv_gib": 1.0, "total_gib": 11.84}),
    ("INFO 11-29 15:33:00 worker.py:249] model weights take 56.92GiB; non_torch_memory takes 0.41GiB; PyTorch "
     "activation peak memory takes 48.50GiB; the rest of the memory reserved for KV Cache is 20.00GiB.",
     "available_kv", None, {"available_kv_gib": 20.0}),
    # What the start-up was asked for, before any engine line; the utilization 0.21+ restates; the free memory a
    # kv_cache_memory_bytes start-up reports; a TPU's HBM.
    ("INFO 06-20 20:03:42 [cli_args.py:309] non-default args: {'host': '0.0.0.0', 'model': 'Qwen/Qwen3-30B-A3B', "
     "'max_model_len': 32768, 'gpu_memory_utilization': 0.85}", "engine_args", None,
     {"max_model_len": 32768, "utilization": 0.85}),
    ("INFO 05-25 [utils.py:240] non-default args: {'model': 'Qwen/Qwen2.5-0.5B-Instruct', 'max_model_len': 512}",
     "engine_args", None, {"max_model_len": 512}),
    ("(EngineCore pid=1833) INFO 07-06 09:41:32 [gpu_worker.py:495] CUDA graph memory profiling is enabled (default "
     "since v0.21.0). The current --gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9145 "
     "without CUDA graph memory profiling.", "engine_args", None, {"utilization": 0.92}),
    ("(Worker_TP0 pid=190) INFO 07-23 22:40:36 [gpu_worker.py:459] Initial free memory 110.04 GiB, reserved 10.0 GiB "
     "memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling.", "engine_args",
     None, {"free_gib": 110.04}),
    ("(EngineCore pid=327) INFO 08-10 17:56:01 [tpu_worker.py:557] Memory statistics | total_hbm_limit_gb=31.24GiB | "
     "total_hbm_limit_cap_gb=28.74GiB", "engine_args", None, {"total_gib": 31.24}),
    ("(EngineCore pid=1) ERROR 06-23 15:43:19 [core.py:1195] RuntimeError: Could not find nvcc and default "
     "cuda_home='/usr/local/cuda' doesn't exist", "failure", "config", {"package": "nvcc"}),
    # vLLM's memory summary, its two sentences put on two lines by a paste: each line gives its numbers.
    ("Free memory on device (110.37/121.69 GiB) on startup.", "memory_budget", None,
     {"free_gib": 110.37, "total_gib": 121.69}),
    ("Desired GPU memory utilization is (0.87, 105.87 GiB).", "memory_budget", None,
     {"utilization": 0.87, "requested_gib": 105.87}),
    ("(EngineCore pid=1) INFO 11-29 [gpu_model_runner.py:3001] Model loading took 28.95 GiB memory and 41.2 seconds",
     "model_loading", None, {}),
    ("(EngineCore pid=1) INFO 11-29 15:32:55 [gpu_model_runner.py:3001] Model loading took 28.95 GiB memory and "
     "41.200000 seconds", "model_loading", None, {"model_loading_gib": 28.95}),
    ("INFO 11-29 15:32:55 model_runner.py:1099] Loading model weights took 14.9888 GB", "model_loading", None,
     {"model_loading_gb": 14.9888}),
    ("(APIServer pid=30597) INFO 11-29 15:41:17 [api_utils.py:347]  \u2584\u2584 \u2584\u2588 \u2588     \u2588     "
     "\u2588 \u2580\u2584\u2580 \u2588  version 0.32.0\r", "version", None, {"vllm_version": "0.32.0"}),
    ("(EngineCore pid=1) INFO 11-29 15:41:22 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
     "model='/m'", "version", None, {"vllm_version": "0.32.0"}),
    ("INFO 11-29 15:32:40 api_server.py:528] vLLM API server version 0.6.6", "version", None,
     {"vllm_version": "0.6.6"}),
    ("(APIServer pid=1) INFO 11-29 15:41:38 [entry.py:140] Starting vLLM server on http://127.0.0.1:8123",
     "server_starting", None, {"address": "http://127.0.0.1:8123"}),
    ("INFO 11-29 15:33:05 [api_server.py:1090] Starting vLLM API server 0 on http://0.0.0.0:8000",
     "server_starting", None, {}),
    ("INFO:     Application startup complete.", "startup_complete", None, {}),
    ("\rLoading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01]\rLoading safetensors checkpoint "
     "shards: 100% Completed | 2/2 [00:02<00:00]", "progress", None, {"phase": "weights", "percent": 100}),
    ("(APIServer pid=1) INFO 11-29 15:41:39 [launcher.py:254] [shutdown] API server: shutdown triggered",
     "shutdown", None, {}),
    # failures
    ("\r(EngineCore_DP0 pid=4242) ERROR 11-29 15:32:48 [core.py:708] ValueError: Free memory on device (10.5/79.19 "
     "GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization",
     "failure", "startup_memory", {"free_gib": 10.5, "total_gib": 79.19, "utilization": 0.9, "requested_gib": 71.27}),
    ("ValueError: Free memory on device cuda:0 (10.5/139.8 GiB) on startup is less than desired GPU memory "
     "utilization (0.92, 128.62 GiB).", "failure", "startup_memory", {"free_gib": 10.5, "total_gib": 139.8}),
    ("(VllmWorker-0 pid=1) ERROR 11-29 15:46:17 [multiproc_executor.py:953] ValueError: Available memory on node 0 "
     "(10.47/11.84 GiB) on startup is less than desired CPU memory utilization (0.92, 10.89 GiB). On the CPU",
     "failure", "startup_memory", {"free_gib": 10.47, "requested_gib": 10.89}),
    ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity",
     "failure", "startup_memory", {"tried": "1.96 GiB"}),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", "failure", "startup_memory", {}),
    ("ERROR 11-29 [gpu_model_runner.py:1] Failed to load model - not enough GPU memory. Try lowering "
     "--gpu-memory-utilization", "failure", "startup_memory", {}),
    ("RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try lowering "
     "`max_num_seqs`", "failure", "startup_memory", {}),
    ("ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', "
     "'fp8e5')\")", "failure", "fp8_unsupported", {}),
    ("NotImplementedError: FlashAttention does not support fp8 kv-cache on this device.", "failure",
     "fp8_unsupported", {}),
    ("NotImplementedError: VLLM_USE_V1=1 is not supported with --kv-cache-dtype.", "failure", "fp8_unsupported", {}),
    ("ValueError: Selected backend FLASH_ATTN is not valid for this configuration. Reason: ['kv_cache_dtype not "
     "supported']", "failure", "fp8_unsupported", {}),
    ("AssertionError: Triton reshape-and-cache cannot store kv_cache_dtype=fp8 on this device: an FP8 KV cache needs "
     "native fp8e4nv (SM89+).", "failure", "fp8_unsupported", {}),
    ("ValueError: To serve at least one request with the model's max seq len (32768), (4.0 GiB KV cache is needed, "
     "which is larger than the available KV cache memory (0.98 GiB). Based on the available memory, the estimated "
     "maximum model length is 8064. Try increasing", "failure", "kv_insufficient",
     {"max_model_len": 32768, "needed_gib": 4.0, "available_kv_gib": 0.98, "estimated_max_model_len": 8064}),
    ("ValueError: To serve at least one request with the models's max seq len (262144), (24.00 GB KV cache is "
     "needed, which is larger than the available KV cache memory (20.00 GB). Try increasing", "failure",
     "kv_insufficient", {"max_model_len": 262144, "needed_gib": 24.0}),
    ("ValueError: To serve at least one request with the model max seq len (250000), 3.19 GiB KV cache is needed, "
     "which is larger than the available KV cache memory (0.01 GiB). Based on the available memory, the estimated "
     "maximum model length is 256.", "failure", "kv_insufficient",  # a paste that dropped the "'s"
     {"max_model_len": 250000, "needed_gib": 3.19, "available_kv_gib": 0.01, "estimated_max_model_len": 256}),
    ("ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be stored in "
     "KV cache (56736). Try increasing", "failure", "kv_insufficient", {"estimated_max_model_len": 56736}),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`", "failure",
     "no_cache_blocks", {}),
    ("KeyError: 'invalid tool call parser: nosuch (chose from { hermes,qwen3_coder,xlam })'", "failure", "config",
     {"tool_parser": "nosuch", "valid_tool_parsers": ["hermes", "qwen3_coder", "xlam"]}),
    ("TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser", "failure", "config", {}),
    ("vllm serve: error: unrecognized arguments: --swap-space 4", "failure", "config",
     {"arguments": "--swap-space 4"}),
    ("  Value error, User-specified max_model_len (8192) is greater than the derived max_model_len "
     "(max_position_embeddings=4096.0 or model_max_length=None in model's config.json).", "failure", "config",
     {"max_model_len": 8192, "derived_max_model_len": 4096}),
    ("OSError: [Errno 98] Address already in use", "failure", "config", {}),
    ("(APIServer pid=30568) OSError: [Errno 48] Address already in use", "failure", "config", {}),  # macOS's errno
    ("ValueError: torch.bfloat16 is not supported for quantization method awq. Supported dtypes: [torch.float16]",
     "failure", "config", {"dtype": "bfloat16", "quantization": "awq", "supported": "torch.float16"}),
    ("▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.1.dev17670+g7d24aa6f2", "version", None,
     {"vllm_version": "0.1.dev17670+g7d24aa6f2"}),  # a source build from a checkout without tags: two numbers
    ("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
     "failure", "config", {}),
    ("huggingface_hub.errors.GatedRepoError: 401 Client Error.", "failure", "config", {}),
    ("ValueError: Invalid repository ID or local directory specified: 'x/y'.", "failure", "config", {}),
    ("OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/srv/m'.", "failure", "config", {}),
    ("(APIServer pid=1) ERROR 11-29 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
     "encountered an issue.", "failure", "engine_dead", {}),
    ("(APIServer pid=1) ERROR 11-29 15:40:00 [core_client.py:564] Engine core proc EngineCore_DP0 died "
     "unexpectedly, shutting down client.", "failure", "engine_dead", {"dead_proc": "EngineCore_DP0"}),
    ("(EngineCore pid=6181) ERROR 11-29 15:43:46 [core.py:1510] EngineCore failed to start.", "failure", "unknown",
     {}),
    ("vllm-1  | (APIServer pid=1) INFO 11-29 15:41:38 [entry.py:140] Starting vLLM server on http://0.0.0.0:8000",
     "server_starting", None, {"address": "http://0.0.0.0:8000"}),
    ("2026-11-29T15:41:38.123Z (APIServer pid=1) INFO 11-29 15:41:38 [entry.py:140] Starting vLLM server on "
     "http://0.0.0.0:8000", "server_starting", None, {}),
    # a log shipper's bracketed timestamp (Fluent Bit, Vector, many CI consoles)
    ("[2026-11-29 15:41:38.123] (APIServer pid=1) INFO 11-29 15:41:38 [entry.py:140] Starting vLLM server on "
     "http://0.0.0.0:8000", "server_starting", None, {}),
    ("[2025-10-09T06:02:09Z] ERROR 10-09 06:02:09 [core.py:700] ValueError: No available memory for the cache "
     "blocks.", "failure", "no_cache_blocks", {}),
]

QUIET = [
    "(APIServer pid=1) WARNING 11-29 [system_utils.py:255] Found ulimit of 20000 and failed to automatically increase",
    "(APIServer pid=1) INFO 11-29 15:41:38 [launcher.py:195] Route: /v1/models, Methods: GET",
    "(EngineCore pid=1) ERROR 11-29 15:43:46 [core.py:1510]     raise ValueError(",
    "    raise TypeError(\"Error: --enable-auto-tool-choice requires --tool-call-parser\")",
    "(APIServer pid=1) WARNING 11-29 [parallel.py:1] Address already in use. Retrying with a new port.",
    "WARNING 11-29 15:32:41 arg_utils.py:1385] --kv-cache-dtype is not supported by the V1 Engine. Falling back to V0.",
    "(APIServer pid=1) INFO 11-29 15:41:17 [cache.py:361] Using fp8 data type to store kv cache.",
]
# Lines that are events, but never failures: the 0.10 memory breakdown of a good start, and client text.
NOT_FAILURES = [
    "(Worker pid=1) INFO 11-29 15:41:28 [free.py:1] Free memory on device (70.1/79.19 GiB) on startup. Desired GPU "
    "memory utilization is (0.9, 71.27 GiB).",
    "INFO:     127.0.0.1:35806 - \"GET /health HTTP/1.1\" 200 OK",
]


class TestClassify:
    @pytest.mark.parametrize(("line", "kind", "failure", "values"), LINES)
    def test_line_becomes_event(self, line: str, kind: str, failure: str | None, values: dict[str, Any]) -> None:
        """Each signature yields its kind, class and numbers, whatever prefix the version wrote."""
        event = classify.classify(line)
        assert event is not None
        assert (kind, failure) == (event.kind, event.failure)
        assert values == {k: event.values[k] for k in values}

    @pytest.mark.parametrize("stamp", ["2025-10-09T06:02:09.123456789Z ", "[2025-10-09 06:02:09] ",
                                       "[2025-10-09T06:02:09+02:00] "])
    def test_a_shippers_timestamp_is_not_part_of_the_root_cause(self, stamp: str) -> None:
        event = classify.classify(f"{stamp}(EngineCore pid=5) ERROR 10-09 06:02:09 [core.py:700] ValueError: No "
                                  "available memory for the cache blocks.")
        assert event is not None and event.message == "ValueError: No available memory for the cache blocks."
        assert ("EngineCore", 5) == (event.proc, event.pid)

    @pytest.mark.parametrize("line", QUIET)
    def test_lines_that_say_nothing_we_use(self, line: str) -> None:
        """Warnings, access logs, traceback source lines and near-misses are not events."""
        assert classify.classify(line) is None

    @pytest.mark.parametrize("line", NOT_FAILURES)
    def test_lines_that_are_never_failures(self, line: str) -> None:
        event = classify.classify(line)
        assert event is not None and event.failure is None

    def test_config_failures_carry_their_reason(self) -> None:
        reasons = {line: classify.classify(line) for line, _, f, _ in LINES if f == "config"}
        assert {"tool_parser", "unknown_flag", "max_model_len_above_model", "port_in_use", "gated_repo", "missing_dependency",
                "model_not_found", "dtype_unsupported"} == {e.reason for e in reasons.values() if e is not None}

    def test_fatal_kinds(self) -> None:
        """Specific root causes end an attempt at once; generic lines wait for the root cause."""
        specific = classify.classify("ValueError: No available memory for the cache blocks.")
        generic = classify.classify("(EngineCore pid=1) ERROR 11-29 15:43:46 [core.py:1] EngineCore failed to start.")
        assert specific is not None and "specific" == specific.fatal
        assert generic is not None and "generic" == generic.fatal

    def test_normalize_strips_every_prefix(self) -> None:
        proc, level, message = classify.normalize(
            f"vllm-1  | [rank0]: {E}[0;36m(EngineCore_DP0 pid=7){E}[0;0m ERROR 11-29 15:33:01 [core.py:708] boom\r")
        assert ("EngineCore_DP0", "ERROR", "boom") == (proc, level, message)

    def test_a_prefix_whose_colour_codes_lost_their_escape_is_still_a_prefix(self) -> None:
        """A paste that dropped the ESC byte leaves `[1;36m(EngineCore_DP0 pid=149)[0;0m`: still vLLM's prefix, and
        the exception after it starts the message."""
        proc, level, message = classify.normalize(
            "[1;36m(EngineCore_DP0 pid=149)[0;0m ERROR 12-08 22:23:04 [core.py:842] torch.AcceleratorError: HIP error")
        assert ("EngineCore_DP0", "ERROR", "torch.AcceleratorError: HIP error") == (proc, level, message)

    @pytest.mark.parametrize(("line", "proc", "level"), [
        ("2026-05-01 21:17:45.026 | (EngineCore pid=187) ERROR 05-01 19:17:45 [core.py:1136] ValueError: x",
         "EngineCore", "ERROR"),  # a log viewer's timestamp column (Docker Desktop)
        ("2024-01-01 10:00:00 | ERROR | stderr | ValueError: x", None, None),  # FastChat's logger keeps its own form
        ("Aug 23 22:59:26 dgx qwen3.8-27b.sh[863334]: (EngineCore pid=863334) ERROR 08-23 22:59:26 [core.py:1349] "
         "ValueError: x", "EngineCore", "ERROR"),  # journalctl
        ("vLLM STDOUT: ERROR 05-01 14:27:02 [core.py:1] ValueError: x", None, "ERROR"),  # a wrapper (Unsloth) labels streams
        ("2026-05-01T10:00:00.123456789Z stderr F ERROR 05-01 14:27:02 [core.py:1] ValueError: x", None, "ERROR"),  # CRI
    ])
    def test_a_log_viewers_or_journals_columns_are_a_prefix(self, line: str, proc: str | None, level: str | None) -> None:
        assert (proc, level, "ValueError: x") == classify.normalize(line)


def test_a_free_memory_failure_cut_before_its_verdict_is_no_summary() -> None:
    """The failure's first half, cut by a terminal before "is less than desired ...", has no full stop: it is no
    line of the summary of a check that passed (the wrapped failure is read whole by the fold)."""
    assert classify.classify("Free memory on device (7.34/139.72 GiB) on startup") is None


def test_the_fast_event_constructor_makes_the_same_frozen_event() -> None:
    """`new_event` (the classifier's path) sets the slots directly: the event equals the dataclass's own, and stays
    frozen."""
    fields = (EventKind.FAILURE, "msg", {"free_gib": 1.5}, FailureClass.CONFIG, "port_in_use", "specific", "APIServer", 7)
    fast, slow = new_event(*fields), LogEvent(*fields)
    assert fast == slow and dataclasses.astuple(fast) == dataclasses.astuple(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.message = "changed"  # type: ignore[misc]


def test_only_native_crashes_are_unknowns_that_decide_at_once() -> None:
    """`is_native_crash` reads a row's class and fatality: an unknown that decides at once must be a crash's line
    (a signal, Python's fatal error, the GPU runtime's fault), or a crash under a serving engine would be misread."""
    from launcher.vllm.signatures import SIGNATURES, UNKNOWN, is_native_crash

    crash_needles = {"Fatal Python error", "*** SIG", "(core dumped", "by GPU node-"}
    deciding = {sig.needle for sig in SIGNATURES if sig.failure == UNKNOWN and sig.fatal == "specific"}
    assert crash_needles == deciding
    crash = classify.classify("Fatal Python error: Segmentation fault")
    generic = classify.classify("(EngineCore pid=1) ERROR 11-29 15:43:46 [core.py:1] EngineCore failed to start.")
    assert crash is not None and is_native_crash(crash)
    assert generic is not None and not is_native_crash(generic)


def test_the_length_vllm_resolved_is_the_last_it_printed() -> None:
    """"Using max model len" is the length vLLM runs with; printed twice (a model's config shortens it), the last
    stands, over the length the arguments asked."""
    from launcher.vllm.diagnose import diagnose_lines

    head = "(APIServer pid=1) INFO 02-28 16:40:50 [model.py:1661] "
    d = diagnose_lines([head.replace("[model.py:1661]", "[utils.py:328]") + "non-default args: {'max_model_len': 8192}",
                        head + "Using max model len 8192", head + "Using max model len 2048"])
    assert 2048 == d.numbers.get("max_model_len")


@pytest.mark.parametrize("line", ["vLLM Version                              : 0.11.0", "vLLM version: 0.11.0"])
def test_an_environment_reports_version_is_read(line: str) -> None:
    event = classify.classify(line)
    assert event is not None and "0.11.0" == event.values.get("vllm_version")


def test_the_version_nvidias_container_prints_before_vllm_starts_is_read() -> None:
    from launcher.vllm.diagnose import diagnose_lines

    d = diagnose_lines(["NVIDIA Release 26.04 (build 260771722)", "vLLM Version 0.24.0+092c4842",
                        "vllm: error: unrecognized arguments: --disable-log-requests"])
    assert (d.cls, d.numbers.get("vllm_version")) == ("config", "0.24.0+092c4842")
