"""Whole-log readings a person makes of a paste: a failure wrapped onto the next lines is read whole, and a
pipeline of several engines is judged per engine (one stage's progress acquits nothing another stage said)."""

from __future__ import annotations

from launcher.vllm.diagnose import STALLED_WAITS, Diagnoser, diagnose_lines

KV = ("ValueError: To serve at least one request with the model's max seq len (196608), 23.25 GiB KV cache is needed, "
      "which is larger than the available KV cache memory (22.5 GiB). Based on the available memory, the estimated "
      "maximum model length is 190272. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
      "initializing the engine.")
WRAPPED = ["ValueError: To serve at least one request with the model's max seq len (196608),",
           "23.25 GiB KV cache is needed, which is larger than the available KV cache memory (22.5 GiB).",
           "Based on the available memory, the estimated maximum model length is 190272."]


def test_the_whole_message_and_its_wrapped_form_say_the_same() -> None:
    whole, wrapped = diagnose_lines([KV]), diagnose_lines(WRAPPED)
    assert (wrapped.cls, wrapped.numbers.get("needed_gib"), wrapped.numbers.get("estimated_max_model_len")) == \
        (whole.cls, 23.25, 190272) == ("kv_insufficient", 23.25, 190272)
    assert wrapped.root_cause == WRAPPED[0], "the root cause stays the line vLLM's message begins on"


def test_a_quoted_paste_is_joined_without_its_quote_marks() -> None:
    quoted = diagnose_lines([f"> {line}" for line in WRAPPED])
    assert quoted.numbers.get("needed_gib") == 23.25


def test_a_line_of_its_own_is_never_a_continuation() -> None:
    """A prefixed record, or a line too far below, is not part of the failure's message: it ends the joining."""
    for after in (["(EngineCore_DP0 pid=9) INFO 12-01 10:00:00 [core.py:1] Waiting for the engine"], ["a", "b", "c"]):
        diagnoser = Diagnoser()
        for line in [WRAPPED[0], *after, WRAPPED[1]]:
            diagnoser.feed(line)
        assert diagnoser.wrapped.event is None, after


FREE = ("(Worker pid=21) [Stage-0] ERROR 03-12 08:22:28 [multiproc_executor.py:800] ValueError: Free memory on device "
        "cuda:0 (111.99/139.8 GiB) on startup is less than desired GPU memory utilization (0.95, 132.81 GiB). Decrease "
        "GPU memory utilization or reduce GPU memory used by other processes.")


def _loaded(stage: str) -> str:
    return f"{stage}INFO 03-12 08:22:29 [gpu_model_runner.py:133] Model loading took 26.4738 GiB and 13.18 seconds"


def test_another_stages_progress_acquits_nothing() -> None:
    assert diagnose_lines([FREE, _loaded("[Stage-1] ")]).cls == "startup_memory"


def test_the_same_stages_progress_acquits_its_failure() -> None:
    assert diagnose_lines([FREE, _loaded("(Worker pid=21) [Stage-0] ")]).cls == "ok"


E = "(EngineCore_DP0 pid=5) "
LOADING = f"{E}INFO 12-01 10:00:01 [gpu_model_runner.py:2602] Starting to load model /m..."
OOM = (f"{E}ERROR 12-01 10:00:09 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. "
       "GPU 0 has a total capacity of 23.55 GiB of which 512.00 MiB is free.")
BAR = "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:04<00:04,  4.10s/it]"
CUT = ["(APIServer pid=4) Traceback (most recent call last):",
       '(APIServer pid=4)   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core_client.py", line 95, in '
       "make_async_mp_client"]


def test_a_log_that_ends_inside_a_traceback_failed() -> None:
    """An out-of-memory, a progress bar that seemed to acquit it, then a traceback the paste cuts off: the
    start-up failed, and the out-of-memory is its cause; with no failure line before, the cause is unknown."""
    d = diagnose_lines([LOADING, OOM, BAR, *CUT])
    assert (d.cls, d.evidence, d.root_cause) == ("startup_memory", "log_end_in_traceback", OOM.split("] ", 1)[1])
    assert diagnose_lines([LOADING, BAR, *CUT]).cls == "unknown"


def test_a_traceback_after_the_server_came_up_is_a_requests_not_the_start_ups() -> None:
    serving = "(APIServer pid=4) INFO 12-01 10:01:00 [api_server.py:1900] Starting vLLM API server 0 on http://0.0.0.0:8000"
    assert diagnose_lines([LOADING, BAR, serving, *CUT]).cls == "ok"


def test_a_message_cut_at_the_terminals_width_is_read_whole() -> None:
    """Cut mid-number, no space added: an exception no signature knew is, whole, the failure it says."""
    cut = ["(EngineCore pid=4) ValueError: Free memory on device cuda:0 (13.33/15.47 GiB",
           ") on startup is less than desired GPU memory utilization (0.9, 13.92 GiB). Decre",
           "ase GPU memory utilization or reduce GPU memory used by other processes."]
    d = diagnose_lines(cut)
    assert (d.cls, d.reason, d.numbers.get("free_gib"), d.numbers.get("requested_gib")) == \
        ("startup_memory", "free_below_utilization", 13.33, 13.92)


def test_pydantics_value_error_is_the_refusal_vllms_config_raised() -> None:
    d = diagnose_lines(["(APIServer pid=74)   Value error, Unknown attention backend: 'B12X'. Valid options are: "
                        "FLASH_ATTN, TRITON_ATTN [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]"])
    assert (d.cls, d.reason) == ("config", "bad_argument")
    assert d.root_cause == "Value error, Unknown attention backend: 'B12X'. Valid options are: FLASH_ATTN, TRITON_ATTN"


def test_the_exception_vllm_raised_is_the_root_cause_over_the_figure_that_accused() -> None:
    lines = ["(EngineCore pid=1) INFO 09-11 21:21:56 [gpu_worker.py:560] Available KV cache memory: -0.61 GiB",
             "(EngineCore pid=1) ValueError: No available memory for the cache blocks. Try increasing "
             "`gpu_memory_utilization` when initializing the engine."]
    d = diagnose_lines(lines)
    assert d.cls == "no_cache_blocks" and d.root_cause is not None and d.root_cause.startswith("ValueError: No available")


def test_a_generic_death_is_of_the_error_printed_just_before_it() -> None:
    died = ("(EngineCore pid=3) ERROR 09-10 09:37:41 [multiproc_executor.py:314] Worker proc VllmWorker-0 died "
            "unexpectedly (exit code: None), shutting down executor.")
    cause = "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'invalid argument'"
    assert diagnose_lines([LOADING, cause, died]).root_cause == cause
    assert diagnose_lines([LOADING, cause, *["x"] * 6, died]).root_cause == died.split("] ", 1)[1], "too far above"


def test_a_line_that_points_at_the_cause_is_not_the_cause() -> None:
    """'EngineCore encountered a fatal error.' heads a traceback: its final exception is the root cause, and the
    API server's 'See stack trace (above) for the root cause' never replaces it."""
    engine = "(EngineCore_DP0 pid=243) ERROR 06-27 02:23:02 [core.py:1008] "
    lines = [f"{engine}EngineCore encountered a fatal error.", f"{engine}Traceback (most recent call last):",
             f"{engine}RuntimeError: The following operation failed in the TorchScript interpreter.",
             f"{engine}RuntimeError: Failed to execute the model status=1006 message=Execution Out-Of-Bounds Memory Access",
             "(APIServer pid=41) ERROR 06-27 02:23:02 [async_llm.py:710] vllm.v1.engine.exceptions.EngineDeadError: "
             "EngineCore encountered an issue. See stack trace (above) for the root cause."]
    d = diagnose_lines(lines)
    assert d.cls == "engine_dead"
    assert d.root_cause == "RuntimeError: Failed to execute the model status=1006 message=Execution Out-Of-Bounds Memory Access"


def test_an_exception_of_a_packages_errors_module_is_an_exception_whatever_its_name() -> None:
    """Triton's `OutOfResources` and torch._dynamo's `Unsupported` are exception classes though their names do not
    say so: the module they come from (`….errors.`, `….exc.`) does. The death a fatal-error line heads is named by it."""
    engine = "(EngineCore pid=147) ERROR 08-10 18:12:59 [core.py:1332] "
    lines = [f"{engine}Dumping input data for V1 LLM engine (v0.26.0) with config: model='m', dtype=torch.bfloat16, "
             "max_seq_len=65536, download_dir=None", f"{engine}EngineCore encountered a fatal error.",
             f"{engine}Traceback (most recent call last):", f'{engine}  File "/x/triton/compiler/compiler.py", line 448',
             f"{engine}triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 102400, "
             "Hardware limit: 101376."]
    d = diagnose_lines(["(APIServer pid=1) INFO:     Application startup complete.", *lines])
    assert d.cls == "engine_dead"
    assert d.root_cause is not None and d.root_cause.startswith("triton.runtime.errors.OutOfResources: out of resource")
    assert d.numbers["max_model_len"] == 65536, "the dump names the config the engine ran with"
    assert diagnose_lines(["torch._dynamo.exc.Unsupported: generator"]).root_cause == "torch._dynamo.exc.Unsupported: generator"
    assert diagnose_lines(["OutOfResources: out of resource"]).cls == "ok", "a bare name of no exceptions module"


def test_a_grep_over_log_files_keeps_each_lines_process() -> None:
    """`grep -r` prefixes each line with its file (`node0.out:`, `run.log:12:`): vLLM's prefix is found behind it."""
    line = ("test_glm5.2_2152434_node0.out:(Worker pid=2437300) ERROR 08-31 06:22:53 [multiproc_executor.py:944] "
            "torch.distributed.DistStoreError: wait timeout after 1800000ms, keys: /default_pg/0//2//cpu//0/2")
    d = diagnose_lines([line])
    assert d.cls == "distributed_init" and d.root_cause is not None and d.root_cause.startswith("torch.distributed")


_WAIT = ("(EngineCore pid=9) INFO 10-09 11:{:02d}:50 [shm_broadcast.py:812] No available shared memory broadcast block "
         "found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming "
         "work (e.g. compilation, weight/kv cache quantization).")
_CAPTURED = "(EngineCore pid=9) INFO 10-09 11:00:10 [gpu_model_runner.py:4880] Graph capturing finished in 12 secs"


def test_a_start_up_whose_last_word_is_waiting_again_and_again_is_stalled() -> None:
    """A TP rank hung in a collective: vLLM repeats that a process waits, and nothing moves between."""
    d = diagnose_lines([_CAPTURED, *(_WAIT.format(m) for m in range(STALLED_WAITS))])
    assert (d.cls, d.evidence) == ("unknown", "stalled")
    assert d.root_cause is not None and "No available shared memory broadcast block" in d.root_cause


def test_a_few_waits_or_progress_between_them_is_no_stall() -> None:
    # A long compile or capture prints the line a few times; progress between the waits starts the count again.
    assert diagnose_lines([_CAPTURED, *(_WAIT.format(m) for m in range(STALLED_WAITS - 1))]).cls == "ok"
    interleaved = [line for m in range(2 * STALLED_WAITS) for line in (_WAIT.format(m % 60), _CAPTURED)]
    assert diagnose_lines(interleaved).cls == "ok"
    # Once the server serves, an idle engine's waits say nothing of a start-up.
    served = [_CAPTURED, "(APIServer pid=8) INFO:     Application startup complete.",
              *(_WAIT.format(m) for m in range(2 * STALLED_WAITS))]
    assert diagnose_lines(served).cls == "ok"


def test_a_worker_death_after_vllm_said_the_start_up_failed_is_no_root_cause() -> None:
    """The executor stops its workers after the engine failed to start: "Worker proc … died unexpectedly" then says
    only that; the exception the engine raised is the root cause."""
    d = diagnose_lines([
        "(EngineCore pid=2) ERROR 07-16 18:21:23 [core.py:1330] torch._inductor.exc.InductorError: RuntimeError: "
        "Failed to run autotuning code block: [Errno 122] Disk quota exceeded: '/home/u/.cache/vllm/x'",
        "(EngineCore pid=2) ERROR 07-16 18:21:23 [core.py:1330] EngineCore failed to start.",
        "(EngineCore pid=2) ERROR 07-16 18:21:23 [multiproc_executor.py:314] Worker proc VllmWorker-1 died "
        "unexpectedly (exit code: None), shutting down executor.",
    ])
    assert d.cls == "unknown" and d.root_cause is not None and "Disk quota exceeded" in d.root_cause


def test_the_exception_chained_after_torchs_oom_is_the_root_cause() -> None:
    """torch's OOM, "The above exception was the direct cause of the following exception:", then vLLM's own
    RuntimeError with the phase and the fix: vLLM's words are the root cause, and its reason."""
    prefix = "(VllmWorker rank=2 pid=5) ERROR 04-12 21:13:47 [multiproc_executor.py:383] "
    d = diagnose_lines([prefix + line for line in (
        "Traceback (most recent call last):",
        '  File "/venv/vllm/v1/worker/gpu_model_runner.py", line 1, in _dummy_sampler_run',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.74 GiB. GPU 2 has a total capacity of "
        "22.20 GiB of which 1.64 GiB is free.",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/venv/vllm/v1/worker/gpu_model_runner.py", line 2, in _dummy_sampler_run',
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try "
        "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.")])
    assert (d.cls, d.reason) == ("startup_memory", "sampler_warmup")
    assert d.root_cause is not None and d.root_cause.startswith("RuntimeError: CUDA out of memory occurred when warming")
    assert d.numbers["total_gib"] == 22.2  # torch's figure stays with vLLM's words


def test_a_cause_whose_message_runs_over_several_lines_is_still_only_the_cause() -> None:
    """huggingface_hub's GatedRepoError prints its message on four lines before "The above exception was the direct
    cause…": the OSError transformers raised from it ends the chain and is the root cause. A frame between the two
    would have made the first one's traceback a finished one."""
    prefix = "(APIServer pid=29052) "
    d = diagnose_lines([prefix + line for line in (
        "Traceback (most recent call last):",
        '  File "/venv/huggingface_hub/utils/_http.py", line 1, in hf_raise_for_status',
        "huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-6a0744fc)",
        "",
        "Cannot access gated repo for url https://hf-mirror.com/facebook/cwm/resolve/main/config.json.",
        "Access to model facebook/cwm is restricted and you are not in the authorized list.",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/venv/transformers/utils/hub.py", line 2, in cached_files',
        "OSError: You are trying to access a gated repo.")])
    assert (d.cls, d.reason, d.root_cause) == ("config", "gated_repo", "OSError: You are trying to access a gated repo.")


def test_a_later_exception_of_the_same_class_that_names_the_reason_is_the_root_cause() -> None:
    """An excerpt that kept torch's OOM and vLLM's RuntimeError on adjacent lines, the chain between them cut: vLLM's
    words say in which phase (the reason torch's line lacks), so they are the root cause."""
    prefix = "(EngineCore_DP0 pid=44265) ERROR 07-26 10:24:28 [core.py:1100] "
    d = diagnose_lines([prefix + line for line in (
        "Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 126.00 MiB. GPU 0 has a total capacity of "
        "23.54 GiB of which 139.75 MiB is free.",
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please try "
        "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.")])
    assert (d.cls, d.reason) == ("startup_memory", "sampler_warmup")
    assert d.root_cause is not None and d.root_cause.startswith("RuntimeError: CUDA out of memory occurred")
    assert d.numbers["total_gib"] == 23.54


def test_a_clients_request_line_opens_no_traceback_and_names_no_raise_site() -> None:
    """A client controls the prompt vLLM's request log prints: traceback words in it are the client's. They open no
    traceback and name no module that raised."""
    d = Diagnoser()
    d.feed("(APIServer pid=1) INFO 11-29 15:41:17 [api_server.py:1] vLLM API server version 0.32.0")
    d.feed("(APIServer pid=1) INFO 11-29 15:41:18 [logger.py:41] Received request chatcmpl-1: prompt: 'Traceback "
           "(most recent call last):  File \"/venv/vllm/config/model.py\", line 1, in __post_init__', params: x")
    assert d.tracebacks.open_since() == 0 and d.tracebacks.module("APIServer") is None


_SERVED = ["INFO 03-30 02:10:01 [api_server.py:1081] Starting vLLM API server on http://0.0.0.0:8000",
           "INFO:     Application startup complete."]


def test_a_serving_death_that_names_no_cause_takes_the_exception_just_above_it() -> None:
    """V0's "MQLLMEngine is already dead" and the engine client's "Got fatal signal … See stack trace above" say that
    the engine is gone, not of what: the exception printed just before them is the root cause, a start-up class's
    exception included (a module a worker lacked)."""
    assertion = diagnose_lines([*_SERVED,
                                "ERROR 03-30 02:15:01 [engine.py:160] Traceback (most recent call last):",
                                'ERROR 03-30 02:15:01 [engine.py:160]   File "/x/xgrammar_decoding.py", line 355, in __call__',
                                "ERROR 03-30 02:15:01 [engine.py:160] AssertionError",
                                "CRITICAL 03-30 02:15:01 [launcher.py:116] MQLLMEngine is already dead, terminating "
                                "server process"])
    assert (assertion.cls, assertion.root_cause) == ("engine_dead", "AssertionError")
    module = diagnose_lines([*_SERVED,
                             "ERROR 04-08 04:00:01 [core.py:390] EngineCore hit an exception: Traceback (most recent "
                             "call last):",
                             "ERROR 04-08 04:00:01 [core.py:390] ModuleNotFoundError: No module named 'pyarrow'",
                             "CRITICAL 04-08 04:00:01 [core_client.py:361] Got fatal signal from worker processes, "
                             "shutting down. See stack trace above for root cause issue."])
    assert (module.cls, module.root_cause) == ("engine_dead", "ModuleNotFoundError: No module named 'pyarrow'")
    # Far above it, an exception is some request's, not the death's: the death line stands.
    far = diagnose_lines([*_SERVED, "ERROR 04-08 03:00:01 [serving.py:1] ValueError: bad request",
                          *["INFO 04-08 03:00:02 [metrics.py:1] Avg prompt throughput: 1.0 tokens/s"] * 10,
                          "CRITICAL 04-08 04:00:01 [core_client.py:361] Got fatal signal from worker processes, "
                          "shutting down. See stack trace above for root cause issue."])
    assert far.cls == "engine_dead" and far.root_cause is not None and far.root_cause.startswith("Got fatal signal")


def test_a_death_line_that_heads_its_traceback_is_named_by_the_exception_below_it() -> None:
    """"EngineCore encountered a fatal error." comes before its traceback: the exception that ends it names the
    death, even an exception a start-up class knows (a missing module), never the error printed above it."""
    d = diagnose_lines([*_SERVED, "Error: Failed to initialize the TMA descriptor 1",
                        "ERROR 05-09 03:01:59 [core.py:402] EngineCore encountered a fatal error.",
                        "ERROR 05-09 03:01:59 [core.py:402] Traceback (most recent call last):",
                        "ERROR 05-09 03:01:59 [core.py:402] ModuleNotFoundError: No module named 'cupy'"])
    assert (d.cls, d.root_cause) == ("engine_dead", "ModuleNotFoundError: No module named 'cupy'")


def test_v0s_background_task_failure_is_named_by_the_exception_that_ends_its_traceback() -> None:
    """V0's async engine logs "Engine background task failed" with the exception's traceback under it (exc_info):
    once it served, its engine is dead of that exception."""
    d = diagnose_lines([*_SERVED, "ERROR 06-25 14:27:21 async_llm_engine.py:52] Engine background task failed",
                        "ERROR 06-25 14:27:21 async_llm_engine.py:52] Traceback (most recent call last):",
                        'ERROR 06-25 14:27:21 async_llm_engine.py:52]   File "/x/sampling_metadata.py", line 208, in f',
                        "ERROR 06-25 14:27:21 async_llm_engine.py:52] AttributeError: 'NoneType' object has no "
                        "attribute 'seed'"])
    assert (d.cls, d.root_cause) == ("engine_dead", "AttributeError: 'NoneType' object has no attribute 'seed'")


_RANK = "(RayWorkerWrapper pid=336, ip=10.9.4.1) "


def test_a_native_crash_inside_nccls_communicator_set_up_is_distributed_init() -> None:
    """glibc's heap check names the crash (its first words, before the SIGABRT); faulthandler's stack, most recent
    call first, puts it in ncclCommInitRank: the group never formed. Elsewhere the same crash stays unknown."""
    crash = [f"{_RANK}free(): double free detected in tcache 2", f"{_RANK}*** SIGABRT received at time=1743139179 ***",
             f"{_RANK}Fatal Python error: Aborted", f"{_RANK}Stack (most recent call first):"]
    nccl = diagnose_lines([*crash, f'{_RANK}  File "/v/distributed/device_communicators/pynccl_wrapper.py", line 277 '
                                   "in ncclCommInitRank"])
    assert (nccl.cls, nccl.root_cause) == ("distributed_init", "free(): double free detected in tcache 2")
    other = diagnose_lines([*crash, f'{_RANK}  File "/v/model_executor/layers/linear.py", line 9 in forward'])
    assert (other.cls, other.root_cause) == ("unknown", "free(): double free detected in tcache 2")
    # Another rank's frame says nothing of this one's crash.
    elsewhere = diagnose_lines([*crash, '(RayWorkerWrapper pid=337, ip=10.9.4.1)   File "/v/pynccl_wrapper.py", '
                                        "line 277 in ncclCommInitRank"])
    assert elsewhere.cls == "unknown"


def test_an_offline_engine_that_fails_after_it_said_it_was_ready_is_an_engine_death() -> None:
    """`LLM(...)` in a script prints no API server: "init engine … took N seconds" is its start-up's end, and the
    engine core's own failure after it ("EngineCore hit an exception") is the engine dying on the script's requests.
    Before that line, the same failure is a start-up's."""
    ready = "INFO 04-15 08:11:37 [core.py:163] init engine (profile, create kv cache, warmup model) took 47.57 seconds"
    failed = ["ERROR 04-15 08:11:37 [core.py:387] EngineCore hit an exception: Traceback (most recent call last):",
              'ERROR 04-15 08:11:37 [core.py:387]   File "/v/vllm/v1/worker/gpu_model_runner.py", line 9, in execute',
              "ERROR 04-15 08:11:37 [core.py:387] RuntimeError: The expanded size of the tensor (58) must match",
              "CRITICAL 04-15 08:11:37 [core_client.py:359] Got fatal signal from worker processes, shutting down. "
              "See stack trace above for root cause issue."]
    after = diagnose_lines([ready, *failed])
    assert (after.cls, after.root_cause) == ("engine_dead", "RuntimeError: The expanded size of the tensor (58) must match")
    assert diagnose_lines(failed).cls == "unknown"


def test_a_failed_compiler_is_named_by_the_diagnostic_it_printed() -> None:
    """Inductor's CalledProcessError and Triton's "PassManager::run failed" say only that a compiler failed; gcc's
    `fatal error:` or the C++ assertion it printed above (however far: the traceback comes between) says why.
    An exception that says why itself keeps its own words."""
    gcc = "/usr/include/stdlib.h:31:10: fatal error: stddef.h: No such file or directory"
    raised = ("torch._inductor.exc.InductorError: CalledProcessError: Command '['/usr/bin/gcc', '/tmp/t/main.c']' "
              "returned non-zero exit status 1.")
    frames = ["Traceback (most recent call last):", '  File "/v/torch/_inductor/compile_fx.py", line 9, in compile']
    assert diagnose_lines(["INFO 06-14 21:52:00 [core.py:1] Initializing a V1 LLM engine (v0.9.1) with config: x",
                           gcc, *frames * 20, raised]).root_cause == gcc
    triton = ("python3: /project/lib/Dialect/TritonGPU/Transforms/AccelerateMatmul.cpp:42: int getMMAVersionSafe(int, "
              "DotOp): Assertion `false && \"computeCapability not supported\"' failed.")
    assert diagnose_lines([triton, *frames, "RuntimeError: PassManager::run failed"]).root_cause == triton
    assert diagnose_lines([gcc, *frames, "RuntimeError: CUDA driver too old"]).root_cause == "RuntimeError: CUDA driver too old"


_CORE = "(EngineCore_DP0 pid=5) "


def test_a_start_up_failure_is_named_by_the_exception_ending_the_traceback_its_failure_line_heads() -> None:
    """"EngineCore failed to start." heads a traceback whose final exception, generic too, says more: a worker failed
    in its initialization. A worker's death while starting says only that it died: vLLM's word that the start-up
    failed, and its exception, are judged instead (here a compiler's first error)."""
    d = diagnose_lines([f"{_CORE}ERROR 03-23 22:46:30 [core.py:1108] EngineCore failed to start.",
                        f"{_CORE}ERROR 03-23 22:46:30 [core.py:1108] Traceback (most recent call last):",
                        f"{_CORE}ERROR 03-23 22:46:30 [core.py:1108] Exception: WorkerProc initialization failed due to "
                        "an exception in a background process. See stack trace for root cause."])
    assert d.root_cause is not None and d.root_cause.startswith("Exception: WorkerProc initialization failed")
    compiled = diagnose_lines([
        f"{_CORE}ERROR 01-26 10:28:26 [multiproc_executor.py:231] Worker proc VllmWorker-0 died unexpectedly, "
        "shutting down executor.",
        f"{_CORE}Traceback (most recent call last):",
        f"{_CORE}RuntimeError: Worker failed with error 'NPUModelRunner init failed, error is Failed to compile "
        "/tmp/t/launcher.cxx, error: In file included from <built-in>:1:",
        f"{_CORE}/x/AclOpCompileInterface.h:146:55: error: use of undeclared identifier 'aclOpExecutor'",
        f"{_CORE}/x/AclOpCompileInterface.h:146:70: error: use of undeclared identifier 'executor'",
        "(APIServer pid=4) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"])
    assert (compiled.cls, compiled.root_cause) == (
        "unknown", "/x/AclOpCompileInterface.h:146:55: error: use of undeclared identifier 'aclOpExecutor'")


def test_a_package_whose_companion_is_another_release_names_the_package_to_install() -> None:
    d = diagnose_lines([f"{_CORE}Traceback (most recent call last):",
                        f'{_CORE}  File "/v/site-packages/flashinfer/jit/env.py", line 76, in _get_cubin_dir',
                        f"{_CORE}RuntimeError: flashinfer-cubin version (0.6.8.post1) does not match flashinfer version "
                        "(0.5.3). Please install the same version of both packages."])
    assert (d.cls, d.reason, d.numbers.get("package")) == ("config", "missing_dependency", "flashinfer-cubin")


def test_a_store_that_timed_out_on_its_clients_is_named_by_the_rank_that_died_first() -> None:
    """torch's store waits for every rank; a rank that raised first never comes: its exception, judged by its raise
    site, is the failure, not the network (distributed_init). With no rank's exception before it, the timeout
    stands."""
    timeout = "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/8 clients joined."
    worker = ("(VllmWorkerProcess pid=305) ERROR 01-19 03:55:24 multiproc_worker_utils.py:233] RuntimeError: Cannot "
              "re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn' "
              "start method")
    d = diagnose_lines([worker, "(VllmWorkerProcess pid=305) ERROR 01-19 03:55:24 multiproc_worker_utils.py:233] ",
                        "INFO 01-19 04:05:25 multiproc_worker_utils.py:124] Killing local vLLM worker processes",
                        "Traceback (most recent call last):", timeout])
    assert (d.cls, d.root_cause) == ("unknown", worker.split("] ", 1)[1])
    assert diagnose_lines(["Traceback (most recent call last):", timeout]).cls == "distributed_init"


def test_a_devices_own_initialization_failure_is_the_root_cause_and_a_new_traceback_ends_its_message() -> None:
    # vLLM's "EngineCore failed to start." heads the engine's traceback; the exception ending it is the cause, though
    # its words ("CUDA driver initialization failed") sound like vLLM's pointer. The script's own traceback follows
    # the exception's second print: a traceback's first lines continue no message.
    engine = "(EngineCore_DP0 pid=7) ERROR 03-07 10:37:53 [core.py:1006]"
    cause = "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu."
    diagnosis = diagnose_lines([
        f"{engine} EngineCore failed to start.", f"{engine} Traceback (most recent call last):",
        f'{engine}   File "/x/vllm/platforms/cuda.py", line 126, in set_device', f"{engine} {cause}",
        f"(EngineCore_DP0 pid=7) {cause}", "Traceback (most recent call last):", '  File "<string>", line 6, in <module>',
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"])
    assert (diagnosis.cls, diagnosis.root_cause) == ("unknown", cause)


def test_an_initializations_wrapper_quoting_the_exception_before_it_is_not_the_cause() -> None:
    inner = "RuntimeError: StageEngineCoreProc died during READY (exit code 1)"
    diagnosis = diagnose_lines([inner, "Traceback (most recent call last):",
                                "RuntimeError: Orchestrator initialization failed: StageEngineCoreProc died during READY"
                                " (exit code 1)"])
    assert diagnosis.root_cause == inner


def test_a_scripts_engine_dying_as_its_interpreter_exits_is_its_teardown() -> None:
    """`LLM(...)` in a script served its prompts; torch warns as the interpreter exits, then the client sees the engine
    core gone. Nothing failed. The same death after an exception, or under an API server, stays a death."""
    ready = "INFO 03-07 10:50:04 [core.py:278] init engine (profile, create kv cache, warmup model) took 448.35 seconds"
    served = "Processed prompts: 100%|██████████| 1/1 [00:05<00:00,  5.81s/it, est. speed input: 0.86 toks/s]"
    exiting = ("[rank0]:[W307 10:50:12.474267959 ProcessGroupNCCL.cpp:1524] Warning: WARNING: destroy_process_group() "
               "was not called before program exit, which can leak resources.")
    died = "ERROR 03-07 10:50:12 [core_client.py:616] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client."
    teardown = diagnose_lines([ready, served, exiting, died])
    assert (teardown.cls, teardown.state) == ("ok", "stopped")
    raised = ["ERROR 03-07 10:50:11 [core.py:1] EngineCore hit an exception: Traceback (most recent call last):",
              "ERROR 03-07 10:50:11 [core.py:1] RuntimeError: CUDA error: an illegal memory access was encountered"]
    assert diagnose_lines([ready, served, *raised, exiting, died]).cls == "engine_dead"
    server = "(APIServer pid=1) INFO 03-07 10:40:00 [api_server.py:1] vLLM API server version 0.16.0"
    assert diagnose_lines([server, ready, served, exiting, died]).cls == "engine_dead"
