"""The child's output: a pump thread that reads it line by line into the diagnosis, and the size-capped file.

A full pipe would block vLLM, and a full disk must not: the pump never stops reading.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO

from launcher.run import logs
from launcher.vllm.diagnose import Diagnoser, Diagnosis
from launcher.vllm.signatures import LogEvent

TAIL_LINES = 50


EOF = LogEvent("eof", "")
_NOTABLE = frozenset({"failure", "kv_tokens", "concurrency", "available_kv", "model_loading", "progress",
                      "server_starting", "startup_complete", "version", "gpu_blocks", "shutdown"})


class RotatingFile:
    """vLLM's log on disk, size-capped: `log` → `log.1` … `log.N` when it grows past max_bytes."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handle: IO[str] = path.open("a", encoding="utf-8")
        self.size = self.handle.tell()

    def write(self, line: str) -> None:
        text = line + "\n"
        if self.max_bytes and self.size + len(text) > self.max_bytes:
            self._rotate()
        self.handle.write(text)
        self.handle.flush()
        self.size += len(text)

    def _rotate(self) -> None:
        self.handle.close()
        for index in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{index}")
            if older.exists():
                older.replace(self.path.with_name(f"{self.path.name}.{index + 1}"))
        if self.backups:
            self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink(missing_ok=True)
        self.handle = self.path.open("a", encoding="utf-8")
        self.size = 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.handle.close()


class LogPump(threading.Thread):
    """Reads the child's merged output line by line, so a full pipe never blocks vLLM."""

    def __init__(self, stream: IO[bytes], sink: RotatingFile | None, echo: bool, diagnoser: Diagnoser) -> None:
        super().__init__(name="vllm-log-pump", daemon=True)
        self.stream = stream
        self.sink = sink
        self.echo = echo
        self.diagnoser = diagnoser
        self.lock = threading.Lock()
        self.events: queue.Queue[LogEvent] = queue.Queue()
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.last_output = time.monotonic()
        self.fatal_at: float | None = None  # monotonic time the first specific fatal line was read

    def run(self) -> None:
        for raw in iter(self.stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            self.last_output = time.monotonic()
            if self.sink is not None:
                try:
                    self.sink.write(line)
                except OSError:
                    self.sink = None  # a full disk must not stop the pump (and so vLLM)
            if self.echo:
                logs.echo_child_line(line.rstrip("\r"))
            self.tail.append(line)
            with self.lock:
                event = self.diagnoser.feed(line)
                if event is not None and event.fatal == "specific" and self.fatal_at is None and self.diagnoser.decided:
                    self.fatal_at = self.last_output
            if event is not None and event.kind in _NOTABLE:
                self.events.put(event)
        self.events.put(EOF)

    def diagnosis(self) -> Diagnosis:
        with self.lock:
            return self.diagnoser.diagnosis()

    def expect_shutdown(self) -> None:
        with self.lock:
            self.diagnoser.expect_shutdown()
