"""The probes talk to the server directly: a proxy in the environment neither breaks readiness nor sees the key."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from launcher.run import health


class Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []  # noqa: RUF012 - shared by the handler's instances on purpose

    def do_GET(self) -> None:
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        body = b'{"data": [{"id": "tiny", "max_model_len": 2048}]}' if "models" in self.path else b""
        self.send_response(self.server.status)  # type: ignore[attr-defined]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: object) -> None:
        pass


def serve(status: int) -> tuple[ThreadingHTTPServer, type[Recorder]]:
    handler = type("Handler", (Recorder,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.status = status  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


@pytest.fixture
def servers() -> Iterator[tuple[str, type[Recorder], type[Recorder]]]:
    vllm, vllm_seen = serve(200)
    proxy, proxy_seen = serve(502)
    try:
        Recorder.proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}"  # type: ignore[attr-defined]
        yield f"http://127.0.0.1:{vllm.server_address[1]}", vllm_seen, proxy_seen
    finally:
        vllm.shutdown()
        proxy.shutdown()


def test_proxies_in_the_environment_are_not_used(servers: tuple[str, type[Recorder], type[Recorder]],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    base, vllm_seen, proxy_seen = servers
    proxy = Recorder.proxy_url  # type: ignore[attr-defined]
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.setattr(urllib.request, "_opener", None)  # urllib's global opener reads the proxies when built
    assert health.check_health(base).ok
    assert health.check_models(base, "tiny", "secret-key").ok
    assert [("/health", None), ("/v1/models", "Bearer secret-key")] == vllm_seen.seen
    assert [] == proxy_seen.seen


def test_broken_http_is_a_failed_probe_not_a_crash() -> None:
    """http.client.HTTPException (a garbled status line) is no OSError: it must still be a failed probe."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def garble() -> None:
        conn, _ = listener.accept()
        conn.recv(1024)
        conn.sendall(b"NOT-HTTP garbage\r\n\r\n")
        conn.close()

    threading.Thread(target=garble, daemon=True).start()
    probe = health.check_health(f"http://127.0.0.1:{listener.getsockname()[1]}")
    listener.close()
    assert not probe.ok
