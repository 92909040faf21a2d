"""vLLM's own multi-node engine (`--nnodes N --node-rank R --master-addr A --master-port P`, `--headless` on
the workers), as far as a supervisor sees it.

The head (rank 0) listens on the master port and serves only once the other N-1 ranks have connected (the
world is assembled); a worker connection that drops while serving is a dead engine on the head (its
collective calls fail): EngineDeadError, exit 0. A headless worker prints vLLM's headless line (or its log up
to the rank's place in the world), starts its engine process, connects to the head (retrying while the head
starts), prints the rest of its log (loading, KV cache) once connected, and exits 1 with a connection error
when the head goes away; SIGTERM ends it with 0.
"""

from __future__ import annotations

import re
import signal
import socket
import threading
import time
from types import FrameType

from fakevllm.common import emit, mark, text_option

HEADLESS_LINE = ("INFO 12-01 10:00:00 [serve.py:224] Launching vLLM (v0.32.0) headless multiproc executor, with head "
                 "node address {addr}:{port} for torch.distributed process group.")
# No real capture of a worker that lost its head yet: this line has the shape of gloo's error in vLLM's log.
LOST_LINE = ("(Worker pid={pid}) ERROR 12-01 10:00:00 [multiproc_executor.py:671] RuntimeError: [gloo] Connection "
             "closed by peer [{addr}]:{port}")


JOINED = re.compile(r"rank \d+ in world size \d+ is assigned as|Starting to load model|Loading weights took")


def nodes(argv: list[str]) -> int:
    return int(text_option(argv, "--nnodes", "1"))


def address(argv: list[str]) -> tuple[str, int]:
    return text_option(argv, "--master-addr", "127.0.0.1"), int(text_option(argv, "--master-port", "29501"))


class Rendezvous:
    """The head's side: accept the other ranks; `assembled` once all came, `lost` when one drops."""

    def __init__(self, argv: list[str]) -> None:
        self.expected = nodes(argv) - 1
        self.assembled = threading.Event()
        self.lost = threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(address(argv))
        self.sock.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        joined = 0
        while joined < self.expected:
            try:
                peer, _ = self.sock.accept()
            except OSError:
                return
            joined += 1
            threading.Thread(target=self._watch, args=(peer,), daemon=True).start()
        mark("world_assembled")
        self.assembled.set()

    def _watch(self, peer: socket.socket) -> None:
        try:
            while peer.recv(64):
                pass
        except OSError:
            pass
        self.lost.set()

    def close(self) -> None:
        self.sock.close()


def headless(argv: list[str], lines: list[str], start_engine: object, stop_engine: object) -> int:
    """A worker rank: no API server; its engine runs until SIGTERM or until its head is gone. `lines` (the
    scenario's log, e.g. a real headless worker's) are printed first; without one, vLLM's headless line."""
    stopping = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    addr, port = address(argv)
    lines = lines or [HEADLESS_LINE.format(addr=addr, port=port)]
    # vLLM prints a rank's place in the world, and then loads, only once torch.distributed has assembled
    # the group at the head's address: the lines from there on wait for the connection.
    joined_at = next((i for i, line in enumerate(lines) if JOINED.search(line)), len(lines))
    for line in lines[:joined_at]:
        emit(line)
    start_engine()  # type: ignore[operator]
    link: socket.socket | None = None
    while link is None and not stopping.is_set():  # the head may still be starting
        try:
            link = socket.create_connection((addr, port), timeout=1.0)
        except OSError:
            stopping.wait(0.2)
    if link is not None:
        mark("worker_joined")
        link.settimeout(0.2)
        for line in lines[joined_at:]:
            emit(line)
    while not stopping.is_set() and link is not None:
        try:
            if link.recv(64) == b"":
                emit(LOST_LINE.format(pid=threading.get_native_id(), addr=addr, port=port))
                stop_engine()  # type: ignore[operator]
                return 1
        except TimeoutError:
            continue
        except OSError:
            emit(LOST_LINE.format(pid=threading.get_native_id(), addr=addr, port=port))
            stop_engine()  # type: ignore[operator]
            return 1
    stop_engine()  # type: ignore[operator]
    if link is not None:
        link.close()
    time.sleep(0.05)
    return 0
