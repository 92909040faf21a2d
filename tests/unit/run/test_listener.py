"""The proof that what answers on the port is our own vLLM: the kernel's socket table and the holder's fds.

Real sockets on loopback, real processes: a stranger is a process outside the set called ours."""

# ruff: noqa: E501 - the kernel's table rows below are kept verbatim
from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from launcher.errors import ConfigError
from launcher.run import health, listener

# Two rows of a real /proc/net/tcp6 (a dual-stack listener on :: and a v4-mapped connection) and one of tcp.
TCP6 = """  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F40 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31337 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:1F40 0000000000000000FFFF00000100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 20 4 30 10 -1
"""
TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0
   1: garbage
"""

STRANGER = """
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True)
conn, _ = s.accept()
s.close()  # only the accepted connection is left: the listener that took it is gone
print("accepted", flush=True)
time.sleep(60)
"""


def test_the_kernels_table_is_read_as_addresses_ports_states_and_inodes() -> None:
    rows = listener.parse_table(TCP6) + listener.parse_table(TCP)
    assert rows[0] == listener.Row(("::", 8000), ("::", 0), listener.LISTEN, 31337)
    assert rows[1].local == ("127.0.0.1", 8000) and rows[1].remote == ("127.0.0.1", 0xD431), "v4-mapped is plain v4"
    assert rows[2] == listener.Row(("127.0.0.1", 8000), ("0.0.0.0", 0), listener.LISTEN, 777)
    assert len(rows) == 3, "a row that does not parse is skipped"
    reachable = listener.listeners(8000, "127.0.0.1", rows)
    assert [r.inode for r in reachable] == [31337, 777], "a wildcard listener can take a loopback connection"
    assert listener.listeners(8000, "10.1.2.3", rows) == [rows[0]]


@pytest.fixture
def server() -> Iterator[socket.socket]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


def test_a_connection_to_a_listener_of_ours_is_ours(server: socket.socket) -> None:
    with socket.create_connection(server.getsockname()) as conn:
        listener.verify_connection(conn, lambda: {os.getpid()}, accept_wait_s=0.05)  # queued: the listener decides
        accepted, _ = server.accept()
        with accepted:
            listener.verify_connection(conn, lambda: {os.getpid()})  # accepted: its holder decides


def test_a_listener_held_by_someone_else_is_named(server: socket.socket) -> None:
    with socket.create_connection(server.getsockname()) as conn, \
            pytest.raises(listener.NotOurServer) as found:
        listener.verify_connection(conn, set, accept_wait_s=0.05)
    assert found.value.port == server.getsockname()[1]
    assert f"PID {os.getpid()} (" in found.value.holder


def test_a_stranger_that_accepted_then_closed_its_listener_is_caught() -> None:
    """With the listener gone, only the accepted socket's holder can tell: it is not in our set."""
    stranger = subprocess.Popen([sys.executable, "-c", STRANGER], stdout=subprocess.PIPE, text=True)
    try:
        assert stranger.stdout is not None
        port = int(stranger.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)) as conn:
            assert stranger.stdout.readline().strip() == "accepted"
            with pytest.raises(listener.NotOurServer) as found:
                listener.verify_connection(conn, lambda: {os.getpid()})
        assert found.value.holder.startswith(f"PID {stranger.pid} (")
    finally:
        stranger.kill()
        stranger.wait()


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        _Recorder.seen.append(self.headers.get("Authorization"))
        body = b'{"data": [{"id": "m", "max_model_len": 4096}]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def test_a_squatter_gets_no_key_and_the_probe_names_it() -> None:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _Recorder.seen = []
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        stranger = health.check_models(url, "m", "the-key", verify=lambda s: listener.verify_connection(s, set))
        assert not stranger.ok and stranger.not_ours is not None and f"PID {os.getpid()}" in stranger.not_ours
        assert _Recorder.seen == [], "nothing, the key least of all, was sent to it"
        ours = health.check_models(url, "m", "the-key",
                                   verify=lambda s: listener.verify_connection(s, lambda: {os.getpid()}))
        assert ours.ok and ours.not_ours is None and _Recorder.seen == ["Bearer the-key"]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_taken_port_is_78_naming_the_holder_and_the_key(server: socket.socket) -> None:
    port = server.getsockname()[1]
    with pytest.raises(ConfigError, match=r"set vllm\.port to a free port") as found:
        listener.check_port("127.0.0.1", port)
    assert f"held by PID {os.getpid()} (" in str(found.value)
