"""Apply the signature table to one raw log line: strip its prefixes, refuse text a client wrote, match.

`classify(line)` is pure, fast (it runs on every line vLLM prints) and total: no line, however
malformed, long or binary, makes it raise, so the log pump that calls it can never die of a line.

Lines are normalised first: ANSI colours and `\\r` continuations stripped, then docker-compose,
timestamp, `[rank0]:`, `(EngineCore pid=…)` and `LEVEL date [file:line]` prefixes removed.

`classify_plain` says what a line means the plain way: each gate word, then each signature, tried in turn.
`classify` gives the same event, faster: one search for the gates' words turns most lines away, the prefix is
parsed once, and only the signatures whose needle's rarest character the line holds are tried
(launcher/vllm/line_gate.py; tests/unit/vllm/test_fast_path.py holds the two to the same events).

Only vLLM's own records can carry an event. uvicorn's access log prints request paths as the
client sent them, and vLLM's request log prints prompts: anyone who can reach the port writes
those lines, so they never match a signature (`GET /health?x=EngineDeadError` must not restart
vLLM). A failure signature also ignores INFO and WARNING records unless vLLM really reports that
failure at INFO (zero KV blocks, negative KV memory).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import MappingProxyType

from launcher.vllm.line_gate import WordIndex, any_of
from launcher.vllm.signature_kit import EXCEPTION_LINE, new_event
from launcher.vllm.signatures import SIGNATURES, EventKind, LogEvent, Signature

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_OUTER = re.compile(
    r"^\s*(?:`{1,3})?(?:>\s?)?"  # a Markdown code span or quote of a pasted log
    r"(?:│\s?)?"  # a box a terminal UI (k9s, Lens) draws around each line
    r"(?:[\w.-]+\s*\|\s)?"  # docker-compose: "vllm-1  | "
    r"(?:[\w.-]{1,128}\.(?:out|log|txt|err):(?:\d+:)?)?"  # grep over log files: "node0.out:", "run.log:12:"
    r"(?:\[?\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\]?\s+)?"  # docker logs -t, ISO, [bracketed]
    r"(?:\|\s(?!(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \| ))?"  # a log viewer's column: `2026-05-01 21:17:45.024 | `
    r"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.-]{1,64} [\w.@-]{1,128}(?:\[\d{1,10}\])?: )?"  # journalctl, syslog
    r"(?:vLLM STD(?:OUT|ERR): |std(?:out|err) [FP] )?"  # a wrapper's stream label (Unsloth), CRI's (containerd)
    r"(?:\|\s(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \| \w+ \| )?"  # FastChat's logger: `| ERROR | stderr | `
    r"(?:\[rank\d+\]:\s?)?"  # torch.distributed
    # vLLM's process prefix (two when workers' lines interleave; Ray adds the node's address: `(RayWorkerWrapper
    # pid=13269, ip=192.168.23.9)`), in its colour codes where a paste lost their ESC: `[1;36m(EngineCore pid=1)[0;0m`
    r"(?:(?:\[[\d;]{1,12}m)?\((?P<proc>[^)]{0,80}?) pid=(?P<pid>\d+)(?:, ip=[\w.:-]{1,64})?\)(?:\[[\d;]{1,12}m)?\s+)*"
    r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)(?: (?:\d\d-\d\d(?: \d\d:\d\d:\d\d(?:[.,]\d+)?)?|\d+))? "
    r"\[?[^\]\s]+:\d+\] ?"  # `ERROR 05-12 10:00:00 [file.py:12]`, `ERROR 56542 [file.py:12]`, `ERROR [file.py:12]`
    r"|(?P<ulevel>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+)?"  # vLLM logger or uvicorn
)
# uvicorn's access log: `127.0.0.1:54321 - "GET /path?query HTTP/1.1" 200 OK` (the path is the client's).
_ACCESS = re.compile(r'^\s*\S+ - "[A-Z]+ ')
# vLLM's request log (--enable-log-requests / --enable-log-outputs): prompts and outputs are the client's.
_REQUEST_VERBS = ("Received request", "Generated response", "Added request", "Finished request", "Aborted request")
_REQUEST_LOG = re.compile(r"^\s*(?:" + "|".join(_REQUEST_VERBS) + r"|Request \S+ (?:details|JSON body|prompt|params))\b")
_UNMATCHED = 1024  # messages remembered as matching no signature, per table; emptied when full
_MAX_LINE = 64 * 1024  # vLLM's longest real lines (argument dumps) are a few KiB; beyond this only the head counts
_QUIET_SIGNATURES = tuple(sig for sig in SIGNATURES if sig.kind != EventKind.FAILURE)
# Most lines of a log carry nothing; two gates turn them away before any signature is tried.
# - A failure line (troubled) holds an error word, or one of the few failure phrases vLLM prints without one.
# - A capacity, progress or readiness line holds one of the quiet words.
# tests/unit/vllm/test_classify.py checks, on every real and test line, that the gates change nothing:
# classify() gives what trying every signature on every line gives.
# `.exc.`: the exceptions module of torch._dynamo (`torch._dynamo.exc.BackendCompilerFailed`), whose types hold no other.
_TROUBLE = ("rror", "RROR", "RITICAL", "xception", "failed", "unexpectedly", "fatal", "Reason:", "Interrupt", ".exc.")
# A gate word is found at its rarest character (line_gate): where vLLM always prints a longer form of a word, the form
# with the rarer character stands here (`(core dumped`: a `(`, where `core dumped` had an `m`; `compile takes` and
# `compile took`: a `k`, where `.compile t` had an `m`).
_FAILURE_WORDS = (
    "KV cache memory: -", "KV Cache is -", "GPU blocks: 0,", "The model's max seq len", "To serve at least",
    "Cannot access gated", "Access to model", "Free memory on device", "CUDA out of memory", "HIP out of memory",
    "NPU out of memory", "Engine iteration timed out", "MQLLMEngine is already dead", "Engine process (pid",
    "Worker proc", "Engine core proc", "library but it was not found", "(core dumped", "*** SIG", "Memory access fault by GPU",
    "exceeds the total number of available GPUs", "Watchdog caught")
_FAILURE_GATE = re.compile(r"# \w+ blocks: 0,|" + "|".join(map(re.escape, _FAILURE_WORDS)))
_QUIET_WORDS = (
    "KV cache size:", "KV cache memory", "KV Cache is", "KV cache on node", "KV cache is needed", "Maximum concurrency",
    "# ", "GPU blocks", "Model loading", "Loading", "LLM engine", "API server version", "vLLM server version", "\u2588",
    "Starting", "Memory profiling", "Capturing", "Graph capturing", "Warming", "Compil", "Download", "Fetching",
    "Application startup", "Shutting down", "[shutdown] API", "Uvicorn running", "Free memory", "vLLM instance",
    "GiB kv_cache_size", "GiB, kv_cache_size", "maximum model length is", "{'model", "Namespace(", "_seq_len=",
    "_gpu_blocks is", "Failed to extract", "The following fields", "-default args", " in world size",
    "Exception in ASGI", "Directly load", "compile takes", "compile took", "(profile, create", "memory broadcast", "Desired GPU",
    "The current --gpu", "Initial free memory", "total_hbm_limit", "total capacity of", "Processed prompts", "GiB total",
    "Using max model len", "vLLM Version", "vLLM version:", "before program exit")
_QUIET_GATE = re.compile("|".join(map(re.escape, _QUIET_WORDS)))
# The same gates, each one search that stops only at the rare characters of a line (launcher/vllm/line_gate.py).
# `rror` has no rare character: a plain `in` finds it faster. "# " stands for `# \w+ blocks: 0,` too.
_BLOCKS_ZERO = re.compile(r"# \w+ blocks: 0,")
_QUIET_FAST = any_of(_QUIET_WORDS)
# Words of a traceback that hold no gate word. Diagnoser.feed reads the lines that hold one or an error word.
# (vLLM's worker names the method it ran as "Exception in worker … while processing method X": `while` gives the word
# a rarer character to be found by than `h`, which most lines hold.)
TRACEBACK_WORDS = ('File "', "while processing method", "cuda.graph(", "Traceback (most recent call last)")
# Both gates, and the traceback words, in one search: a line with none of them ends after it. A trouble word found
# first (`lastgroup` t…) makes the line troubled; after a quiet or a traceback word, only the rest can be.
_FIRST_GATE = any_of(_QUIET_WORDS, marked={"t": (*_TROUBLE[1:], *_FAILURE_WORDS), "b": TRACEBACK_WORDS})
# The words every client line holds (`is_client_text`'s two patterns begin with one of them): a line with none of
# them is no request. The first gate finds them too (r…), so the request check costs most lines nothing; after a
# request word that was no request, the first gate goes on from there (a word of its own may share that place).
_REQUEST_WORDS = (' - "', *_REQUEST_VERBS, "Request ")
_REQUEST_GATE = any_of(_REQUEST_WORDS)
_ENTRY_GATE = any_of(_QUIET_WORDS, marked={"t": (*_TROUBLE[1:], *_FAILURE_WORDS), "b": TRACEBACK_WORDS,
                                           "r": _REQUEST_WORDS})
# The rest of a line: a trouble word (t…), or a traceback word that the fold wants to know of.
_TROUBLE_FAST = any_of(TRACEBACK_WORDS, marked={"t": (*_TROUBLE[1:], *_FAILURE_WORDS)})
# vLLM's own retry of a Hub lookup (`with_retry`): `<what>: <error>, retrying 1 of 2`. The call is tried
# again, so the error it names is not the attempt's end (the last try, if it fails, prints no such tail).
_RETRYING = re.compile(r", retrying \d+ of \d+\s*$")
# Errors vLLM logs and then swallows, in every release that prints them: try_get_safetensors_metadata
# returns None after its last try (vllm/transformers_utils/config.py), and the start-up goes on.
_SWALLOWED = ("Error retrieving safetensors",)
# vLLM's logger names the module a record comes from: these handle requests, and only requests.
_REQUEST_PATH = re.compile(r"[\[ ](?:serving_\w+|\w+_tool_parser|\w+_reasoning_parser)\.py:\d+\]")
_QUIET_LEVELS = frozenset({"DEBUG", "INFO", "WARNING"})
_REQUEST = LogEvent(EventKind.REQUEST, "")
_EXCEPTION_KIND = EventKind.EXCEPTION
_Parsed = tuple[str | None, int | None, str | None, str]  # a line's process, pid, level and message
_SOURCE_LINES = ("raise ", 'File "', "assert ")


def normalize(line: str) -> tuple[str | None, str | None, str]:
    """(process name, level, message) of a raw line, with prefixes and escapes removed."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:
        pieces = [piece for piece in line.split("\r") if piece.strip()]
        line = pieces[-1] if pieces else ""
    line = line.rstrip("\n")
    match = _OUTER.match(line)
    if match is None or match.end() == 0:
        return None, None, line
    return match.group("proc"), match.group("level") or match.group("ulevel"), line[match.end():]


def process_of(line: str) -> tuple[str | None, int | None]:
    """vLLM's process prefix of a raw line, `(Worker_TP1 pid=42)`, as (name, pid)."""
    match = _OUTER.match(_ANSI.sub("", line) if "\x1b" in line else line)
    if match is None or match.group("pid") is None:
        return None, None
    return match.group("proc"), int(match.group("pid"))


def is_client_text(message: str) -> bool:
    """An access-log or request-log record: its text is whatever a client sent."""
    return _ACCESS.match(message) is not None or _REQUEST_LOG.match(message) is not None


def classify(line: str) -> LogEvent | None:
    """The event one raw log line carries, or None for the many lines that say nothing we use. Never raises."""
    return read_line(line)[0]


def read_line(line: str) -> tuple[LogEvent | None, bool]:
    """`classify(line)`, and False where the line holds no word of TRACEBACK_WORDS and no error word (`RROR`,
    `RITICAL`, `xception`), or is a client's request (its words are the client's): the fold's own look at a line's
    traceback and error words can skip it. Never raises: a malformed number or an odd line is no event, and the pump
    goes on.

    The same event as `classify_plain`, read in the order that turns most lines away soonest: one search for every
    gate's words (a line with none ends there), the request check only where a request's words stand."""
    try:
        if len(line) > _MAX_LINE:
            line = line[:_MAX_LINE]
        first = _ENTRY_GATE.search(line)
        if first is not None:
            request = first.lastgroup is not None and first.lastgroup[0] == "r"
            # Every request word holds one of these three (a plain `in` each costs less than a search).
            if (request or ' - "' in line or "equest" in line or "esponse" in line) and is_client_text(normalize(line)[2]):
                return _REQUEST, False  # a client's request reached a serving vLLM; its text carries nothing
            if request:  # no request after all: the first gate word from there on, if any
                first = _FIRST_GATE.search(line, first.start())
        if first is None:
            if "rror" not in line:
                return None, False  # no word of any gate: most lines of a log end here, after one search
            troubled, quiet, words = True, False, True
        elif first.lastgroup is not None and first.lastgroup[0] == "t":
            troubled = quiet = words = True  # quiet: not known, and only asked where a retry undoes the trouble
        else:  # a quiet or a traceback word first: a trouble word stands after it, if anywhere
            words = first.lastgroup is not None
            found = _TROUBLE_FAST.search(line, first.start() + 1)
            while found is not None and found.lastgroup is None:  # a traceback word (the search finds them too)
                words = True
                found = _TROUBLE_FAST.search(line, found.start() + 1)
            troubled = found is not None or "rror" in line or ("# " in line and _BLOCKS_ZERO.search(line) is not None)
            quiet = first.lastgroup is None or _QUIET_FAST.search(line, first.start()) is not None
            words = words or troubled  # an untroubled line holds no error word, only traceback words can stand
        if troubled and "retrying" in line and _RETRYING.search(line) is not None:
            troubled = False
            quiet = _QUIET_FAST.search(line) is not None
        if not troubled:
            # The line is parsed only when a needle is in it (most quiet lines are progress bars): `_first_match`.
            return (_first_match(line, _QUIET_TABLE, None) if quiet else None), words
        parsed = _parse(line)
        if parsed[3].lstrip().startswith(_SOURCE_LINES):
            return None, True  # traceback source lines repeat the message that follows them
        # A failure that vLLM does not report at INFO or WARNING is skipped on such a record: only the rest are tried.
        event = _first_match(line, _QUIET_LEVEL_TABLE if parsed[2] in _QUIET_LEVELS else _TABLE, parsed)
        if event is not None:
            return event, True
        proc, pid, level, message = parsed
        if level in ("ERROR", "CRITICAL") and _REQUEST_PATH.search(line, 0, 400) is not None:
            return LogEvent(EventKind.SERVING, message.lstrip(), proc=proc, pid=pid), True  # a request's error (`_match`)
        return _exception_event(proc, pid, level, message.lstrip()), True
    except (ValueError, TypeError, IndexError, KeyError, OverflowError, re.error):
        return None, True


def _first_match(line: str, table: _Table, parsed: _Parsed | None) -> LogEvent | None:
    """The first signature of the table whose needle is in the raw line and whose pattern finds the message. The
    line is parsed at its first needle (`parsed`: already); a traceback source line has no event."""
    rows = table.rows
    proc: str | None = None
    pid: int | None = None
    message = ""
    stripped: str | None = None
    # A parsed line's needles are looked for in its message only: a pattern finds the message, so a needle that stands
    # only in the prefix (`[error_handler.py:12]`) names no signature that can match, and long prefixes cost nothing.
    start = len(line) - len(parsed[3]) if parsed is not None and line.endswith(parsed[3]) else 0
    # So a parsed line's answer is its message's: a message that matched nothing (a traceback's lines, which every
    # rank prints, and the engine prints twice) matches nothing again, whatever the prefix before it.
    if start and parsed is not None and parsed[3] in table.unmatched:
        return None
    for index in table.needles.candidates(line, start):
        needle, pattern, sig, failure = rows[index]
        if needle not in line:
            continue
        if stripped is None:
            proc, pid, _, message = parsed or _parse(line)
            stripped = message.lstrip()
            if parsed is None and stripped.startswith(_SOURCE_LINES):
                return None
        if failure and stripped.startswith(_SWALLOWED):
            continue
        found = pattern.search(message)
        if found:
            values = sig.convert(found.groupdict()) if sig.convert else sig.values
            return new_event(sig.kind, stripped, values, sig.failure, sig.reason, sig.fatal, proc, pid)
    if start and parsed is not None:
        if len(table.unmatched) >= _UNMATCHED:
            table.unmatched.clear()
        table.unmatched.add(parsed[3])
    return None


def _parse(line: str) -> _Parsed:
    """`normalize(line)` as (process, pid, level, message): the pid `process_of` reads, from the same match."""
    if "\r" in line or "\n" in line:  # normalize reads the last piece, process_of the whole line
        proc, level, message = normalize(line)
        return proc, process_of(line)[1] if proc else None, level, message
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    match = _OUTER.match(line)
    if match is None or not match.end():
        return None, None, None, line
    end = match.end()
    proc, pid, level, ulevel = match.group("proc", "pid", "level", "ulevel")
    return proc, int(pid) if proc else None, level or ulevel, line[end:]


class _Table:
    """Signatures in the table's order as (needle, pattern, signature, is a failure), and the index of their needles:
    a line's few candidates are found in one pass, with no lookup per signature."""

    def __init__(self, signatures: Iterable[Signature]) -> None:
        self.rows = tuple((sig.needle, sig.pattern, sig, sig.kind == EventKind.FAILURE) for sig in signatures)
        self.needles = WordIndex([row[0] for row in self.rows])
        self.unmatched: set[str] = set()  # messages of parsed lines that no signature matched (bounded: _UNMATCHED)


_TABLE = _Table(SIGNATURES)
_QUIET_TABLE = _Table(_QUIET_SIGNATURES)
_QUIET_LEVEL_TABLE = _Table(sig for sig in SIGNATURES if sig.kind != EventKind.FAILURE or sig.any_level)


def classify_plain(line: str) -> LogEvent | None:
    """`classify` as plainly as it can be written: each gate word, then each signature, tried in turn. The
    reference of tests/unit/vllm/test_fast_path.py and of benchmarks/classifier.py; `classify` gives the same."""
    try:
        return _classify_plain(line[:_MAX_LINE])
    except (ValueError, TypeError, IndexError, KeyError, OverflowError, re.error):
        return None


def _classify_plain(line: str) -> LogEvent | None:
    if _REQUEST_GATE.search(line) is not None and is_client_text(normalize(line)[2]):
        return _REQUEST  # a client's request (access or request log) reached a serving vLLM; its text carries nothing
    troubled = _troubled(line) and not ("retrying" in line and _RETRYING.search(line) is not None)
    if not troubled and _QUIET_GATE.search(line) is None:
        return None
    return _match(line, SIGNATURES if troubled else _QUIET_SIGNATURES, troubled)


def _match(line: str, signatures: Iterable[Signature], troubled: bool) -> LogEvent | None:
    proc = level = message = stripped = None
    for sig in signatures:
        if sig.needle not in line:  # cheap test on the raw line before any regex
            continue
        if stripped is None:
            proc, level, message = normalize(line)
            stripped = message.lstrip()
            if stripped.startswith(_SOURCE_LINES):
                return None  # traceback source lines repeat the message that follows them
        if sig.kind == EventKind.FAILURE and ((level in _QUIET_LEVELS and not sig.any_level) or stripped.startswith(_SWALLOWED)):
            continue
        found = sig.pattern.search(message or "")
        if found:
            values = sig.convert(found.groupdict()) if sig.convert else sig.values
            return LogEvent(sig.kind, stripped, values, sig.failure, sig.reason, sig.fatal, proc,
                            process_of(line)[1] if proc else None)
    if not troubled:
        return None
    if stripped is None:
        proc, level, message = normalize(line)
        stripped = message.lstrip()
    pid = process_of(line)[1] if proc else None
    if level in ("ERROR", "CRITICAL") and _REQUEST_PATH.search(line, 0, 400) is not None \
            and not stripped.startswith(_SOURCE_LINES):
        # Logged by a module that only runs for a request: one request's error on a server that serves.
        return LogEvent(EventKind.SERVING, stripped, proc=proc, pid=pid)
    return _exception_event(proc, pid, level, stripped)


def classify_every_signature(line: str) -> LogEvent | None:
    """`classify` without its gates: every signature tried on the line (for tests of the gates)."""
    if _REQUEST_GATE.search(line) is not None and is_client_text(normalize(line)[2]):
        return _REQUEST
    if "retrying" in line and _RETRYING.search(line) is not None:
        return _match(line[:_MAX_LINE], _QUIET_SIGNATURES, False)
    return _match(line[:_MAX_LINE], SIGNATURES, True)


def _troubled(line: str) -> bool:
    for word in _TROUBLE:
        if word in line:
            return True
    return _FAILURE_GATE.search(line) is not None


def _exception_event(proc: str | None, pid: int | None, level: str | None, stripped: str) -> LogEvent | None:
    """An exception line (`ValueError: …`): the root cause when no signature matched."""
    if level in (None, "ERROR", "CRITICAL") and not stripped.startswith(_SOURCE_LINES):
        found = EXCEPTION_LINE.match(stripped)
        if found:
            return new_event(_EXCEPTION_KIND, stripped, MappingProxyType({"type": found.group("type")}), None, None, None,
                             proc, pid)
    return None
