"""The benchmark's HTTP client against a small local server that streams like vLLM: timing, token
accounting and the one-line errors (401, nothing listening, a model the server does not serve)."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from launcher.bench.client import TOOLS_REFUSED, Server, ServerError
from tests.helpers.openai_server import KEY, Handler
from tests.helpers.ports import free_port


@pytest.fixture
def url() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_a_stream_is_timed_as_vllms_benchmark_times_it(url: str) -> None:
    """TTFT at the first chunk with choices (the role chunk), one ITL per later chunk, tokens from usage."""
    result, answer = Server(url, KEY).chat("tiny", [{"role": "user", "content": "hi"}], max_tokens=3)
    assert result.ok and answer.text == "abc" and answer.calls == ()
    assert (result.input_tokens, result.output_tokens, result.cached_tokens) == (12, 3, 8)
    # The server waits 0.1 s before its first chunk and 0.05 s before each of the next two: the clock must see at
    # least that (a busy machine only adds to it, so the bounds above are hang guards, not timings).
    assert 0.09 <= result.ttft_s < 10
    assert len(result.itl_s) == 3 and 0.09 <= sum(result.itl_s) < 10
    assert result.latency_s == pytest.approx(result.ttft_s + sum(result.itl_s), abs=1e-6)


def test_the_connection_is_kept_for_the_next_turn(url: str) -> None:
    server = Server(url, KEY)
    server.chat("tiny", [{"role": "user", "content": "hi"}], max_tokens=3)
    kept = server._kept.conn
    assert kept is not None
    assert server.chat("tiny", [{"role": "user", "content": "again"}], max_tokens=3)[0].ok
    assert server._kept.conn is kept


def test_the_errors_name_the_cause(url: str) -> None:
    with pytest.raises(ServerError) as wrong_key:
        Server(url, "wrong").served(None)
    assert wrong_key.value.exit_code == 78 and "401" in str(wrong_key.value) and "VLLM_API_KEY" in str(wrong_key.value)
    with pytest.raises(ServerError) as absent:
        Server(url, KEY).served("llama")
    assert absent.value.exit_code == 78 and "it serves tiny" in str(absent.value)
    with pytest.raises(ServerError) as nobody:
        Server(f"http://127.0.0.1:{free_port()}", KEY).served(None)
    assert nobody.value.exit_code == 2 and "no answer" in str(nobody.value)
    with pytest.raises(ServerError):
        Server("ftp://example.org", KEY)
    assert Server(url, KEY).served(None).max_model_len == 2048


def test_counting_uses_the_servers_tokenizer(url: str) -> None:
    server = Server(url, KEY)
    assert server.count_tokens("tiny", text="one two three") == 3
    assert server.count_tokens("tiny", messages=[{"role": "user", "content": "a b"}]) == 2


class Recorder(Handler):
    """Records every POST body; answers a chat with tools 400 as vLLM 0.32 does without auto tool choice when
    the server's `refuse_tools` is set."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers["Content-Length"])
        raw = self.rfile.read(length)
        body = json.loads(raw)
        self.server.bodies.append((self.path, body))  # type: ignore[attr-defined]
        if self.path == "/v1/chat/completions" and getattr(self.server, "refuse_tools", False):
            return self.send(400, {"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and '
                                                        "--tool-call-parser to be set", "type": "BadRequestError",
                                             "param": None, "code": 400}})
        kept, self.rfile = self.rfile, io.BytesIO(raw)  # the base handler reads the body again
        try:
            return super().do_POST()
        finally:
            self.rfile = kept


@pytest.fixture
def recorder() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), Recorder)
    httpd.bodies = []  # type: ignore[attr-defined]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()


def test_tools_go_with_tool_choice_auto_and_into_the_count(recorder: ThreadingHTTPServer) -> None:
    server = Server(f"http://127.0.0.1:{recorder.server_address[1]}", KEY)
    tools = [{"type": "function", "function": {"name": "glob", "description": "d", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "a b"}]
    assert server.count_tokens("tiny", messages=messages, tools=tools) == 2
    assert server.chat("tiny", messages, max_tokens=3, tools=tools)[0].ok
    assert server.chat("tiny", messages, max_tokens=3)[0].ok
    (_, counted), (_, with_tools), (_, without) = recorder.bodies  # type: ignore[attr-defined]
    assert counted["tools"] == tools and counted["add_generation_prompt"] is True
    assert (with_tools["tools"], with_tools["tool_choice"]) == (tools, "auto")
    assert "tools" not in without and "tool_choice" not in without
    recorder.refuse_tools = True  # type: ignore[attr-defined]
    result, answer = server.chat("tiny", messages, max_tokens=3, tools=tools)
    assert (result.ok, result.error, answer.text) == (False, TOOLS_REFUSED, "")
