"""sd_notify over a real AF_UNIX datagram socket: path and abstract addresses, silent without one."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

from launcher.run import sdnotify


def receiver(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + address[1:] if address.startswith("@") else address)
    sock.settimeout(2)
    return sock


class TestNotify:
    def test_abstract_socket_gets_one_datagram(self) -> None:
        """`@name` is the abstract namespace; fields go as newline-separated KEY=VALUE."""
        address = f"@vllm-launch-{uuid.uuid4().hex}"
        with receiver(address) as sock:
            assert sdnotify.notify({"READY": 1, "STATUS": "ready: 1,048,576 KV tokens"}, {"NOTIFY_SOCKET": address})
            assert b"READY=1\nSTATUS=ready: 1,048,576 KV tokens" == sock.recv(4096)

    def test_a_status_that_quotes_a_stranger_cannot_add_a_field(self) -> None:
        """A STATUS text holding a newline (an error quoting a stranger's command line) stays one STATUS field:
        it never becomes a READY=1 or MAINPID= line of its own."""
        address = f"@vllm-launch-{uuid.uuid4().hex}"
        with receiver(address) as sock:
            assert sdnotify.notify({"STATUS": "failed: it runs x\nREADY=1\nMAINPID=1\x1b[2J"}, {"NOTIFY_SOCKET": address})
            assert b"STATUS=failed: it runs x READY=1 MAINPID=1" == sock.recv(4096)

    def test_path_socket(self, tmp_path: Path) -> None:
        path = str(tmp_path / "notify.sock")
        with receiver(path) as sock:
            assert sdnotify.notify({"STOPPING": 1}, {"NOTIFY_SOCKET": path})
            assert b"STOPPING=1" == sock.recv(4096)

    def test_silent_without_systemd(self) -> None:
        """Outside systemd nothing is sent and nothing fails."""
        assert not sdnotify.notify({"READY": 1}, {})

    def test_errors_never_raise(self, tmp_path: Path) -> None:
        """A socket that is gone (systemd restarted) is logged at debug level, not raised."""
        assert not sdnotify.notify({"READY": 1}, {"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
        assert not sdnotify.notify({"READY": 1}, {"NOTIFY_SOCKET": "vsock:2:1234"})

    def test_watchdog_interval_is_half_of_usec_for_our_pid(self) -> None:
        assert 45.0 == sdnotify.watchdog_interval({"WATCHDOG_USEC": "90000000", "WATCHDOG_PID": str(os.getpid())})
        assert sdnotify.watchdog_interval({"WATCHDOG_USEC": "90000000", "WATCHDOG_PID": "1"}) is None
        assert sdnotify.watchdog_interval({}) is None
