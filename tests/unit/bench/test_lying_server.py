"""`bench` against a server that lies: every reply's shape is checked, a stream ends at its deadline however
the server keeps it alive, what one answer may buffer is bounded, impossible values are counted as errors,
`--json` stays JSON, and a user thread that dies fails the run instead of reporting zeros.

The server is the client tests' local vLLM-like server with one lying mode at a time. Its endless modes
stop by themselves after ENDLESS_S, so a client that does not cut them fails the test instead of hanging."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from launcher import cli
from launcher.bench import runner, scrape
from launcher.bench.client import Server, ServerError
from launcher.bench.workload import Settings
from tests.fakes import trickle
from tests.fakes.trickle import Trickle
from tests.helpers.openai_server import KEY, Handler
from tests.helpers.ports import free_port

ENDLESS_S = 20.0
ROLE = {"choices": [{"delta": {"role": "assistant", "content": ""}}]}
TOKEN = {"choices": [{"delta": {"content": "a"}}]}
# the answer /tokenize gives in each lying mode
TOKENIZE = {"tokenize_html": b"<html>Bad Gateway</html>", "tokenize_str": b'{"count": "many"}',
            "tokenize_list": b"[3]", "tokenize_negative": b'{"count": -1}', "tokenize_bool": b'{"count": true}',
            "tokenize_deep": b"[" * 100_000 + b"]" * 100_000}  # deeper than Python's recursion limit
# the chunks a stream sends in each lying mode, before [DONE]
STREAMS: dict[str, list[Any]] = {
    "list_chunk": [ROLE, [1, 2, 3]],
    "delta_str": [ROLE, {"choices": [{"delta": "x"}]}],
    "usage_list": [ROLE, TOKEN, {"choices": [], "usage": [1]}],
    "negative_usage": [ROLE, TOKEN, {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": -229649}}],
    "too_many_tokens": [ROLE, TOKEN, {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5000}}],
    "cached_above_prompt": [ROLE, TOKEN, {"choices": [], "usage": {
        "prompt_tokens": 12, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 13}}}],
}
METRICS = ("vllm:kv_cache_usage_perc{engine=\"0\"} NaN\nvllm:prefix_cache_hits_total{engine=\"0\"} +Inf\n"
           "vllm:prefix_cache_queries_total{engine=\"0\"} 10\nvllm:num_preemptions_total{engine=\"0\"} -Inf\n")
USAGE = {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 1}}


class Liar(Handler):
    @property
    def mode(self) -> str:
        return getattr(self.server, "mode", "")

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/metrics" and self.mode == "nan_metrics":
            data = METRICS.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return None
        if self.path == "/v1/models" and self.mode == "models_int_ids":
            return self.send(200, {"data": [{"id": 7}, {"id": "tiny"}]})
        return super().do_GET()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/tokenize":
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            words = " ".join([body.get("prompt") or "", *(m["content"] for m in body.get("messages", []))]).split()
            data = TOKENIZE.get(self.mode) or json.dumps({"count": len(words)}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return None
        if self.path != "/v1/chat/completions" or self.mode not in (*STREAMS, "endless", "pings", "huge", "after_done"):
            return super().do_POST()
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for data in self.events():
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        return None

    def events(self) -> Iterator[bytes]:
        def event(chunk: object) -> bytes:
            return f"data: {json.dumps(chunk)}\n\n".encode()

        if self.mode in STREAMS:
            yield from map(event, STREAMS[self.mode])
        elif self.mode == "after_done":  # a whole answer, then pings inside the same body for ENDLESS_S
            yield from map(event, [ROLE, TOKEN, USAGE])
            yield b"data: [DONE]\n\n"
            ends = time.monotonic() + ENDLESS_S
            while time.monotonic() < ends:
                time.sleep(0.02)
                yield b": ping\n\n"
        elif self.mode == "huge":  # 10 MiB of content for a 3-token answer, in two chunks, as fast as it goes
            yield event(ROLE)
            big = event({"choices": [{"delta": {"content": "x" * 5 * 2**20}}]})
            for _ in range(2):
                yield big
            yield event(USAGE)
        else:  # endless: a token every 20 ms; pings: only SSE comments; both for ENDLESS_S, then an end
            ends = time.monotonic() + ENDLESS_S
            yield event(ROLE) if self.mode == "endless" else b": ping\n\n"
            while time.monotonic() < ends:
                time.sleep(0.02)
                yield event(TOKEN) if self.mode == "endless" else b": ping\n\n"
            yield event(USAGE)
        yield b"data: [DONE]\n\n"


class LyingServer(ThreadingHTTPServer):
    daemon_threads = True
    mode = ""

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the client hung up on an endless answer: what the tests want


@pytest.fixture
def liar() -> Iterator[LyingServer]:
    httpd = LyingServer(("127.0.0.1", free_port()), Liar)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def url_of(httpd: LyingServer) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


SMALL = Settings(users=2, turns=2, shared_prefix=8, turn_tokens=8, max_tokens=3, warmup=0)


def chat(httpd: LyingServer, **kwargs: Any) -> str | None:
    result, _ = Server(url_of(httpd), KEY, **kwargs.pop("server", {})).chat(
        "tiny", [{"role": "user", "content": "hi"}], max_tokens=3, **kwargs)
    assert not result.ok
    return result.error


@pytest.mark.parametrize("mode", sorted(TOKENIZE))
def test_a_tokenize_answer_that_is_no_count_is_one_line(liar: LyingServer, mode: str) -> None:
    liar.mode = mode
    with pytest.raises(ServerError) as error:
        Server(url_of(liar), KEY).count_tokens("tiny", text="one two")
    assert error.value.exit_code == 2 and "/tokenize" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(("mode", "kind"), [("list_chunk", "bad_stream"), ("delta_str", "bad_stream"),
                                            ("usage_list", "bad_stream"), ("negative_usage", "bad_usage"),
                                            ("too_many_tokens", "bad_usage"), ("cached_above_prompt", "bad_usage")])
def test_a_stream_chunk_of_the_wrong_shape_or_an_impossible_usage_fails_the_request(
        liar: LyingServer, mode: str, kind: str) -> None:
    liar.mode = mode
    assert kind == chat(liar)


def test_what_one_answer_may_buffer_is_bounded(liar: LyingServer) -> None:
    liar.mode = "huge"
    assert "too_large" == chat(liar)


def test_a_stream_that_never_ends_is_cut_at_its_deadline(liar: LyingServer) -> None:
    """The deadline (the run's) and the request's own timeout hold inside a stream the server keeps alive."""
    liar.mode = "pings"
    assert "timeout" == chat(liar, server={"timeout_s": 1.0})
    assert "deadline" == chat(liar, deadline=time.perf_counter() + 1.0)


def test_a_stream_with_more_tokens_than_asked_is_cut_and_failed(liar: LyingServer) -> None:
    """max_tokens 3 and a token every 20 ms without end: the stream lies, and is cut at once, not at a deadline
    (the request's timeout here is longer than the server's whole stream)."""
    liar.mode = "endless"
    assert "too_many_tokens" == chat(liar, server={"timeout_s": ENDLESS_S * 3})


@pytest.mark.parametrize("head", [trickle.HEADERS, trickle.CHUNK_LINE, trickle.ERROR_BODY],
                         ids=["headers", "chunk_line", "error_body"])
def test_a_chat_whose_server_trickles_ends_at_its_timeout_and_deadline(trickles: list[Trickle], head: bytes) -> None:
    """One byte every 0.2 s of the headers, of a chunk-size line or of an error body: each read gets a byte,
    so only a deadline on the whole exchange ends it."""
    server = Trickle(head)
    trickles.append(server)
    began = time.monotonic()
    result, _ = Server(server.url, KEY, timeout_s=1.0).chat("tiny", [{"role": "user", "content": "hi"}], max_tokens=3)
    assert (result.ok, result.error) == (False, "timeout")
    result, _ = Server(server.url, KEY).chat("tiny", [{"role": "user", "content": "hi"}], max_tokens=3,
                                             deadline=time.perf_counter() + 1.0)
    assert (result.ok, result.error) == (False, "deadline")
    assert server.sending  # the server was still at it: the client cut the exchange
    assert time.monotonic() - began < 40  # a hang guard, not a timing claim


def test_a_model_list_that_trickles_is_one_line_not_a_hang(trickles: list[Trickle]) -> None:
    server = Trickle(trickle.BODY)
    trickles.append(server)
    with pytest.raises(ServerError) as error:
        Server(server.url, KEY).call("GET", "/v1/models", timeout=1.0)
    assert error.value.exit_code == 2 and "no answer" in str(error.value) and server.sending


def test_duration_ends_a_run_whose_streams_never_end(liar: LyingServer, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """--duration 0.5 against streams kept alive without end: the run ends, and the cut requests are failed."""
    liar.mode = "pings"
    monkeypatch.setattr(runner, "DRAIN_S", 0.5, raising=False)
    assert 0 == cli.bench_main(url_of(liar), replace(SMALL, duration_s=0.5), as_json=True, environ={"VLLM_API_KEY": KEY})
    requests = json.loads(capsys.readouterr().out)["requests"]
    assert requests["completed"] == 0 and requests["errors"] == {"deadline": SMALL.users}


def test_nan_and_inf_in_metrics_leave_json_valid(liar: LyingServer, capsys: pytest.CaptureFixture[str]) -> None:
    liar.mode = "nan_metrics"
    assert 0 == cli.bench_main(url_of(liar), SMALL, as_json=True, environ={"VLLM_API_KEY": KEY})

    def no_constant(name: str) -> object:
        raise AssertionError(f"{name} is not JSON")

    doc = json.loads(capsys.readouterr().out, parse_constant=no_constant)
    assert doc["requests"]["completed"] == SMALL.users * SMALL.turns
    assert (doc["kv_cache_usage_max"], doc["prefix_cache_hit_rate"], doc["preemptions"]) == (None, None, None)


def test_a_user_thread_that_dies_fails_the_run(liar: LyingServer, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    real = Server.chat

    def dies_for_user_1(self: Server, model: str, messages: Any, **kwargs: Any) -> Any:
        if "bench-user-1" in threading.current_thread().name:
            raise RuntimeError("a bug in the user loop")
        return real(self, model, messages, **kwargs)

    monkeypatch.setattr(Server, "chat", dies_for_user_1)
    code = cli.bench_main(url_of(liar), SMALL, as_json=True, environ={"VLLM_API_KEY": KEY})
    captured = capsys.readouterr()
    assert code != 0 and captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert "user 1" in captured.err and "RuntimeError" in captured.err


def test_a_model_list_with_names_that_are_no_names_is_one_line(liar: LyingServer) -> None:
    liar.mode = "models_int_ids"
    with pytest.raises(ServerError) as error:
        Server(url_of(liar), KEY).served("tiny")
    assert error.value.exit_code == 2 and "not an OpenAI model list" in str(error.value)


def test_server_counters_that_cannot_be_are_not_reported() -> None:
    """More hits than queries, a counter that went down (a restart between the samples): null, not a figure."""
    before = {"vllm:prefix_cache_hits_total": 0.0, "vllm:prefix_cache_queries_total": 0.0,
              "vllm:num_preemptions_total": 9.0}
    after = {"vllm:prefix_cache_hits_total": 20.0, "vllm:prefix_cache_queries_total": 10.0,
             "vllm:num_preemptions_total": 2.0}
    counters = scrape.counters(before, after, 0.5)
    assert (counters.prefix_cache_hit_rate, counters.preemptions, counters.kv_cache_usage_max) == (None, None, 0.5)
    assert {} == scrape.parse("vllm:kv_cache_usage_perc NaN\nvllm:num_preemptions_total -Inf\n")


def test_an_answer_that_ends_but_whose_body_does_not_stands_and_the_connection_is_dropped(liar: LyingServer) -> None:
    liar.mode = "after_done"
    server = Server(url_of(liar), KEY)
    result, answer = server.chat("tiny", [{"role": "user", "content": "hi"}], max_tokens=3)
    assert result.ok and answer.text == "a" and result.output_tokens == 1
    assert server._kept.conn is None  # what follows [DONE] never ended: this connection cannot carry another


def test_ctrl_c_before_the_measured_run_says_nothing_was_measured(liar: LyingServer, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C in the warm-up (before any request is timed) is one line and 130, not a report of zeros."""
    def interrupted(self: Server, model: str, messages: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(Server, "chat", interrupted)
    code = cli.bench_main(url_of(liar), replace(SMALL, warmup=1), as_json=True, environ={"VLLM_API_KEY": KEY})
    captured = capsys.readouterr()
    assert (130, "") == (code, captured.out)
    assert "nothing was measured" in captured.err and len(captured.err.strip().splitlines()) == 1
