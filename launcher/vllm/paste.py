"""What a person reads off a log beyond one line at a time, for the fold (launcher/vllm/diagnose.py).

- Each process's traceback (`Tracebacks`): vLLM prefixes every line with its process (`(EngineCore_DP0 pid=…)`,
  `(Worker_TP1 pid=…)`), so a header, its frames and its final exception are kept apart per process; the
  innermost frame's file is the module that raised (vllm/raise_sites.py judges by it), the frames' names say in
  which start-up phase an out-of-memory happened, and a header never closed means the log ends inside it.
- A message wrapped onto the next lines (`Wrapped`), by a terminal (cut at its width) or a paste (at a word): the
  next lines, with no prefix or level of their own, are read joined to it.
- The pipeline stage a line belongs to (`[Stage-N]`, vLLM-Omni), pydantic's form of a ValueError vLLM's config
  validators raised, the error a generic death line died of, and lines that only point at the cause elsewhere.

Every table here is bounded: hostile lines naming endless processes cannot grow it.
"""

from __future__ import annotations

import functools
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from launcher.vllm.classify import TRACEBACK_WORDS, classify, is_client_text, normalize
from launcher.vllm.signature_kit import EXCEPTION_LINE, PYDANTIC_ASSERTION, PYDANTIC_FORMS
from launcher.vllm.signatures import EventKind, LogEvent

TRACEBACK = TRACEBACK_WORDS[3]  # "Traceback (most recent call last)"
# pydantic validates vLLM's config dataclasses: its "Value error" is a refusal raised in vllm/config.
PYDANTIC_MODULE = "vllm/config/vllm.py"
WORKER_FAILED = "WorkerProc hit an exception"  # a worker's busy loop: the traceback that follows is the rank's failure
# Death lines that name no cause, and how far above them the error they died of may stand.
GENERIC_DEATHS = ("Worker proc ", "Engine core proc ", WORKER_FAILED, "Engine process failed")
# A serving engine's last words that say it is gone, not of what (V0's client, the engine's signal handler): the
# exception printed just before them is the cause.
CAUSELESS_DEATHS = (*GENERIC_DEATHS, "MQLLMEngine is already dead", "Got fatal signal from worker processes")
DEATH_CAUSE_LINES = 5
# torch's NCCL flight recorder reporting a dump it was asked for: what follows a collective's failure, never its cause.
_FLIGHT_RECORDER = re.compile(r"dump signal|dump debug info|flight recorder")
_POINTERS = ("See stack trace", "See root cause", "root cause above", "encountered a fatal error",
             "encountered an issue", "background task failed")
# gcc's or clang's `path:line:col: (fatal) error: …`; a C/C++ assert's `file:line: function: Assertion `expr' failed.`
_NATIVE_DIAGNOSTIC = re.compile(r"\S:\d+:\d+: (?:fatal )?error: \S|\S:\d+: .{0,400}Assertion `.{0,400}' failed")
_HEAP_ABORT = re.compile(r"(?:free|malloc|realloc|munmap_chunk)\(\): (?:double free|invalid|corrupted)"
                         r"|double free or corruption \(")
_NCCL_INIT_FRAME = re.compile(r'File "[^"]*", line \d+ in ncclCommInit\w*\s*$')
_FRAME = re.compile(r'File "[^"]*", line \d+, in (\w+)|processing method (\w+)|(torch\.cuda\.graph\()')
# vLLM's torch.compile cache (VLLM_CACHE_ROOT/torch_compile_cache, the folder run/compilecache.py moves aside): a
# frame there runs a compiled artifact it saved.
COMPILE_CACHE_DIR = "/torch_compile_cache/"
API_SERVER = "APIServer"  # the prefix of vLLM's API server process: `(APIServer pid=1)`
_FRAME_PATH = re.compile(r'File "([^"]{1,512})", line \d+')
# Both at once, for the common line (a Python frame and nothing else of _FRAME's): its path and its function.
_FRAME_SITE = re.compile(r'File "([^"]{1,512})", line \d+(?:, in (\w+))?')
_STAGE = re.compile(r"\[Stage-(\d{1,4})\]")
_QUOTE_MARKS = "▎>│| "  # what a paste puts before each line of a quoted log
_JOIN_LINES = 3  # lines after a message that may continue it
_INIT_POINTER = re.compile(r"(?:Engine core|WorkerProc) initialization failed")
_QUOTED_MIN = 12  # characters of an earlier message a wrapper must quote (a word or two may recur by chance)
_NEW_TRACEBACK = (TRACEBACK, 'File "')  # lines that begin a traceback or are its frames: no message goes on in them
_RECORD_LINES = 40  # lines the engine's config record (a few KiB) may take, cut by a terminal at its width
_SPAN = 400  # lines after a traceback's header in which its final exception is looked for
_MAX_PROCESSES = 64  # processes whose open traceback and frames are remembered
_MAX_LINE = 4096  # longer lines are no traceback's
_MESSAGE_LINES = 12  # an exception's message, however many lines it wraps onto, is shorter than this


# Where a CUDA out-of-memory happened, from the traceback's frames and vLLM's "processing method X".
_OOM_PHASES = (
    ("sampler_warmup", ("_dummy_sampler_run", "sampler_warmup")),
    ("cuda_graphs", ("capture_model", "_capture_cudagraphs", "capture_end", "capture_begin", "cuda.graph(")),
    # Allocating the KV cache closes the profiling step: the budget it measured did not fit after all. (Not the engine's
    # `_initialize_kv_caches`: it wraps profiling and graph capture both, so it says nothing of which one failed.)
    ("profiling", ("profile_run", "determine_num_available_blocks", "determine_available_memory", "allocate_kv_cache")),
    ("weights", ("load_model", "load_weights", "create_weights", "process_weights_after_loading", "repack",
                 "initialize_model")),
)
_PHASE_REASON = {"weights": "weights", "profiling": "profiling", "cuda_graphs": "cuda_graphs"}
_HINT_WINDOW = 80  # lines before the out-of-memory line whose frames still describe it
# A rank's name without its index: `Worker_TP1` and `Worker_TP0` are ranks of one kind, `EngineCore_DP0` too.
_RANK_SUFFIX = re.compile(r"[_ ]?(?:TP|PP|DP|EP|rank)?\d+$")  # one suffix; linear on any name


def _process(line: str) -> str | None:
    """`normalize(line)[0]`; a frame line that starts with its `File "` (most are) has no prefix, and costs nothing."""
    return None if line.lstrip(" ").startswith('File "') and "\r" not in line else normalize(line)[0]


def _frame_site(line: str) -> tuple[str | None, str | None]:
    """A frame line's hint (its function, the method vLLM names while it profiles, or `torch.cuda.graph(`) and its
    site (`…/vllm/x.py:function`, or the path alone), each None where the line holds none."""
    if "processing method" not in line and "cuda.graph(" not in line:
        # The common line, a Python frame alone: its path and function in one search, where its first `File "` starts.
        found = _FRAME_SITE.match(line, max(line.find('File "'), 0))
        if found is not None and found.group(2) is not None:
            return found.group(2), f"{found.group(1)}:{found.group(2)}"
    found = _FRAME.search(line)
    path = _FRAME_PATH.search(line)
    function = found.group(1) if found is not None else None
    hint = (found.group(1) or found.group(2) or found.group(3)) if found is not None else None
    site = (f"{path.group(1)}:{function}" if function else path.group(1)) if path is not None else None
    return hint, site


def _bounded(table: dict[str | None, Any], proc: str | None, value: Any) -> None:
    if proc not in table and len(table) >= _MAX_PROCESSES:
        table.clear()
    table[proc] = value


class Tracebacks:
    """Every process's open traceback: where its header stands, its frames, the module that raised."""

    def __init__(self) -> None:
        self.open: dict[str | None, int] = {}  # process prefix → line of its open traceback's header
        # process prefix → its traceback's last frame: its file and function (`…/vllm/x.py:name`)
        self.modules: dict[str | None, str] = {}
        self.hints: deque[tuple[int, str]] = deque(maxlen=256)  # (line number, frame or method name)
        self.cached: dict[str | None, bool] = {}  # process prefix → its traceback ran code from the compile cache
        self.native: str | None = None  # the first compiler or C/C++ assertion diagnostic printed
        self.prefixes: dict[str | None, str | None] = {}  # a frame line's text before `File "` → its process

    def read(self, line: str, number: int) -> None:
        """A line that may be a frame, a method vLLM names while it profiles, a traceback's header, or a native
        tool's own diagnostic (gcc's `fatal error:`, a C++ `Assertion … failed.`)."""
        if len(line) >= _MAX_LINE:
            return
        if self.native is None and ("error: " in line or "Assertion `" in line) and _NATIVE_DIAGNOSTIC.search(line):
            self.native = normalize(line)[2].strip()  # a compiler's first error is its cause; the rest follow from it
        if "File \"" in line or "processing method" in line or "cuda.graph(" in line:
            hint, site = _frame_site(line)
            if hint is not None:
                self.hints.append((number, hint))
            if site is not None:
                proc = self._frame_process(line)
                _bounded(self.modules, proc, site)
                if COMPILE_CACHE_DIR in site:
                    _bounded(self.cached, proc, True)
        if TRACEBACK in line:
            proc = normalize(line)[0]
            _bounded(self.open, proc, number)
            self.modules.pop(proc, None)  # a new traceback: the frames that follow are its own
            self.cached.pop(proc, None)

    def _frame_process(self, line: str) -> str | None:
        """`_process(line)` for a frame line, remembered by the text before its `File "`: a traceback's frames share
        their prefix (`(EngineCore_DP0 pid=7) ERROR 05-12 10:00:00 [core.py:12]   `), and the process is read from
        the prefix alone (vLLM's prefixes end before a frame's text; no \\r or escape code to strip)."""
        at = line.find('File "')
        if at <= 0 or "\r" in line or "\x1b" in line:
            return _process(line)
        prefix = line[:at]
        if prefix in self.prefixes:
            return self.prefixes[prefix]
        proc = normalize(line)[0]
        _bounded(self.prefixes, prefix, proc)
        return proc

    def why(self, message: str) -> str:
        """The root cause of a final exception: itself, or, where it says only that a compiler or a compiler pass
        failed (`CalledProcessError: Command '[gcc …]' returned non-zero exit status 1`, `PassManager::run failed`,
        `Failed to compile …`), the first diagnostic that tool printed (above it, or in the message's next lines)."""
        if self.native is not None and ("returned non-zero exit status" in message or "PassManager::run failed" in message
                                        or "Failed to compile" in message):
            return self.native
        return message

    def ends(self, event: LogEvent, number: int) -> bool:
        """The event is the final exception of a traceback its process printed (and closes that traceback)."""
        opened = self.open.get(event.proc)
        if opened is None or number - opened > _SPAN or not EXCEPTION_LINE.match(event.message):
            return False
        del self.open[event.proc]
        return True

    def raised_in(self, proc: str | None, module: str) -> None:
        """What raised the next exception of `proc`, where no frame says it (pydantic's validation errors)."""
        _bounded(self.modules, proc, module)

    def module(self, proc: str | None) -> str | None:
        return self.modules.get(proc)

    def through_cache(self, proc: str | None) -> bool:
        """The process's traceback passed through code vLLM's torch.compile cache holds (a compiled artifact)."""
        return self.cached.get(proc, False)

    def message_since(self, number: int, now: int) -> bool:
        """Only an exception's message can stand between line `number` and `now`: no frame, and a few lines at most."""
        return now - number <= _MESSAGE_LINES and not (self.hints and self.hints[-1][0] >= number)

    def open_since(self) -> int:
        """The line of the latest header whose final exception never came (0: none)."""
        return max(self.open.values(), default=0)

    def oom_phase(self, number: int, progress: str | None) -> str | None:
        """The start-up phase an out-of-memory at line `number` happened in: the frames around it first, then the
        phase the log's progress was in (`progress`)."""
        # The innermost frame says it best (an outer one may wrap several phases): the frames printed before the
        # out-of-memory line, last first, then any printed after it (a re-raise), in order.
        before = [name for line, name in reversed(self.hints) if number - _HINT_WINDOW <= line <= number]
        for name in (*before, *(name for line, name in self.hints if line > number)):
            for phase, markers in _OOM_PHASES:
                if any(marker in name for marker in markers):
                    return phase
        return _PHASE_REASON.get(progress or "")


@dataclass(frozen=True, slots=True)
class Joined:
    """A message read whole: the event it makes, and the numbers the whole adds to the first line's."""

    whole: LogEvent
    added: dict[str, Any]


class Wrapped:
    """The failure or exception whose message the next lines may continue."""

    def __init__(self) -> None:
        self.event: LogEvent | None = None
        self.text = ""
        self.since = 0

    def start(self, event: LogEvent, number: int) -> None:
        self.event, self.text, self.since = event, event.message.strip().lstrip(_QUOTE_MARKS).strip(), number

    def stop(self) -> None:
        self.event = None

    def take(self, line: str, number: int) -> Joined | None:
        """The line as a continuation of the standing message, read whole: a failure (an exception no signature
        knew, or the same failure with more numbers); None when the line is no continuation or adds nothing."""
        event = self.event
        if event is None:
            return None
        proc, level, message = normalize(line[:_MAX_LINE])
        rest = message.strip().lstrip(_QUOTE_MARKS).strip()
        window = _RECORD_LINES if event.kind == EventKind.VERSION else _JOIN_LINES
        if proc is not None or level is not None or not rest or number - self.since > window \
                or rest.startswith(_NEW_TRACEBACK):
            self.event = None  # a record of its own, a traceback's first lines, or too far below: the message ended
            return None
        # An exception whose message starts on the next line (`raise RuntimeError(\'\'\'\n  An attempt …`) printed its
        # type alone: the first line that follows is its message, whatever it says.
        bare = event.kind == EventKind.EXCEPTION and number == self.since + 1 and self.text.endswith(":") \
            and EXCEPTION_LINE.match(self.text[:-1])
        for text in ((f"{self.text} {rest}",) if bare else (f"{self.text}{rest}", f"{self.text} {rest}")):
            whole = classify(text)  # cut at the width, or wrapped at a word
            if whole is None or (whole.kind != EventKind.FAILURE and not (bare and whole.kind == EventKind.EXCEPTION)
                                 and not (whole.kind == event.kind == EventKind.VERSION)):
                continue
            if event.kind == EventKind.EXCEPTION:
                self.text = text
                return Joined(whole, dict(whole.values))
            added = {key: value for key, value in whole.values.items() if key not in event.values}
            if whole.failure == event.failure and added:
                self.text = text
                return Joined(whole, added)
        # A record cut by a terminal at its width goes on mid-word; a message, at a word.
        self.text = f"{self.text}{rest}" if event.kind == EventKind.VERSION else f"{self.text} {rest}"
        return None


@functools.lru_cache(maxsize=256)  # a log names a few processes, each on every line it prints; bounded for any other
def _rank_kind(name: str) -> str:
    """`Worker_PP0_TP1` → `Worker`: the name without its rank suffixes (at most three are stripped)."""
    for _ in range(3):
        stripped = _RANK_SUFFIX.sub("", name, count=1)
        if stripped == name:
            break
        name = stripped
    return name


def engine_process(proc: str | None) -> bool:
    """A process of vLLM's engine (its core, a worker rank), named by its prefix: not the API server, which also
    prints the tracebacks of requests."""
    return proc is not None and not proc.startswith(API_SERVER)


def sibling_ranks(accused: LogEvent, other: LogEvent) -> bool:
    """Two different processes of the same kind (TP/PP/DP ranks): one's progress says nothing of the other's
    failure, since every rank loads and profiles on its own."""
    if accused.proc is None or other.proc is None or (accused.proc, accused.pid) == (other.proc, other.pid):
        return False
    return _rank_kind(accused.proc) == _rank_kind(other.proc)


def stage_of(line: str) -> str | None:
    """The pipeline stage a line names (`[Stage-1]` → "1"), if any."""
    head = line[:256]
    found = _STAGE.search(head) if "[Stage-" in head else None
    return found.group(1) if found is not None else None


def points_elsewhere(message: str) -> bool:
    """A line that says something failed and points at the cause elsewhere ("See stack trace (above) for the root
    cause", "EngineCore encountered a fatal error."): never the root cause itself when the cause is in the log."""
    return any(words in message for words in _POINTERS)


def wraps_cause(message: str, earlier: LogEvent | None) -> bool:
    """An exception that only re-raises the start-up's failure: vLLM's "Engine core initialization failed. See root
    cause above", or an initialization's wrapper quoting the exception before it ("Orchestrator initialization failed:
    <its message>").
    A device's or a library's own failure ("CUDA driver initialization failed, you might not have a CUDA gpu") is
    none: it is the cause."""
    if _INIT_POINTER.search(message) is not None:
        return True
    if earlier is None or "initialization failed" not in message:
        return False  # (a wrapper that says more than the start's failure, `Get GPU arch … failed "<…>"`, is a cause)
    quoted = earlier.message.partition(": ")[2].strip()
    return len(quoted) >= _QUOTED_MIN and quoted in message and message != earlier.message


def heap_abort(line: str) -> str | None:
    """glibc's heap check, printed on the line before the SIGABRT it raises (`free(): double free detected in tcache
    2`, `double free or corruption (out)`): the crash's first words, and its cause; None for any other line."""
    if "(): " not in line and "double free" not in line:
        return None
    message = normalize(line[:_MAX_LINE])[2].strip()
    return message if _HEAP_ABORT.match(message) else None


def in_nccl_init(line: str) -> bool:
    """A frame of faulthandler's stack (`File "…", line N in ncclCommInitRank`: most recent call first) inside NCCL's
    communicator set-up: a native crash there is the group failing to form."""
    return "in ncclCommInit" in line and _NCCL_INIT_FRAME.search(line) is not None


def same_process(line: str, event: LogEvent) -> bool:
    """The line's prefix names the event's process (its name, and its PID where the event has one)."""
    return _process(line) == event.proc and (event.pid is None or f"pid={event.pid}" in line[:256])


def points_above(message: str) -> bool:
    """A pointer whose cause was printed before it ("See stack trace above", "See root cause above")."""
    return "above" in message and points_elsewhere(message)


def error_text(line: str) -> str | None:
    """The error a process printed on its own (a C++ `Failed: Cuda error …`, an ERROR record), as one message; None
    for a record of a lower level, client text, or a death line that names no cause."""
    _, level, message = normalize(line[:_MAX_LINE])
    message = message.strip()
    if level in (None, "ERROR", "CRITICAL") and message and not is_client_text(message) \
            and not message.startswith(GENERIC_DEATHS) \
            and not (("dump" in message or "flight" in message) and _FLIGHT_RECORDER.search(message[:1000])):
        return message[:1000]
    return None


def validation_error(line: str) -> LogEvent | None:
    """pydantic's form of a ValueError a validator of vLLM's config raised (`  Value error, Unknown attention
    backend: 'X'. Valid options are: …  [type=value_error, …]`), or of an assertion it made (`  Assertion failed,
    Maximum cudagraph size should be … [type=assertion_error, …]`), as that exception's event."""
    proc, _, message = normalize(line[:_MAX_LINE])
    form = next((form for form in PYDANTIC_FORMS if form in message), None)
    if form is None or is_client_text(message):
        return None
    if form == PYDANTIC_ASSERTION and "[type=assertion_error" not in message:
        return None  # the words alone are not pydantic's: a C or CUDA assertion may print them too
    text = message.split(form, 1)[1].split(" [type=", 1)[0].strip()
    if not text:
        return None
    return LogEvent(EventKind.EXCEPTION, f"{form}{text}"[:1000], {"type": PYDANTIC_FORMS[form]}, proc=proc)
