"""A loopback server that answers one byte every `gap_s`: headers, a body, chunk-size lines or an error body
that never end in time. A client that bounds each read instead of the whole exchange waits on it forever.

The server sends its `payload` to every connection it accepts (optionally over TLS) until the payload ends
or the client hangs up; `sending` tells a test that the server was still sending when the client gave up.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time

# What each payload starts with; the rest is one byte repeated, long enough that no test outlives it.
HEADERS = b"HTTP/1.1 200 OK\r\nX-Slow: "
BODY = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n"
ERROR_BODY = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100000\r\n\r\n"
CHUNK_LINE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5;"


class Trickle:
    def __init__(self, head: bytes, *, gap_s: float = 0.2, fill: bytes = b"a", length: int = 100_000,
                 tls: ssl.SSLContext | None = None) -> None:
        self.payload = head + fill * length
        self.gap_s = gap_s
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.sent = 0  # bytes sent, over every connection
        self.finished = threading.Event()  # a payload was sent whole: the client did not give up first
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def sending(self) -> bool:
        """The server still has payload to send: whoever stopped reading, it was not the server."""
        return not self.finished.is_set() and self.sent < len(self.payload)

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._send, args=(conn,), daemon=True).start()

    def _send(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            for byte in self.payload:
                if self.closed.is_set():
                    return
                conn.sendall(bytes((byte,)))
                self.sent += 1
                time.sleep(self.gap_s)
            self.finished.set()

    def close(self) -> None:
        self.closed.set()
        self.listener.close()
