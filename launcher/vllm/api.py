"""One request to vLLM's API server over HTTP(S): straight to it, bounded, JSON in, (status, body) out.

Never through a proxy from the environment (http_proxy, …): a proxy would receive the API key, could answer
for a server that is down, and would skew the benchmark's timing. The connection goes to the URL's host
itself. The benchmark's streamed chats use `open_connection` and read their answer as it comes.

Every exchange has one deadline, not a timeout per read: a server that sends its headers, its chunk-size
lines or its body one byte at a time would reset a per-read timeout forever. The socket http.client reads
from gives each read and write only the time left before the deadline.

HTTPS (a profile with ssl-certfile) verifies the server's certificate against ssl-ca-certs when given;
without it, a loopback server's certificate is accepted unverified (the launcher reaches its own child
there; `certificate_trust` says so for the log), and any other host is verified against the system's CAs,
never accepted blind.
"""

from __future__ import annotations

import http.client
import io
import ipaddress
import json
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

# What one answer may fill: a server that streams without end cannot fill our memory.
MAX_BODY_BYTES = 16 * 2**20
# What a caller treats as "nothing answered": sockets, TLS, bad URLs, and broken HTTP (not OSError subclasses).
ERRORS = (OSError, ValueError, http.client.HTTPException)


def time_left(deadline: float) -> float:
    """Seconds until `deadline` (time.monotonic); TimeoutError once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("no whole answer before the deadline")
    return left


class _Bounded:
    """A connected socket as http.client uses it (sendall, makefile, close), each read and write bounded by
    what is left before `deadline`. A caller that keeps the connection moves `deadline` for its next exchange."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self._readers = 0
        self._closed = False

    def sendall(self, data: bytes, flags: int = 0) -> None:
        self.sock.settimeout(time_left(self.deadline))  # sendall's timeout is its total since Python 3.5
        self.sock.sendall(data, flags)

    def recv_into(self, buffer: Any) -> int:
        self.sock.settimeout(time_left(self.deadline))
        return self.sock.recv_into(buffer)

    def makefile(self, mode: str = "rb", *_: object, **__: object) -> io.BufferedReader:
        self._readers += 1
        return io.BufferedReader(_Reads(self))

    def release(self) -> None:
        self._readers -= 1
        if self._closed and self._readers <= 0:
            self.sock.close()

    def close(self) -> None:
        """As a socket closes: once the last reader (a response still being read) is closed too."""
        self._closed = True
        if self._readers <= 0:
            self.sock.close()


class _Reads(io.RawIOBase):
    def __init__(self, owner: _Bounded) -> None:
        super().__init__()
        self.owner: _Bounded | None = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.owner is None:
            raise ValueError("read from a closed response")
        return self.owner.recv_into(buffer)

    def close(self) -> None:
        if self.owner is not None:
            owner, self.owner = self.owner, None
            owner.release()
        super().close()


def is_loopback(host: str) -> bool:
    """Only an address literal counts: a name (even `localhost`) is whatever the resolver says it is."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def tls_context(host: str, ca_file: str | None) -> ssl.SSLContext:
    if ca_file:
        context = ssl.create_default_context(cafile=ca_file)
        # On loopback the launcher picked the address itself (a wildcard bind is reached at 127.0.0.1), which
        # the certificate need not name; the CA's signature is still checked.
        context.check_hostname = not is_loopback(host)
        return context
    if is_loopback(host):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context()


def certificate_trust(url: str, ca_file: str | None) -> str | None:
    """How an https URL's certificate is checked, in words for the log and `status`; None for http."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "https":
        return None
    if ca_file:
        return f"verified against ssl-ca-certs {ca_file}"
    if is_loopback(parts.hostname or ""):
        return ("not verified: a loopback server's certificate is accepted as it is (set vllm.ssl-ca-certs "
                "to verify it)")
    return "verified against the system's certificate authorities"


def open_connection(https: bool, host: str, port: int | None, deadline: float, *,
                    ca_file: str | None = None) -> http.client.HTTPConnection:
    """A connection already connected (and its TLS handshake done) by `deadline`, its socket bounded by it."""
    port = port or (443 if https else 80)
    sock = socket.create_connection((host, port), timeout=time_left(deadline))
    try:
        if https:
            sock.settimeout(time_left(deadline))  # the handshake as a whole, not per read
            sock = tls_context(host, ca_file).wrap_socket(sock, server_hostname=host.strip("[]"))
    except BaseException:
        sock.close()
        raise
    conn = http.client.HTTPConnection(host, port, timeout=time_left(deadline))
    conn.sock = _Bounded(sock, deadline)
    return conn


def rearm(conn: http.client.HTTPConnection, deadline: float) -> None:
    """A kept connection's next exchange gets its own deadline."""
    if isinstance(conn.sock, _Bounded):
        conn.sock.deadline = deadline


def headers(api_key: str | None, body: bool) -> dict[str, str]:
    found = {"Accept": "application/json"}
    if body:
        found["Content-Type"] = "application/json"
    if api_key:
        found["Authorization"] = f"Bearer {api_key}"
    return found


def request(url: str, timeout: float, *, api_key: str | None = None, body: Mapping[str, Any] | None = None,
            method: str | None = None, limit: int = MAX_BODY_BYTES, ca_file: str | None = None,
            verify: Callable[[socket.socket], None] | None = None) -> tuple[int, bytes]:
    """(status, at most `limit` bytes of the body), whatever the status, all of it within `timeout` seconds
    (connect, TLS, request, headers and body); one of ERRORS when nothing (or not all of it in time) answers.

    `verify` sees the connected socket before anything is sent (the proof that the server is ours) and raises
    to send nothing."""
    deadline = time.monotonic() + timeout
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    conn = open_connection(parts.scheme == "https", parts.hostname, parts.port, deadline, ca_file=ca_file)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    data = json.dumps(body).encode() if body is not None else None
    try:
        if verify is not None and isinstance(conn.sock, _Bounded):
            verify(conn.sock.sock)
        conn.request(method or ("GET" if body is None else "POST"), path, data, headers(api_key, body is not None))
        response = conn.getresponse()
        return response.status, response.read(limit)
    finally:
        conn.close()
