"""One request to vLLM's API server over HTTP: straight to it, bounded, JSON in, (status, body) out.

Never through a proxy from the environment (http_proxy, …): a proxy would receive the API key, could answer
for a server that is down, and would skew the benchmark's timing. http.client connects to the URL's host
itself. The benchmark's streamed chats use `connect` and read their answer as it comes.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

# What one answer may fill: a server that streams without end cannot fill our memory.
MAX_BODY_BYTES = 16 * 2**20
# What a caller treats as "nothing answered": sockets, bad URLs, and broken HTTP (not OSError subclasses).
ERRORS = (OSError, ValueError, http.client.HTTPException)


def connect(https: bool, host: str, port: int | None, timeout: float) -> http.client.HTTPConnection:
    kind = http.client.HTTPSConnection if https else http.client.HTTPConnection
    return kind(host, port, timeout=timeout)


def headers(api_key: str | None, body: bool) -> dict[str, str]:
    found = {"Accept": "application/json"}
    if body:
        found["Content-Type"] = "application/json"
    if api_key:
        found["Authorization"] = f"Bearer {api_key}"
    return found


def request(url: str, timeout: float, *, api_key: str | None = None, body: Mapping[str, Any] | None = None,
            method: str | None = None, limit: int = MAX_BODY_BYTES,
            verify: Callable[[socket.socket], None] | None = None) -> tuple[int, bytes]:
    """(status, at most `limit` bytes of the body), whatever the status; one of ERRORS when nothing answers.

    `verify` sees the connected socket before anything is sent (the proof that the server is ours) and raises
    to send nothing."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    conn = connect(parts.scheme == "https", parts.hostname, parts.port, timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    data = json.dumps(body).encode() if body is not None else None
    try:
        if verify is not None:
            conn.connect()
            verify(conn.sock)
        conn.request(method or ("GET" if body is None else "POST"), path, data, headers(api_key, body is not None))
        response = conn.getresponse()
        return response.status, response.read(limit)
    finally:
        conn.close()
