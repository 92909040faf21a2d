"""The child's output: a pump thread that reads it line by line into the diagnosis, and the size-capped file.

A full pipe would block vLLM, and a full disk must not: the pump never stops reading. The pump owns the
log's diagnoser and tells whoever watches the attempt what the log says on one queue of typed messages
(`Message`): a notable line, a failure line that accuses, its acquittal, the log's conviction, vLLM's generic
"engine failed to start", the output's end. The watcher never reads the diagnoser itself; what the process
decides (it exited, it went silent, /health answered) goes back through `convict` and `acquit`.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import queue
import re
import stat
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import structlog

from launcher.errors import ConfigError
from launcher.run import logs
from launcher.run.agentprobe import PARSER_ERROR
from launcher.vllm.diagnose import Diagnoser
from launcher.vllm.diagnosis import Diagnosis
from launcher.vllm.signatures import EventKind, LogEvent

TAIL_LINES = 50
# A "line" with no newline (a progress bar redrawn with \r for an hour, binary junk) is cut into pieces of
# this size: the classifier and the file each see bounded lines, and the pump's memory stays bounded.
MAX_LINE_BYTES = 64 * 1024
# After a failed log write (disk full, file removed under us) the file is reopened at most this often.
REOPEN_EVERY_S = 30.0
# The access-log lines of the launcher's own probes: every few seconds, never worth a console line.
_OUR_PROBES = re.compile(r'INFO:\s+127\.0\.0\.1:\d+ - "GET /(?:health|v1/models|metrics|version) HTTP/1\.[01]" ')
_LINE_END = re.compile(rb"\r\n|[\r\n]")


log = structlog.get_logger("vllm_launch")


class Mark(enum.StrEnum):
    """What a message from the log says (in the order the output came)."""

    LINE = "line"  # a notable line: capacity, progress, the server starting, a fatal line (its event)
    ACCUSED = "accused"  # a failure line stands, not proven: the process must convict it, or progress acquit it
    ACQUITTED = "acquitted"  # the start-up went on after the standing failure line: a warning now
    CONVICTED = "convicted"  # the log itself proved the failure: its traceback, vLLM's engine-start failure
    PENDING = "pending"  # vLLM's generic "engine failed to start" with no root cause yet: it may follow
    EXITED = "exited"  # the output ended: the process is gone or going


@dataclass(frozen=True, slots=True)
class Message:
    mark: Mark
    event: LogEvent | None = None  # the line (LINE), the failure line (ACCUSED, ACQUITTED, CONVICTED)
    evidence: str | None = None  # what convicted it (CONVICTED): traceback, engine_start_failed, same_class


EOF = Message(Mark.EXITED)


@dataclass(frozen=True, slots=True)
class _Standing:
    """What the diagnoser held before a chunk of output: the verdict messages are its changes."""

    failure: LogEvent | None
    confirmed: str | None
    acquitted: int
    pending: bool
_NOTABLE = frozenset({EventKind.FAILURE, EventKind.KV_TOKENS, EventKind.CONCURRENCY, EventKind.AVAILABLE_KV,
                      EventKind.MODEL_LOADING, EventKind.PROGRESS, EventKind.SERVER_STARTING, EventKind.STARTUP_COMPLETE,
                      EventKind.VERSION, EventKind.GPU_BLOCKS, EventKind.SHUTDOWN})


class RotatingFile:
    """vLLM's log on disk, size-capped in bytes: `log` → `log.1` … `log.N` when it grows past max_bytes.

    With request logging vLLM writes prompts into it: a file we create is 0600 whatever the umask, one
    that others could read loses their bits, and a symbolic link at its path is never followed (as root,
    a planted link would make us write over whatever it points to)."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.handle = self._open()
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ConfigError(f"launcher.log_file {path} is a symbolic link, which vllm-launch does not follow; "
                                  "remove it or point log_file at the real file") from None
            raise
        self.size = self.handle.tell()

    def _open(self) -> IO[bytes]:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with contextlib.suppress(OSError):  # an older file, maybe 0644: others lose their read bit
            mode = os.fstat(fd).st_mode
            if mode & 0o007:
                os.fchmod(fd, stat.S_IMODE(mode) & 0o770)
        handle = os.fdopen(fd, "ab")
        handle.seek(0, os.SEEK_END)
        return handle

    def write(self, line: str) -> None:
        data = (line + "\n").encode("utf-8", errors="replace")
        if self.max_bytes and self.size + len(data) > self.max_bytes:
            self._rotate()
        self.handle.write(data)
        self.handle.flush()
        self.size += len(data)

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
        self.handle = self._open()
        self.size = 0

    def reopen(self) -> None:
        self.close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = self._open()
        self.size = self.handle.tell()

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
        self._diagnoser = diagnoser
        self._lock = threading.Lock()
        self.messages: queue.Queue[Message] = queue.Queue()
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.last_output = time.monotonic()  # the last output that moved (see `run`)
        self.chunk_at = self.last_output  # when the chunk being read arrived
        self.fatal_at: float | None = None  # monotonic time the first specific fatal line was read
        self.sink_failed_at: float | None = None
        self.warned: set[str] = set()
        self.tool_parser_errors = 0  # "Error in extracting tool call from response" and its kin (run/agentprobe.py)

    def run(self) -> None:
        """Read whatever the pipe holds (a `\r` redraw of a progress bar is progress too, though no newline
        follows for minutes); every piece ended by \n or \r is a line, and an endless one is cut."""
        pending = b""
        while chunk := self._read_chunk():
            self.chunk_at = time.monotonic()
            pieces = _LINE_END.split(pending + chunk)
            pending = pieces.pop()
            while len(pending) > MAX_LINE_BYTES:
                pieces.append(pending[:MAX_LINE_BYTES])
                pending = pending[MAX_LINE_BYTES:]
            lines = [piece for piece in pieces if piece]
            # Output is what moves: vLLM repeating that a process waits on another (every 60 s while a rank
            # hangs) is no sign of life, so launcher.startup_stall still counts through it.
            if self._lines(lines) or not lines:
                self.last_output = self.chunk_at
        if pending:
            self._lines([pending])
        self.messages.put(EOF)

    def _lines(self, pieces: list[bytes]) -> bool:
        """One chunk of output, then what it changed in the verdict. Judged per chunk, as the output came: a
        traceback's last line convicts, unless the chained exception printed with it reopens the traceback.
        False when every line only said that a process waits."""
        before = self._standing()
        moved = False
        for piece in pieces:
            moved = self._line(piece) or moved
        self._post_verdict(before)
        return moved

    def _standing(self) -> _Standing:
        with self._lock:
            d = self._diagnoser
            return _Standing(d.failure, d.confirmed, len(d.acquitted), d.pending)

    def _post_verdict(self, before: _Standing) -> None:
        with self._lock:
            d = self._diagnoser
            acquitted = d.acquitted[before.acquitted:]
            failure, confirmed, pending = d.failure, d.confirmed, d.pending
        for event in acquitted:
            self.messages.put(Message(Mark.ACQUITTED, event))
        if failure is not None and confirmed is not None and (before.confirmed is None or failure is not before.failure):
            self.messages.put(Message(Mark.CONVICTED, failure, confirmed))
        elif failure is not None and confirmed is None and failure is not before.failure:
            self.messages.put(Message(Mark.ACCUSED, failure))
        if pending and not before.pending:
            self.messages.put(Message(Mark.PENDING))

    def _read_chunk(self) -> bytes:
        read1 = getattr(self.stream, "read1", None)
        try:
            return bytes(read1(MAX_LINE_BYTES) if read1 is not None else self.stream.read(MAX_LINE_BYTES))
        except (OSError, ValueError):  # the pipe was closed under us: the child is gone
            return b""

    def _line(self, raw: bytes) -> bool:
        """Write, echo and judge one line; False when it only says that a process waits."""
        line = raw.decode("utf-8", errors="replace")
        self._write(line)
        try:
            return self._feed(line)
        except Exception as exc:  # the pump must outlive any line: a dead pump blocks vLLM on a full pipe
            self._warn_once("diagnosis", f"a line could not be classified ({type(exc).__name__}: {exc})")
            return True

    def _feed(self, line: str) -> bool:
        if self.echo and not _OUR_PROBES.search(line):
            logs.echo_child_line(line)
        self.tail.append(line)
        with self._lock:
            event = self._diagnoser.feed(line)
            if event is not None and event.fatal == "specific" and self.fatal_at is None and self._diagnoser.decided:
                self.fatal_at = self.chunk_at
        if event is not None and event.kind == EventKind.SERVING and PARSER_ERROR.match(event.message):
            self.tool_parser_errors += 1
        if event is not None and event.kind in _NOTABLE:
            self.messages.put(Message(Mark.LINE, event))
        return event is None or event.kind is not EventKind.WAITING

    def _write(self, line: str) -> None:
        """A failing write (full disk) is a warning; the file is reopened now and then, and serving goes on."""
        if self.sink is None:
            return
        now = time.monotonic()
        if self.sink_failed_at is not None:
            if now - self.sink_failed_at < REOPEN_EVERY_S:
                return
            try:
                self.sink.reopen()
            except OSError:
                self.sink_failed_at = now
                return
            self.sink_failed_at = None
        try:
            self.sink.write(line)
        except OSError as exc:
            self.sink_failed_at = now
            self._warn_once("log_write", f"cannot write {self.sink.path} ({exc.strerror or exc}); vLLM keeps "
                            f"serving, and the file is reopened every {REOPEN_EVERY_S:.0f}s")

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self.warned:
            self.warned.add(what)
            log.warning("log_pump." + what, error=message)

    def diagnosis(self) -> Diagnosis:
        with self._lock:
            return self._diagnoser.diagnosis()

    def expect_shutdown(self) -> None:
        with self._lock:
            self._diagnoser.expect_shutdown()

    def convict(self, evidence: str) -> None:
        """The process proved the standing failure line (it exited, its engine died, it went silent)."""
        with self._lock:
            self._diagnoser.convict(evidence)

    def acquit(self) -> LogEvent | None:
        """The server answered: the standing failure line, if any, did not end the start-up (returned)."""
        with self._lock:
            return self._diagnoser.acquit()

    @property
    def joined(self) -> bool:
        """This rank's own vLLM said it is part of an assembled group (multi-node)."""
        with self._lock:
            return self._diagnoser.joined
