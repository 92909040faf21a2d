"""A profile with ssl-certfile is reached over https by every probe, /metrics read and benchmark: its
certificate is checked against ssl-ca-certs when given, accepted as it is only on a loopback address
(and said so), and verified against the system's CAs anywhere else."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from launcher.bench.client import Server
from launcher.config.load import loads
from launcher.run import health
from launcher.vllm import api, command
from tests.fakes import tls


class Answers(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b'{"data": [{"id": "tiny", "max_model_len": 2048}]}' if "models" in self.path else b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: object) -> None:
        pass


class Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that refused our certificate hangs up mid-handshake: what some tests want


@pytest.fixture
def cert(tmp_path: Path) -> tuple[Path, Path]:
    return tls.self_signed(tmp_path)


@pytest.fixture
def https_url(cert: tuple[Path, Path]) -> Iterator[str]:
    server = Quiet(("127.0.0.1", 0), Answers)
    server.socket = tls.server_context(*cert).wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_profile_with_a_certificate_is_reached_over_https() -> None:
    plan = command.build_plan(loads("model: /m\nvllm: {host: 127.0.0.1, port: 8443, ssl-certfile: /c.pem, ssl-keyfile: /k.pem, "
                                    "ssl-ca-certs: /ca.pem}\n"))
    assert (plan.base_url, plan.ca_file) == ("https://127.0.0.1:8443", "/ca.pem")
    assert command.build_plan(loads("model: /m\nvllm: {host: 127.0.0.1}\n")).base_url.startswith("http://")


def test_the_probes_speak_tls_to_a_loopback_server(https_url: str, cert: tuple[Path, Path]) -> None:
    """Without ssl-certfile's CA the loopback server's certificate is accepted; with it, it is verified."""
    assert health.check_health(https_url).ok
    assert health.check_health(https_url, ca_file=str(cert[0])).ok
    assert health.check_models(https_url, "tiny", None, ca_file=str(cert[0])).ok
    assert health.metrics_text(https_url, ca_file=str(cert[0])) == "ok"
    assert not health.check_health(https_url.replace("https", "http")).ok  # plain HTTP to TLS: no answer


def test_a_certificate_the_ca_did_not_sign_is_refused(https_url: str, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    other, _ = tls.self_signed(tmp_path / "other")
    probe = health.check_health(https_url, ca_file=str(other))
    assert not probe.ok and "CERTIFICATE_VERIFY_FAILED" in probe.detail


def test_the_benchmark_speaks_tls_too(https_url: str, cert: tuple[Path, Path]) -> None:
    assert Server(https_url, None, ca_file=str(cert[0])).served("tiny").model == "tiny"


@pytest.mark.parametrize("host", ["10.1.2.3", "example.org", "localhost", "[fe80::1]"])
def test_verification_is_never_off_for_a_host_that_is_not_a_loopback_address(host: str) -> None:
    context = api.tls_context(host, None)
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert "not verified" not in (api.certificate_trust(f"https://{host}:8000", None) or "")


def test_an_unverified_loopback_certificate_is_said_so() -> None:
    assert "not verified" in (api.certificate_trust("https://127.0.0.1:8000", None) or "")
    assert "ssl-ca-certs /ca.pem" in (api.certificate_trust("https://127.0.0.1:8000", "/ca.pem") or "")
    assert api.certificate_trust("http://127.0.0.1:8000", None) is None
