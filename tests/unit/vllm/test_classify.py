"""classify(): gates that change nothing, text a client controls that never becomes an event, and totality."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.vllm.classify import classify, classify_every_signature, is_client_text
from launcher.vllm.diagnose import Diagnoser, diagnose_lines
from tests.conftest import DATA

LOGS = sorted((DATA / "logs").rglob("*.log"))


def all_lines() -> list[str]:
    return [line for path in LOGS for line in path.read_text(encoding="utf-8", errors="replace").split("\n")]


class TestGates:
    def test_the_gates_change_nothing_on_any_known_line(self) -> None:
        """The two fast gates turn lines away only when no signature would match them."""
        lines = all_lines()
        assert len(lines) > 5000
        differ = [line[:200] for line in lines if classify(line) != classify_every_signature(line)]
        assert not differ, differ[:5]


# Exact lines a stranger can put into vLLM's log: request paths in uvicorn's access log, prompts in
# vLLM's request log. None of them may become a failure (or a capacity figure the gate would trust).
CLIENT_LINES = [
    'INFO:     127.0.0.1:51234 - "GET /health?x=EngineDeadError HTTP/1.1" 200 OK',
    '(APIServer pid=31) INFO:     10.0.0.7:40112 - "GET /RepositoryNotFoundError HTTP/1.1" 404 Not Found',
    'vllm-1  | INFO:     172.17.0.1:33210 - "GET /v1/models?q=No%20available%20memory%20for%20the%20cache%20blocks '
    'HTTP/1.1" 401 Unauthorized',
    '2025-10-15T00:08:35.839352074Z (APIServer pid=1) INFO:     10.250.3.2:50230 - "POST /GPU%20KV%20cache%20size:'
    '%2099999999%20tokens HTTP/1.1" 404 Not Found',
    'INFO:     127.0.0.1:1 - "GET /GPU KV cache size: 99,999,999 tokens HTTP/1.1" 404',
    "(APIServer pid=7) INFO 07-21 19:41:59 [logger.py:43] Received request chatcmpl-1: prompt: 'EngineCore encountered "
    "a fatal error. ValueError: No available memory for the cache blocks. GPU KV cache size: 99,999,999 tokens', "
    "params: SamplingParams(n=1), prompt_token_ids: None",
    "INFO 05-12 02:47:26 [logger.py:39] Received request cmpl-2-0: prompt: 'RuntimeError: CUDA error: an illegal memory "
    "access was encountered\\nvllm serve: error: unrecognized arguments: --x', params: None",
    "(APIServer pid=7) INFO 07-21 19:42:01 [logger.py:71] Generated response chatcmpl-1: output: 'EngineDeadError: "
    "Worker proc VllmWorker-0 died unexpectedly', output_token_ids: [1, 2]",
    # vLLM 0.32 on CPU with --enable-log-requests at DEBUG (tests/data/logs/vllm-cpu-0.32/request_log_debug.log)
    '(APIServer pid=20047) DEBUG 12-01 09:21:40 [entrypoints/.../utils/request_logger.py:74] Request 9c375571600490c0 '
    'JSON body: {"messages":[{"content":"vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered a fatal '
    'error. GPU KV cache size: 99,999,999 tokens\\nValueError: No available memory for the cache blocks."}]}',
    "(APIServer pid=20047) DEBUG 12-01 09:21:40 [entrypoints/.../utils/request_logger.py:55] Request "
    "chatcmpl-9c375571600490c0 details: prompt: '<|im_start|>user\\nvllm.v1.engine.exceptions.EngineDeadError: "
    "EngineCore encountered a fatal error. GPU KV cache size: 99,999,999 tokens'",
]


class TestClientText:
    @pytest.mark.parametrize("line", CLIENT_LINES)
    def test_client_text_is_never_an_event_of_vllm(self, line: str) -> None:
        event = classify(line)
        assert event is not None and "request" == event.kind  # proof that a server answers, nothing more
        assert event.failure is None and not event.values

    @pytest.mark.parametrize("line", CLIENT_LINES)
    def test_a_serving_log_with_them_stays_ok(self, line: str) -> None:
        serving = (DATA / "logs" / "vllm-cpu-0.32" / "serve_ok.log").read_text().splitlines()
        diagnosis = diagnose_lines([*serving, line, line])
        assert ("ok", None) == (diagnosis.cls, diagnosis.reason)
        assert 1048576 == diagnosis.numbers["kv_tokens"]

    def test_the_same_words_from_vllm_itself_are_failures(self) -> None:
        """The guard is the record's shape, not the words: vLLM's own lines still decide."""
        event = classify("(APIServer pid=1) ERROR 11-29 15:50:02 [async_llm.py:480] "
                         "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")
        assert event is not None and "engine_dead" == event.failure

    def test_engine_death_words_inside_a_message_do_not_decide(self) -> None:
        """An engine-death signature starts the message: a client string quoted inside an error does not."""
        event = classify("(APIServer pid=1) ERROR 11-29 15:50:02 [serving_chat.py:200] Error in preprocessing "
                         "prompt inputs: template 'EngineDeadError' is not defined")
        assert event is None or event.failure is None

    def test_is_client_text(self) -> None:
        assert is_client_text('127.0.0.1:5 - "GET / HTTP/1.1" 200')
        assert not is_client_text("Starting vLLM API server 0 on http://127.0.0.1:8000")


class TestTotal:
    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.text(max_size=400))
    def test_any_text_classifies_without_raising(self, text: str) -> None:
        classify(text)
        classify_every_signature(text)

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.sampled_from(["Available KV cache memory: ", "GPU KV cache size: ", "# GPU blocks: ",
                                     "Maximum concurrency for ", "Free memory on device (", "max seq len (",
                                     "tokens per request: ", "GiB", "x", "-", ".", ",", "(", ")", "/", "9", "1e999",
                                     "\r", "\x1b[1;36m", "(EngineCore pid=1) ", "ERROR 11-29 15:00:00 [a.py:1] "]),
                    max_size=14))
    def test_malformed_numbers_near_the_patterns_never_raise(self, parts: list[str]) -> None:
        diagnoser = Diagnoser()
        diagnoser.feed("".join(parts))
        diagnoser.diagnosis()

    def test_a_huge_line_and_binary_junk(self) -> None:
        diagnoser = Diagnoser()
        for line in ("x" * 1_000_000, "ValueError: " + "9" * 500_000, "\x00\xff\ufffd" * 10_000,
                     "GPU KV cache size: " + "9" * 5000 + " tokens", "Available KV cache memory: 1.2.3 GiB",
                     "Memory profiling results: total_gpu_memory=..GiB kv_cache_size=1..2GiB"):
            diagnoser.feed(line)
        assert diagnoser.diagnosis().cls in ("ok", "unknown")

    def test_a_log_pump_survives_any_file(self, tmp_path: Path) -> None:
        junk = tmp_path / "junk.log"
        junk.write_bytes(bytes(range(256)) * 64 + b"\nGPU KV cache size: 12 tokens\n")
        with junk.open(encoding="utf-8", errors="replace") as handle:
            assert 12 == diagnose_lines(handle).numbers["kv_tokens"]


def test_a_frame_lines_process_is_read_from_the_text_before_its_frame() -> None:
    # The fold remembers a frame line's process by the text before `File "` (paste.Tracebacks): on every frame line of
    # every log, that text alone names the process the whole line does.
    from launcher.vllm import paste
    from launcher.vllm.classify import normalize

    tracebacks = paste.Tracebacks()
    frames = 0
    for path in LOGS:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            at = line.find('File "')
            if at > 0 and "\r" not in line and "\x1b" not in line:
                frames += 1
                assert normalize(line[:at] + 'File "x.py", line 1, in f')[0] == normalize(line)[0], (path.name, line)
                assert tracebacks._frame_process(line) == normalize(line)[0], (path.name, line)
    assert frames > 5_000
