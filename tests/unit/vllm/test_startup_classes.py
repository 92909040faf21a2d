"""The classes a remedy exists for: a corrupted torch.compile cache, a group that never formed, a missing package;
and a native crash, which no flag undoes before READY and which is the engine's death after it."""

from __future__ import annotations

import pytest

from launcher.vllm.diagnose import diagnose_lines

TRACEBACK = "(EngineCore_DP0 pid=7) ERROR 11-29 10:54:13 [core.py:708] Traceback (most recent call last):"
STARTED = "(APIServer pid=1) INFO 11-29 10:55:00 [launcher.py:46] Application startup complete."
E = "(EngineCore_DP0 pid=7) ERROR 11-29 10:54:13 [core.py:708] "


@pytest.mark.parametrize(("line", "cls", "reason", "package"), [
    (E + "RuntimeError: vLLM failed to compile the model. The most likely reason for this is that a previous "
     "compilation failed, leading to a corrupted compilation artifact.", "compile_cache", None, None),
    (E + "AssertionError: failed to get the hash of the compiled graph", "compile_cache", None, None),
    (E + "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
     "distributed_init", None, None),
    (E + "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1333, internal error",
     "distributed_init", None, None),
    (E + "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
     "distributed_init", None, None),
    (E + "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to "
     "connect to (172.17.0.9, 46229).", "distributed_init", None, None),
    (E + "ModuleNotFoundError: No module named 'torchvision'", "config", "missing_dependency", "torchvision"),
    (E + "ModuleNotFoundError: No module named 'cv2'", "config", "missing_dependency", "opencv-python-headless"),
    (E + "torch.AcceleratorError: HIP error: invalid device ordinal", "config", "not_enough_gpus", None),
    (E + "RuntimeError: CUDA error: invalid device ordinal", "config", "not_enough_gpus", None),
    (E + "ImportError: This modeling file requires the following packages that were not found in your environment: "
     "flash_attn, einops. Run `pip install flash_attn einops`", "config", "missing_dependency", "flash-attn einops"),
    (E + "RuntimeError: Bytes object is corrupted, checksum does not match. Expected: b'\\xf4\\xd5\\nx', Got: "
     "b'p\\xd2\\x80\\x8e'", "compile_cache", None, None),
    (E + "zmq.error.ZMQError: Address already in use (addr='tcp://10.0.0.58:40043')", "distributed_init", None, None),
    (E + "LlamaTokenizer requires the SentencePiece library but it was not found in your environment. Checkout the "
     "instructions on the installation page of its repo", "config", "missing_dependency", "sentencepiece"),
    (E + "ImportError: Please install bitsandbytes>=0.45.0 via `pip install bitsandbytes>=0.45.0` to use bitsandbytes "
     "quantizer.", "config", "missing_dependency", "bitsandbytes"),
    (E + "ImportError: flashinfer is not installed. Please install it with `pip install flashinfer-python`.", "config",
     "missing_dependency", "flashinfer-python"),
    (E + "RuntimeError: DeepGEMM backend is not available. Please install the `deep_gemm` package.", "config",
     "missing_dependency", "deep_gemm"),
    (E + "OSError: /models/qwen does not appear to have a file named config.json. Checkout "
     "'https://huggingface.co//models/qwen/tree/None' for available files.", "config", "model_not_found", None),
    (E + "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the cached files "
     "and it looks like Qwen/Qwen3-8B is not the path to a directory containing a file named config.json.", "config",
     "model_not_found", None),
    (E + "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder for the "
     "specified revision on the local disk and outgoing traffic has been disabled. To enable repo look-ups and "
     "downloads online, set 'HF_HUB_OFFLINE=0' as environment variable.", "config", "model_not_found", None),
    (E + "RuntimeError: Triton Error [CUDA]: out of memory", "startup_memory", None, None),
    (E + "RuntimeError: NPU out of memory. Tried to allocate 2.57 GiB (NPU 0; 60.96 GiB total capacity; 57.49 GiB "
     "already allocated)", "startup_memory", None, None),
    (E + "RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:148 HCCL function error: "
     "hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error code is 1",
     "distributed_init", None, None),
    (E + "RuntimeError: Sparse Attention Indexer CUDA op requires DeepGEMM to be installed.", "config",
     "missing_dependency", "deepgemm"),
    (E + "RuntimeError: Failed to find C compiler. Please specify via CC environment variable or set "
     "triton.knobs.build.impl.", "config", "missing_dependency", "cc"),
    (E + "runai_model_streamer.file_streamer.requests_iterator.RunaiStreamerMemoryLimitException: Memory limit "
     "supplied: 2147483648 cannot be smaller than: 2542796800", "config", "bad_argument", None),
    (E + "RuntimeError: MPS backend out of memory (MPS allocated: 17.36 GB, other allocations: 613.56 MB, max allowed: "
     "18.13 GB). Tried to allocate 192.00 MB on private pool.", "startup_memory", None, None),
    (E + "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried "
     "to allocate 34359738368 bytes. Error code 12 (Cannot allocate memory)", "startup_memory", None, None),
])
def test_before_ready(line: str, cls: str, reason: str | None, package: str | None) -> None:
    """A traceback that ends in the line decides the start-up's class, with the package named."""
    d = diagnose_lines([TRACEBACK, line])
    assert (cls, reason) == (d.cls, d.reason)
    assert package == d.numbers.get("package")
    if "Error: " in line:  # transformers' library message stands on the line after its `ImportError:`
        assert "traceback" == d.evidence


def test_nccl_while_serving_is_an_engine_death() -> None:
    """Once vLLM served, NCCL failing is the engine dying under load, not a start-up class."""
    d = diagnose_lines([STARTED, TRACEBACK, E + "RuntimeError: NCCL error: remote process exited or there was a "
                        "network error, NCCL version 2.21.5"])
    assert "engine_dead" == d.cls


def test_a_python_without_vllm_is_read_from_its_one_line() -> None:
    """`python -m vllm.entrypoints.openai.api_server` in a Python without vLLM prints runpy's one line, no traceback."""
    d = diagnose_lines(["/srv/.venv/bin/python: Error while finding module specification for "
                        "'vllm.entrypoints.openai.api_server' (ModuleNotFoundError: No module named 'vllm')"])
    assert ("config", "missing_dependency", "vllm") == (d.cls, d.reason, d.numbers.get("package"))


def test_vllms_own_module_is_not_a_model_dependency() -> None:
    """`No module named 'vllm._C'` is a broken vLLM build: no package for the profile to install."""
    d = diagnose_lines([TRACEBACK, E + "ModuleNotFoundError: No module named 'vllm._C'"])
    assert "missing_dependency" != d.reason


def test_the_warning_that_vllm_recompiles_is_no_failure() -> None:
    """vLLM recovers from an unreadable AOT artifact by compiling again: a warning, never the class."""
    d = diagnose_lines([
        "(EngineCore pid=7) WARNING 11-29 10:54:13 [decorators.py:335] Compiling model again due to a load failure "
        "from /root/.cache/vllm/torch_compile_cache/torch_aot_compile/ab/rank_0_0/model, reason: Compile cache "
        "file corrupted.", STARTED])
    assert "ok" == d.cls


WORKER = "(EngineCore_DP0 pid=742) (RayWorkerWrapper pid=233, ip=10.20.1.125) "
CRASHES = [
    "Fatal Python error: Segmentation fault",
    WORKER + "[2025-11-12 11:12:17,145 E 233 233] logging.cc:474: *** SIGSEGV received at time=1762945937 on cpu 6 ***",
    "Aborted (core dumped)",
    "bash: line 1:  4242 Segmentation fault      (core dumped) vllm serve Qwen/Qwen3-8B",
    "Memory access fault by GPU node-1 (Agent handle: 0x43578c10) on address 0x7f58f8001000. Reason: Page not present "
    "or supervisor privilege.",
    "HW Exception by GPU node-1 (Agent handle: 0x2f0fbb70) reason :GPU Hang",
]
LOADED = "(EngineCore_DP0 pid=7) INFO 11-29 10:54:00 [gpu_model_runner.py:2997] Model loading took 7.5 GiB and 9.1 seconds"


@pytest.mark.parametrize("line", CRASHES)
def test_a_native_crash_is_a_failure_before_ready_and_an_engine_death_after(line: str) -> None:
    """No Python exception, only a signal or the GPU runtime's report: before READY `unknown` (no flag undoes it),
    never `ok`; once vLLM served, the engine died."""
    d = diagnose_lines([LOADED, line])
    assert ("unknown", line.removeprefix(WORKER)) == (d.cls, d.root_cause)
    assert "engine_dead" == diagnose_lines([LOADED, STARTED, line]).cls


@pytest.mark.parametrize("line", [
    "(APIServer pid=1) INFO 11-29 10:55:00 [api_server.py:1] To avoid a Segmentation fault (core dumped) set X=1",
    "(APIServer pid=1) INFO 11-29 10:55:00 [logger.py:1] Fatal Python error: is a phrase a prompt may hold",
    "the words Memory access fault by GPU node-1 inside a sentence",
    # A termination asked for (the operator, systemd, the launcher itself) is no crash, whoever prints it.
    WORKER + "[2025-05-26 18:58:10,599 E 629624 629624] logging.cc:496: *** SIGTERM received at time=1748300290 on cpu 8 ***",
    "*** SIGINT received at time=1748300290 on cpu 8 ***",
])
def test_crash_words_inside_another_line_are_no_crash(line: str) -> None:
    """The shell's, Python's and the GPU runtime's words stand at the start of their own line; an INFO record or a
    sentence that holds them is no crash."""
    assert "ok" == diagnose_lines([LOADED, line, STARTED]).cls


def test_an_installed_package_that_refuses_to_import_is_a_missing_dependency() -> None:
    """numba's own check raises the ImportError, not vLLM: the environment is what to fix, the package is named."""
    site = "/venv/lib/python3.12/site-packages/"
    d = diagnose_lines([TRACEBACK, E + f'  File "{site}vllm/v1/spec_decode/ngram_proposer.py", line 6, in <module>',
                        E + f'  File "{site}numba/__init__.py", line 45, in _ensure_critical_deps',
                        E + "ImportError: Numba needs NumPy 2.2 or less. Got NumPy 2.4."])
    assert ("config", "missing_dependency", "numba") == (d.cls, d.reason, d.numbers.get("package"))
    # An ImportError vLLM's own file raises names no installed package to fix.
    d = diagnose_lines([TRACEBACK, E + f'  File "{site}vllm/model_executor/models/x.py", line 6, in <module>',
                        E + "ImportError: cannot import name 'Foo' from 'vllm.model_executor.layers'"])
    assert d.numbers.get("package") is None


def test_an_offline_run_that_generated_is_no_failed_start_up() -> None:
    """`LLM.generate`'s progress with prompts done is the engine serving; the ImportError Python prints while it tears
    itself down afterwards is no start-up failure."""
    lines = [LOADED, "Processed prompts:  25%|██▌       | 1/4 [00:04<00:12,  4.22s/it, est. speed input: 1.42 toks/s]",
             "Traceback (most recent call last):",
             '  File "/usr/lib/python3.10/weakref.py", line 667, in _exitfunc',
             "ImportError: sys.meta_path is None, Python is likely shutting down"]
    assert "ok" == diagnose_lines(lines).cls
    # No prompt done yet proves nothing: the same exception then ends a start-up.
    assert "ok" != diagnose_lines([LOADED, "Processed prompts:   0%|          | 0/4 [00:00<?, ?it/s]", *lines[2:]]).cls


def test_rays_warning_that_the_gpus_are_too_few_convicts_a_start_up_that_then_waits() -> None:
    """vLLM 0.8's Ray executor warns that the placement group needs more GPUs than there are, then waits for them;
    a log that ends waiting (or killed by the operator) failed for that reason."""
    waiting = ("INFO 05-26 18:54:03 [ray_utils.py:233] Waiting for creating a placement group of specs for 10 seconds. "
               "specs=[{'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status` and `ray list nodes` to see if you have enough")
    d = diagnose_lines(["INFO 05-26 18:53:40 [api_server.py:1043] vLLM API server version 0.8.5.post1",
                        "WARNING 05-26 18:53:53 [ray_utils.py:342] The number of required GPUs exceeds the total "
                        "number of available GPUs in the placement group.", waiting,
                        "*** SIGTERM received at time=1748300290 on cpu 8 ***"])
    assert ("config", "not_enough_gpus") == (d.cls, d.reason)


@pytest.mark.parametrize("message", [
    "RuntimeError: Please install the latest version of transformers to run this model.",
    "ValueError: Please install a newer driver",
    "ImportError: Please install vllm with the [audio] extra: pip install vllm[audio]",
])
def test_an_install_hint_without_a_package_name_names_no_package(message: str) -> None:
    """"Please install" is a package's name only where a command, a quote or a version marks it: advice to upgrade
    a library or a driver, or an extra of vLLM itself, is not a Python package missing."""
    d = diagnose_lines([TRACEBACK, E + message])
    assert "missing_dependency" != d.reason


def test_an_out_of_memory_while_allocating_the_kv_cache_is_the_profiled_budget() -> None:
    """The KV cache's tensors did not fit the budget that profiling measured: the profiling step's out-of-memory."""
    frame = '(Worker_TP0 pid=9) ERROR 02-07 18:18:59 [multiproc_executor.py:824]   File "/x/vllm_ascend/worker/' \
            'model_runner_v1.py", line 2499, in _allocate_kv_cache_tensors'
    d = diagnose_lines([TRACEBACK, frame, E + "RuntimeError: NPU out of memory. Tried to allocate 2.57 GiB (NPU 0; "
                        "60.96 GiB total capacity; 57.49 GiB already allocated)"])
    assert ("startup_memory", "profiling", 60.96) == (d.cls, d.reason, d.numbers.get("total_gib"))


def test_the_innermost_frame_names_the_phase_of_an_out_of_memory() -> None:
    """An outer frame (here the weights' loader calling into graph capture, as a model's own warm-up can) wraps the
    frame that ran out of memory: the innermost one, printed last before the error, names the phase."""
    def frame(function: str) -> str:
        return f'  File "/x/vllm/worker/gpu_model_runner.py", line 1, in {function}'
    d = diagnose_lines([TRACEBACK, frame("load_model"), frame("capture_model"),
                        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."])
    assert ("startup_memory", "cuda_graphs") == (d.cls, d.reason)
    outer_last = diagnose_lines([TRACEBACK, frame("capture_model"), frame("load_model"),
                                 "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."])
    assert ("startup_memory", "weights") == (outer_last.cls, outer_last.reason)


def test_a_malformed_json_file_is_no_refused_setting() -> None:
    """pydantic passes on the JSON decoder's error about a model file (an empty config): vLLM's config module raised
    it, yet no flag is wrong; a file is broken (unknown)."""
    d = diagnose_lines([TRACEBACK, E + "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                        "ModelConfig", E + "  Value error, Expecting value: line 1 column 1 (char 0) [type=value_error, "
                        "input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]"])
    assert ("unknown", None) == (d.cls, d.reason)


def test_rays_control_service_failing_to_start_is_a_group_that_never_formed() -> None:
    d = diagnose_lines(["RuntimeError: Failed to start GCS.  Last 0 lines of error files:"])
    assert "distributed_init" == d.cls


def test_mamba_state_blocks_below_max_num_seqs_are_too_little_kv_for_the_batch() -> None:
    """vLLM's engine re-raises the worker's refusal inside its own `Worker failed with error '…'`: the message, with
    its two figures, is the cause; the worker's death that follows is not."""
    d = diagnose_lines([
        "(EngineCore pid=1) RuntimeError: Worker failed with error 'max_num_seqs (256) exceeds available Mamba cache "
        "blocks (189). Each decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. "
        "Please lower max_num_seqs to at most 189 or increase gpu_memory_utilization.', please check the stack trace "
        "above for the root cause",
        "(EngineCore pid=1) ERROR 05-02 10:00:00 [multiproc_executor.py:1] Worker proc VllmWorker-0 died unexpectedly"])
    assert ("kv_insufficient", 256, 189) == (d.cls, d.numbers.get("max_num_seqs"), d.numbers.get("mamba_cache_blocks"))


def test_an_exception_whose_message_starts_on_the_next_line_is_named_by_that_line() -> None:
    """`raise RuntimeError('''\\n  An attempt …''')` prints the type alone: its message is the line below it."""
    d = diagnose_lines([TRACEBACK, '  File "/x/multiprocessing/spawn.py", line 1, in _check_not_importing_main',
                        "RuntimeError: ", "        An attempt has been made to start a new process before the",
                        "        current process has finished its bootstrapping phase."])
    assert ("unknown", "RuntimeError: An attempt has been made to start a new process before the") == (d.cls, d.root_cause)


def test_a_worker_that_failed_while_serving_is_the_cause_of_the_death_its_peers_time_out_on() -> None:
    """A worker rank's exception (vLLM's `WorkerProc hit an exception.`) while serving stops its collectives; the other
    ranks' NCCL watchdog fires minutes later, torch dumps its flight recorder, and a worker dies: the first is the cause."""
    w = "(Worker_TP0 pid=2) ERROR 09-07 20:59:45 [multiproc_executor.py:990] "
    d = diagnose_lines([
        "(APIServer pid=1) INFO:     10.0.0.1:4000 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
        w + "WorkerProc hit an exception.", w + TRACEBACK,
        w + '  File "/x/triton/compiler/compiler.py", line 1, in _init_handles',
        w + "RuntimeError: Triton Error [CUDA]: operation not permitted",
        "(APIServer pid=1) INFO:     10.0.0.1:4001 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
        "[rank0]:[E907 21:09:45.072414592 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0 Rank 0] Received a dump signal "
        "due to a collective timeout from  rank 3 and we will try our best to dump the debug info.",
        "(EngineCore pid=3) ERROR 09-07 21:18:35 [multiproc_executor.py:284] Worker proc VllmWorker-0 died unexpectedly, "
        "shutting down executor."])
    assert ("engine_dead", "RuntimeError: Triton Error [CUDA]: operation not permitted") == (d.cls, d.root_cause)


def test_the_nccl_watchdogs_timeout_is_the_death_not_the_dump_that_follows() -> None:
    d = diagnose_lines([
        "[rank2]:[E907 21:09:45.119718257 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=15580, OpType=_ALLGATHER_BASE, NumelIn=8093696, NumelOut=16187392, "
        "Timeout(ms)=600000) ran for 600045 milliseconds before timing out.",
        "[rank2]:[E907 21:09:45.005134360 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0 Rank 2] Received a dump signal "
        "due to a collective timeout from this local rank and we will try our best to dump the debug info.",
        "ERROR 09-07 21:18:47 [multiproc_executor.py:284] Worker proc VllmWorker-2 died unexpectedly, shutting down "
        "executor."])
    assert "engine_dead" == d.cls
    assert "Watchdog caught collective operation timeout" in (d.root_cause or "")


def test_a_progress_bar_redrawn_at_zero_after_an_exception_does_not_acquit_it() -> None:
    """tqdm redraws its bar as the exception closes it: a bar at 0% after the final exception shows no work done, and
    the log still ends in that exception."""
    w = "(EngineCore pid=4) "
    d = diagnose_lines([w + "INFO 07-10 12:16:24 [core.py:114] Initializing a V1 LLM engine (v0.24.0) with confi",
                        w + TRACEBACK, w + '  File "/x/vllm/model_executor/models/qwen2.py", line 456, in load_weights',
                        w + "KeyError: 'layers.0.mlp.gate_up_proj.weight'",
                        "Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]"])
    assert ("config", "unsupported_model", "0.24.0") == (d.cls, d.reason, d.numbers.get("vllm_version"))


def test_an_offline_engine_is_started_once_it_is_initialized() -> None:
    """`LLM(...)` in a script has no API server: the engine's init ends the start-up, and the script's own error
    after it (a method it called) is no start-up failure. With an API server, the same lines still fail it."""
    init = "(EngineCore pid=4905) INFO 07-20 11:25:03 [core.py:337] init engine (profile, create kv cache, warmup model) " \
           "took 13.22 s (compilation: 5.01 s)"
    after = ["Traceback (most recent call last):", '  File "/x/vllm/v1/engine/core_client.py", line 881, in call_utility',
             "Exception: Call to profile method failed: Profiling is not enabled. Please set --profiler-config"]
    engine = "(EngineCore pid=4905) INFO 07-20 11:24:50 [core.py:114] Initializing a V1 LLM engine (v0.25.1) with config"
    assert "ok" == diagnose_lines([engine, init, *after]).cls
    banner = "(APIServer pid=1) INFO 07-20 11:24:40 [api_server.py:1] vLLM API server version 0.25.1"
    assert "ok" != diagnose_lines([banner, engine, init, *after]).cls
    logo = "(APIServer pid=1) INFO 07-20 11:24:40 [utils.py:1] █▄   ▄█   version 0.25.1"  # 0.16+ prints a logo
    assert "ok" != diagnose_lines([logo, engine, init, *after]).cls
    assert "ok" != diagnose_lines([engine, init, *[f"(APIServer pid=1) {line}" for line in after]]).cls


def test_the_engines_config_record_cut_by_a_terminal_is_read_whole() -> None:
    """A terminal 108 columns wide cuts vLLM's config record mid-word, `max` on one line and `_seq_len=…` on a later
    one: the record is joined back as it was cut, and the context length read."""
    record = ("(EngineCore pid=4) INFO 07-10 12:16:24 [core.py:114] Initializing a V1 LLM engine (v0.24.0) with config: "
              "model='m', tokenizer='m', skip_tokenizer_init=False, tokenizer_mode=auto, trust_remote_code=False, "
              "dtype=torch.bfloat16, max_seq_len=40960, download_dir=None, load_format=auto, tensor_parallel_size=1")
    lines = [record[:108], *(record[at:at + 108] for at in range(108, len(record), 108))]
    d = diagnose_lines([*lines, "(EngineCore pid=4) INFO 07-10 12:16:30 [gpu_model_runner.py:1] Starting to load model"])
    assert {"vllm_version": "0.24.0", "max_model_len": 40960} == {k: d.numbers.get(k) for k in ("vllm_version", "max_model_len")}
