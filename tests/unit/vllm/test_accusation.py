"""A failure line accuses; the log (a traceback, vLLM's engine-start failure line) or the process convicts it,
and progress after it acquits it. Lines are real vLLM output (tests/data/logs)."""

from __future__ import annotations

from launcher.vllm.diagnose import Diagnoser, diagnose_lines
from tests.conftest import DATA

# vLLM 0.16's retried Hub lookup for a model served from a local directory (vLLM's with_retry prints the
# error with ", retrying 1 of 2", waits 2 s, tries again; try_get_safetensors_metadata swallows the last one).
RETRIED = ("(APIServer pid=1) ERROR 01-12 09:14:03 [repo_utils.py:126] Error retrieving safetensors: Repo id must be "
           "in the form 'repo_name' or 'namespace/repo_name': '/data/models/qwen3'. Use `repo_type` argument if "
           "needed., retrying 1 of 2")
LAST_TRY = ("(APIServer pid=1) ERROR 01-12 09:14:05 [repo_utils.py:124] Error retrieving safetensors: Repo id must be "
            "in the form 'repo_name' or 'namespace/repo_name': '/data/models/qwen3'. Use `repo_type` argument if "
            "needed.")
# Hugging Face's answer to a lookup vLLM makes of the Hub, logged at ERROR (config/gated_repo when it is fatal).
GATED = ("(APIServer pid=1) ERROR 01-12 09:14:05 [hub.py:40] 401 Client Error: Unauthorized for url: "
         "https://huggingface.co/api/models/org/name/tree/main")
LOADING = "(EngineCore_DP0 pid=2) INFO 01-12 09:14:09 [gpu_model_runner.py:2602] Starting to load model /data/models/qwen3..."
KV = "(EngineCore_DP0 pid=2) INFO 01-12 09:14:40 [kv_cache_utils.py:1087] GPU KV cache size: 1,048,576 tokens"
READY = "(APIServer pid=1) INFO:     Application startup complete."
OOM_LINE = ("(EngineCore_DP0 pid=2) ERROR 01-12 09:14:20 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. "
            "Tried to allocate 2.00 GiB.")
TRACEBACK = "(EngineCore_DP0 pid=2) ERROR 01-12 09:14:20 [core.py:700] Traceback (most recent call last):"
FRAME = ('(EngineCore_DP0 pid=2) ERROR 01-12 09:14:20 [core.py:700]   File "/vllm/v1/worker/gpu_worker.py", line 230, '
         "in load_model")
START_FAILED = "(EngineCore_DP0 pid=2) ERROR 01-12 09:14:20 [core.py:700] EngineCore failed to start."


def feed(*lines: str) -> Diagnoser:
    diagnoser = Diagnoser()
    for line in lines:
        diagnoser.feed(line)
    return diagnoser


def test_a_line_that_says_vllm_retries_accuses_nothing() -> None:
    diagnoser = feed(RETRIED)
    assert not diagnoser.accused and not diagnoser.decided


def test_an_error_vllm_swallows_accuses_nothing() -> None:
    """try_get_safetensors_metadata returns None after its last try: the start-up goes on."""
    assert not feed(LAST_TRY).accused
    assert feed(LAST_TRY.replace("Error retrieving safetensors: ", "")).accused, "the same words elsewhere accuse"


def test_an_error_line_alone_accuses_and_progress_acquits_it_as_a_warning() -> None:
    diagnoser = feed(GATED)
    assert diagnoser.accused and not diagnoser.decided, "an ERROR line with no traceback is only a candidate"
    assert diagnoser.failure is not None and diagnoser.failure.reason == "gated_repo"
    diagnoser.feed(LOADING)
    assert not diagnoser.accused
    diagnoser.feed(KV)
    diagnoser.feed(READY)
    diagnosis = diagnoser.diagnosis()
    assert diagnosis.cls == "ok"
    assert len(diagnosis.warnings) == 1 and diagnosis.warnings[0].startswith("401 Client Error")
    assert diagnosis.to_dict()["warnings"] == list(diagnosis.warnings)


def test_the_whole_retried_start_up_is_ok() -> None:
    diagnosis = diagnose_lines([RETRIED, LAST_TRY, LOADING, KV, READY])
    assert (diagnosis.cls, diagnosis.numbers["kv_tokens"], diagnosis.warnings) == ("ok", 1048576, ())


def test_a_traceback_that_ends_in_the_failure_convicts_it_at_once() -> None:
    diagnoser = feed(START_FAILED, TRACEBACK, FRAME, OOM_LINE)
    assert diagnoser.decided and diagnoser.confirmed == "traceback"
    diagnoser.feed(LOADING)  # a convicted failure is not undone by a later line
    assert diagnoser.diagnosis().cls == "startup_memory"


def test_an_exception_line_ends_only_its_own_process_traceback() -> None:
    """The header came from another process: this OOM line is not that traceback's end."""
    other = TRACEBACK.replace("EngineCore_DP0 pid=2", "APIServer pid=1")
    diagnoser = feed(other, OOM_LINE)
    assert diagnoser.accused


def test_the_engine_start_failure_line_after_a_candidate_convicts_it() -> None:
    diagnoser = feed(GATED)
    assert diagnoser.accused
    diagnoser.feed("(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
                   "Failed core proc(s): {'EngineCore_DP0': 1}")
    assert diagnoser.decided and diagnoser.confirmed == "engine_start_failed"
    assert diagnoser.diagnosis().reason == "gated_repo", "confirmation decides whether, not what"


def test_a_sibling_ranks_progress_does_not_acquit_a_rank_that_failed() -> None:
    """TP1 has no room for KV while TP0 has: TP0's line says nothing about TP1 (real vLLM-Omni TP2 log)."""
    lines = (DATA / "logs" / "real" / "vX-negative-kv-qwen3omni-tp2-vllmomni262.log").read_text().splitlines()[1:3]
    diagnoser = feed(*lines)
    assert diagnoser.accused and diagnoser.failure is not None
    assert diagnoser.failure.failure == "no_cache_blocks"


def test_the_process_convicts_a_standing_line() -> None:
    diagnoser = feed(GATED)
    diagnoser.convict("exit")
    assert diagnoser.decided and diagnoser.diagnosis().evidence == "exit"
    assert diagnoser.acquit() is None, "a convicted failure cannot be acquitted"


def test_a_log_that_ends_on_a_candidate_keeps_its_class() -> None:
    """Offline the log's end is the process's end: a one-line paste of a failure is that failure."""
    diagnosis = diagnose_lines([GATED])
    assert (diagnosis.cls, diagnosis.reason, diagnosis.evidence) == ("config", "gated_repo", "accused")


def test_a_pasted_error_without_any_start_up_is_never_ok() -> None:
    line = "ERROR 01-12 09:14:03 [engine.py:160] Something vLLM has no signature for went wrong"
    assert diagnose_lines([line]).cls == "unknown"
    assert diagnose_lines([LOADING, line, KV]).cls == "ok", "with start-up evidence after it, the error was survived"


def test_a_failure_after_the_start_up_keeps_its_class() -> None:
    dead = ("(APIServer pid=1) ERROR 01-12 10:00:00 [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: "
            "EngineCore encountered an issue. See stack trace (above) for the root cause.")
    assert diagnose_lines([LOADING, KV, READY, dead]).cls == "engine_dead"
