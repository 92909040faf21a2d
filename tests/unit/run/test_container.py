"""Container mode: the profile and overrides from the pod's environment, caches on its volume, and the failure
page: where it listens and that a flood of half-sent requests cannot take it down."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from launcher.errors import Outcome, UsageError
from launcher.run import container, daemon
from tests.helpers.polling import poll_for
from tests.helpers.ports import free_port

ROOT = Path(__file__).resolve().parents[3]


def test_the_profile_and_overrides_come_from_the_environment() -> None:
    env = {"VLLM_LAUNCH_PROFILE": "/workspace/qwen3.yaml",
           "VLLM_LAUNCH_SET": "vllm.max-model-len=32768; vllm.gpu-memory-utilization=0.9;"}
    assert ("/workspace/qwen3.yaml", ("vllm.max-model-len=32768", "vllm.gpu-memory-utilization=0.9",
                                      "vllm.port=9000")) == container.arguments(None, ("vllm.port=9000",), env)
    assert "configs/x.yaml" == container.arguments("configs/x.yaml", (), env)[0]  # the argument wins
    with pytest.raises(UsageError, match="VLLM_LAUNCH_PROFILE"):
        container.arguments(None, (), {})


def test_caches_go_to_the_pods_volume_unless_set(tmp_path: Path) -> None:
    assert {} == container.cache_environment({}, tmp_path / "absent")
    env = container.cache_environment({"HF_HOME": "/data/hf"}, tmp_path)
    assert "HF_HOME" not in env
    assert str(tmp_path / ".cache" / "vllm") == env["VLLM_CACHE_ROOT"]


def test_container_mode_is_detected() -> None:
    assert container.enabled({"RUNPOD_POD_ID": "x"}, False)
    assert container.enabled({}, True)
    assert not container.enabled({}, False)  # not PID 1 under pytest


def test_the_page_names_the_failure_and_the_fix() -> None:
    permanent = container.Failure("vLLM has no tool-call-parser 'hermes'", Outcome.CONFIG)
    later = container.Failure("no attempt became ready", Outcome.TEMPFAIL)
    assert "can never work as configured" in permanent.page() and "hermes" in permanent.page()
    assert "will try again" in later.page() and not later.permanent


def test_a_profile_with_a_bad_byte_keeps_the_pod_up_saying_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Latin-1 byte in the pod's profile: the page says where (exit 78, permanent), nothing crashes."""
    path = tmp_path / "pod.yaml"
    path.write_bytes(b"model: Org/Model\nvllm: {host: 127.0.0.1}\n# r\xe9sum\xe9\n")
    shown: list[container.Failure] = []

    def stay_up(failure: container.Failure, stop: object, host: str, port: int, wait_s: float | None) -> bool:
        shown.append(failure)
        return True  # SIGTERM

    monkeypatch.setattr(container, "stay_up", stay_up)
    monkeypatch.setattr(container, "cache_environment", lambda environ: {})
    assert 0 == daemon.up(str(path), container_mode=True)
    assert 1 == len(shown) and shown[0].permanent
    assert f"{path}:3: byte 0xe9 at offset" in shown[0].message


def test_an_unexpected_error_keeps_the_pod_up_and_tries_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only the launcher's own errors: anything that escapes shows on the page (not permanent: it retries)."""
    shown: list[container.Failure] = []

    def stay_up(failure: container.Failure, stop: object, host: str, port: int, wait_s: float | None) -> bool:
        shown.append(failure)
        return len(shown) == 2  # the second try, after the backoff, then SIGTERM

    def broken(*args: object) -> None:
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(container, "stay_up", stay_up)
    monkeypatch.setattr(container, "cache_environment", lambda environ: {})
    monkeypatch.setattr(daemon, "load", broken)
    assert 0 == daemon.up(str(tmp_path / "pod.yaml"), container_mode=True)
    assert ["RuntimeError: a bug over two lines"] * 2 == [f.message for f in shown]
    assert not shown[0].permanent


def test_the_page_address_comes_from_the_pods_environment_then_the_profile() -> None:
    """A profile that did not load has no address: the page goes where the pod says, and the log says why."""
    with capture_logs() as logs:
        assert ("0.0.0.0", 9100) == container.page_address(None, None, {"VLLM_LAUNCH_PORT": "9100"})
    assert {"host_from": "default", "port_from": "VLLM_LAUNCH_PORT", "port": 9100}.items() <= logs[-1].items()
    env = {"VLLM_LAUNCH_HOST": "127.0.0.1", "VLLM_LAUNCH_PORT": "9100"}
    assert ("127.0.0.1", 9100) == container.page_address("0.0.0.0", 8080, env)  # the pod's word wins
    with capture_logs() as logs:
        assert ("10.0.0.5", 8080) == container.page_address("10.0.0.5", 8080, {})
        assert ("0.0.0.0", 8000) == container.page_address(None, None, {})
    assert [("profile", "profile"), ("default", "default")] == [(e["host_from"], e["port_from"]) for e in logs]
    with capture_logs() as logs:
        assert ("0.0.0.0", 8080) == container.page_address(None, 8080, {"VLLM_LAUNCH_PORT": "80000"})
    assert logs[0]["variable"] == "VLLM_LAUNCH_PORT" and "1 to 65535" in logs[0]["fix"]


def test_a_pod_whose_profile_cannot_load_serves_its_page_on_the_environments_port(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "VLLM_LAUNCH_PORT": str(port), "VLLM_LAUNCH_HOST": "127.0.0.1",
           "VLLM_LAUNCH_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    env.pop("RUNPOD_POD_ID", None)
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "up", str(tmp_path / "absent.yaml"), "--container",
                             "--log-format", "json"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert 503 == poll_for(lambda: _status(port, "/health"), 60, f"the page on port {port}")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert '"port_from": "VLLM_LAUNCH_PORT"' in out


def _status(port: int, path: str, timeout: float = 2.0) -> int | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def _half_sent(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: flood\r\n")  # the blank line that ends the request never comes
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_flood_of_half_sent_requests_cannot_take_the_page_down() -> None:
    """More half-sent requests than the cap: /health still answers, the threads stay bounded, and every
    held connection is closed by the server (dropped at the cap or timed out), never held forever."""
    port, limit = free_port(), 4
    before = threading.active_count()
    page = container.StatusPage("127.0.0.1", port, container.Failure("bad profile", Outcome.CONFIG), limit=limit, timeout_s=1.0)
    held: list[socket.socket] = []
    try:
        for _ in range(limit * 3):
            held.append(_half_sent(port))
            assert threading.active_count() <= before + 1 + limit + 1  # serve_forever, the cap, one finishing
        assert 503 == _status(port, "/health", timeout=10)
        assert all(_closed_by_server(sock) for sock in held)
    finally:
        for sock in held:
            sock.close()
        page.close()


def test_a_connection_below_the_cap_is_closed_by_the_read_timeout() -> None:
    """Below the cap nothing is dropped to make room: the timeout alone ends a request that never comes,
    also one that trickles in a byte at a time (each byte within the timeout, the whole far beyond it)."""
    port = free_port()
    page = container.StatusPage("127.0.0.1", port, container.Failure("bad profile", Outcome.CONFIG), limit=8, timeout_s=1.0)
    try:
        idle = _half_sent(port)
        assert _closed_by_server(idle)
        drip = socket.create_connection(("127.0.0.1", port), timeout=10)
        sent = 0
        try:
            for byte in b"GET /" + b"x" * 200:  # 40 s at this pace; the server must close it long before
                drip.sendall(bytes([byte]))
                sent += 1
                time.sleep(0.2)
        except OSError:
            pass  # closed by the server: the next send fails
        assert sent < 200
        idle.close()
        drip.close()
    finally:
        page.close()
