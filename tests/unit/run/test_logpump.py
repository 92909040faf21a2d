"""The log pump never stops reading vLLM's output: not for a line that breaks the classifier, not for an
endless line, not for a log file that cannot be written."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from launcher.run import logpump
from launcher.vllm.diagnose import Diagnoser
from launcher.vllm.signatures import LogEvent


class Fragile(Diagnoser):
    def feed(self, line: str) -> LogEvent | None:
        if "BOOM" in line:
            raise ValueError("a line the classifier did not expect")
        return super().feed(line)


def pump(data: bytes, sink: logpump.RotatingFile | None = None, diagnoser: Diagnoser | None = None) -> logpump.LogPump:
    p = logpump.LogPump(io.BytesIO(data), sink, echo=False, diagnoser=diagnoser or Diagnoser())
    p.run()  # in this thread: the stream ends, so run() returns
    return p


def test_a_line_that_breaks_the_classifier_is_skipped_and_reading_goes_on() -> None:
    p = pump(b"INFO one\nBOOM\nINFO three\n", diagnoser=Fragile())
    assert list(p.tail)[-1] == "INFO three"
    assert p.warned == {"diagnosis"}
    messages = []
    while not p.messages.empty():
        messages.append(p.messages.get_nowait())
    assert messages[-1] is logpump.EOF


def test_a_line_without_a_newline_is_cut_into_bounded_pieces() -> None:
    p = pump(b"\r" + b"x" * (3 * logpump.MAX_LINE_BYTES) + b"\nINFO after\n")
    assert max(len(line) for line in p.tail) <= logpump.MAX_LINE_BYTES
    assert len(p.tail) == 3 + 1  # three full pieces (the \r before them ends an empty line), then the next line
    assert list(p.tail)[-1] == "INFO after"


class FlakySink(logpump.RotatingFile):
    """Fails its first `failures` writes, as a full disk does until space is freed."""

    def __init__(self, path: Path, failures: int) -> None:
        super().__init__(path, 10**6, 1)
        self.failures = failures
        self.reopened = 0

    def write(self, line: str) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError(28, "No space left on device")
        super().write(line)

    def reopen(self) -> None:
        self.reopened += 1
        super().reopen()


def test_a_failing_log_write_warns_once_and_the_file_is_reopened(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logpump, "REOPEN_EVERY_S", 0.0)
    sink = FlakySink(tmp_path / "vllm.log", failures=2)
    p = pump(b"INFO a\nINFO b\nINFO c\nINFO d\n", sink=sink)
    sink.close()
    assert p.warned == {"log_write"}
    assert sink.reopened == 2
    assert (tmp_path / "vllm.log").read_text().splitlines() == ["INFO c", "INFO d"]
    assert list(p.tail) == ["INFO a", "INFO b", "INFO c", "INFO d"], "the diagnosis saw every line"


def test_without_the_interval_passing_a_failed_file_is_left_alone(tmp_path: Path) -> None:
    sink = FlakySink(tmp_path / "vllm.log", failures=1)
    pump(b"INFO a\nINFO b\n", sink=sink)
    sink.close()
    assert (sink.reopened, (tmp_path / "vllm.log").read_text()) == (0, "")


def test_carriage_return_redraws_are_lines_and_progress() -> None:
    """tqdm redraws a bar with \r and no newline: each redraw is a line the diagnosis sees."""
    bar = b"".join(b"Loading safetensors checkpoint shards:  %d%% Completed | %d/4 [00:01<00:03]\r" % (25 * i, i)
                   for i in range(5))
    p = pump(bar + b"\nINFO done\r\n")
    assert p.tail[0] == "Loading safetensors checkpoint shards:  0% Completed | 0/4 [00:01<00:03]"
    assert len(p.tail) == 6 and list(p.tail)[-1] == "INFO done"
    events = []
    while not p.messages.empty():
        message = p.messages.get_nowait()
        if message.mark is logpump.Mark.LINE and message.event is not None:
            events.append(message.event)
    percents = [e.values.get("percent") for e in events if e.kind == "progress"]
    assert percents == [0, 25, 50, 75, 100]


def test_the_launchers_own_probes_never_reach_the_console(capsys: pytest.CaptureFixture[str]) -> None:
    """Every few seconds /health and /v1/models write an access line: the log file keeps them, the console not."""
    lines = [b'(APIServer pid=9) INFO:     127.0.0.1:50000 - "GET /health HTTP/1.1" 200 OK',
             b'INFO:     127.0.0.1:50002 - "GET /v1/models HTTP/1.1" 200 OK',
             b'INFO:     10.0.0.7:41000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
             b"(EngineCore pid=10) INFO 12-01 10:00:00 [core.py:1] loading"]
    p = logpump.LogPump(io.BytesIO(b"\n".join(lines) + b"\n"), None, echo=True, diagnoser=Diagnoser())
    p.run()
    shown = capsys.readouterr().out.splitlines()
    assert [line.split("|", 1)[1].strip()[:20] for line in shown] == ['INFO:     10.0.0.7:4', "(EngineCore pid=10) "]
    assert len(p.tail) == 4, "the diagnosis (and the log file) still see every line"


class Chunks(io.RawIOBase):
    """A pipe that delivers each chunk on its own read, as vLLM's output arrives over minutes."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)

    def read1(self, size: int = -1) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


WAIT = (b"(EngineCore pid=1445363) INFO 10-09 12:06:51 [shm_broadcast.py:812] No available shared memory broadcast "
        b"block found in 60 seconds. This typically happens when some processes are hanging or doing some "
        b"time-consuming work (e.g. compilation, weight/kv cache quantization).\n")


def test_vllm_saying_a_process_waits_is_no_output_for_the_stall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A TP rank hung in a collective: vLLM repeats its shared-memory wait every 60 s and nothing else. Those lines
    reach the log and the diagnosis, but `last_output` (what launcher.startup_stall counts from) stays at the last
    line that moved; any other line, or a partial one (a progress bar's redraw), moves it again."""
    clock = iter(range(100, 200))
    monkeypatch.setattr(logpump.time, "monotonic", lambda: float(next(clock)))
    stream = Chunks([b"(EngineCore pid=1) INFO [gpu_model_runner.py:1] Graph capturing finished in 12 secs\n",
                     WAIT, WAIT, WAIT, b"Loading safetensors checkpoint shards:  50% Completed", b"\n", WAIT])
    p = logpump.LogPump(stream, None, echo=False, diagnoser=Diagnoser())
    p.run()
    # Constructed at 100; the chunks arrive at 101..107. The three waits leave the clock at the capture line (101);
    # the partial bar (105) and its end (106) move it; the last wait (107) does not.
    assert p.last_output == 106.0
    assert p.chunk_at == 107.0
    assert sum("shared memory broadcast" in line for line in p.tail) == 4
