"""One HTTP request for the probes and the benchmark: any status is an answer, and an answer is bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from launcher.run import health
from launcher.vllm import api
from tests.fakes import trickle
from tests.fakes.trickle import Trickle


class Answers(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"x" * 4096 if self.path == "/big" else b'{"error": "loading"}'
        self.send_response(200 if self.path == "/big" else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = (self.headers.get("Authorization", "") + " " + self.rfile.read(length).decode()).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: object) -> None:
        pass


@pytest.fixture
def base() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_error_status_is_an_answer_with_its_body(base: str) -> None:
    assert (503, b'{"error": "loading"}') == api.request(f"{base}/health", 5)


def test_what_an_answer_may_fill_is_bounded(base: str) -> None:
    assert (200, b"x" * 100) == api.request(f"{base}/big", 5, limit=100)


def test_a_body_is_sent_as_json_with_the_key(base: str) -> None:
    assert (200, b'Bearer k {"n": 1}') == api.request(f"{base}/v1/completions", 5, api_key="k", body={"n": 1})


def test_nothing_listening_and_no_url_are_errors_a_caller_catches() -> None:
    with pytest.raises(api.ERRORS):
        api.request("http://127.0.0.1:1/health", 5)
    with pytest.raises(api.ERRORS):
        api.request("ftp://example/", 5)


def slow(made: list[Trickle], head: bytes) -> Trickle:
    server = Trickle(head)
    made.append(server)
    return server


@pytest.mark.parametrize("head", [trickle.HEADERS, trickle.BODY, trickle.ERROR_BODY, trickle.CHUNK_LINE],
                         ids=["headers", "body", "error_body", "chunk_line"])
def test_a_server_that_trickles_its_answer_is_cut_at_the_exchange_deadline(trickles: list[Trickle],
                                                                           head: bytes) -> None:
    """One byte every 0.2 s resets a per-read timeout forever; the deadline covers the whole exchange."""
    server = slow(trickles, head)
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        api.request(f"{server.url}/metrics", 1.0)
    assert server.sending and server.sent > 0  # the server had not stopped: the client gave up at its deadline
    assert time.monotonic() - began < 20  # a hang guard, not a timing claim


def test_a_trickling_metrics_page_leaves_status_without_metrics(trickles: list[Trickle]) -> None:
    """`status` and `status --watch` read /metrics through the probe: a trickle is no page, not a hang."""
    server = slow(trickles, trickle.BODY)
    assert health.metrics_text(server.url, timeout=1.0) is None
    assert server.sending
