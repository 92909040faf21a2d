"""A TCP port on loopback that nothing listens on, for a server a test starts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the kernel just gave out and took back: free now, though another process may take it first."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
