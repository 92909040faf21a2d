"""An HTTP server a flood cannot exhaust: the container page and the metrics exporter both serve through it.

Every connection costs a thread, so the threads are capped: at most `MAX_CONNECTIONS` connections at once,
each with `READ_TIMEOUT_S` in all to send its request (and that long for each read or write after). At the
cap the oldest connection still sending its request is dropped, so a flood of half-sent requests or idle
half-open connections cannot keep a scrape or `/health` from answering, nor fill the unit's TasksMax that
vLLM shares.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

log = structlog.get_logger("vllm_launch")

MAX_CONNECTIONS = 32  # handler threads at most
READ_TIMEOUT_S = 5.0  # how long a connection may take to send its request (and each read or write after)
QUEUE_S = 1.0  # at the cap, how long a new connection waits for a free slot before it is closed


class BoundedServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that holds at most `limit` connections, each given `timeout_s` to send its request.

    The accept loop takes a slot before it starts a thread; at the cap it drops the oldest connection that
    has not sent its request yet (a half-sent request is the flood) and has nothing unread, waits up to
    QUEUE_S for a slot, and closes the new connection when none comes. Its housekeeping (`service_actions`,
    every poll) drops a connection whose request is not in after `timeout_s` in all, so a slow drip cannot
    hold a slot either. Handlers are `BoundedHandler`s, which say when their request is in."""

    daemon_threads = True
    block_on_close = False  # close() must not wait on a client
    request_queue_size = 128  # short: a probe waits behind at most this many queued connections

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 limit: int = MAX_CONNECTIONS, timeout_s: float = READ_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self.slots = threading.BoundedSemaphore(limit)
        self.lock = threading.Lock()
        self.waiting: dict[socket.socket, float] = {}  # connection → when it was accepted
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def serve_in_thread(self, name: str) -> None:
        threading.Thread(target=self.serve_forever, name=name, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self._drop(self._oldest_idle())
            if not self.slots.acquire(timeout=QUEUE_S):
                self.shutdown_request(request)
                return
        with self.lock:
            self.waiting[request] = time.monotonic()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.shutdown_request(request)
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def request_read(self, request: socket.socket) -> None:
        """The request is in: its connection is no longer one to drop."""
        with self.lock:
            self.waiting.pop(request, None)

    def shutdown_request(self, request: Any) -> None:
        self.request_read(request)  # under the lock first, so a drop never reaches a closed socket
        super().shutdown_request(request)

    def service_actions(self) -> None:
        cutoff = time.monotonic() - self.timeout_s
        with self.lock:
            late = [conn for conn, accepted in self.waiting.items() if accepted <= cutoff]
        for conn in late:
            self._drop(conn)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("http.client_gone")  # a client that left mid-answer: nothing to report

    def _oldest_idle(self) -> socket.socket | None:
        """The oldest connection still sending its request that has nothing unread: its thread has taken
        all it sent and waits for more. One with bytes unread is a thread yet to run (a fresh /health),
        never the one to drop. poll, not select: a flood brings descriptors past 1024."""
        with self.lock:
            ordered = [(conn, conn.fileno()) for conn in sorted(self.waiting, key=self.waiting.__getitem__)]
        poller = select.poll()
        for _, fd in ordered:
            if fd >= 0:
                poller.register(fd, select.POLLIN)
        unread = {fd for fd, _ in poller.poll(0)}
        return next((conn for conn, fd in ordered if fd >= 0 and fd not in unread), None)

    def _drop(self, conn: socket.socket | None) -> None:
        """Wake the connection's thread from its read (shutdown, not close: the thread closes it)."""
        with self.lock:
            if conn is None or self.waiting.pop(conn, None) is None:
                return
            with contextlib.suppress(OSError):  # the client is already gone
                conn.shutdown(socket.SHUT_RDWR)


class BoundedHandler(BaseHTTPRequestHandler):
    """A handler for BoundedServer: each read and write bounded, and the server told once the request is in."""

    timeout = READ_TIMEOUT_S

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        if isinstance(self.server, BoundedServer):
            self.server.request_read(self.connection)
        return parsed

    def log_message(self, fmt: str, *args: object) -> None:
        pass  # its clients (and the ones that time out) need no log line each
