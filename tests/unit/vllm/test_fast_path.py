"""classify() is classify_plain() read faster: the same event, to the byte, for every line.

classify() turns lines away with one search over the rare characters of all gate words, parses a line's prefix
once, and tries only the signatures whose needle's rarest character the line holds (launcher/vllm/line_gate.py).
classify_plain() tries each gate word and each signature in turn. Any line on which they differ is a bug of the
fast path: the corpus checks every real line, the generated lines mix the words the gates and needles look for
with the prefixes, levels and escapes that change how a line is read.
"""

from __future__ import annotations

from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.vllm.classify import (
    _FAILURE_WORDS,
    _QUIET_WORDS,
    _REQUEST,
    _TROUBLE,
    TRACEBACK_WORDS,
    classify,
    classify_plain,
    is_client_text,
    normalize,
    read_line,
)
from launcher.vllm.signatures import SIGNATURES
from tests.conftest import DATA


@cache
def known_lines() -> tuple[str, ...]:
    return tuple(line for path in sorted((DATA / "logs").rglob("*.log"))
                 for line in path.read_text(encoding="utf-8", errors="replace").split("\n"))


@cache
def event_lines() -> tuple[str, ...]:
    """One real line of each kind of event the corpus holds (and the exceptions, serving errors, client text)."""
    seen: dict[tuple[str, str | None], str] = {}
    for line in known_lines():
        event = classify_plain(line)
        if event is not None:
            seen.setdefault((event.kind, event.reason), line)
    return tuple(seen.values())


def same(line: str) -> bool:
    return repr(classify(line)) == repr(classify_plain(line))


def test_every_known_line_gives_the_plain_event() -> None:
    lines = known_lines()
    assert len(lines) > 5000
    events = sum(classify_plain(line) is not None for line in lines)
    assert events > 1000  # the comparison covers events, not only lines that carry none
    differ = [line[:200] for line in lines if not same(line)]
    assert not differ, differ[:5]


PREFIXES = ["", "(EngineCore_DP0 pid=42) ", "(Worker_TP1 pid=7) (EngineCore pid=6) ", "vllm-1  | ",
            "2025-10-15T00:08:35.839352074Z ", "[rank0]: ", "ERROR 11-29 15:43:46 [core.py:700] ",
            "INFO 11-29 15:43:46 [gpu_model_runner.py:1] ", "WARNING 05-12 10:00:00 [serving_chat.py:12] ",
            "CRITICAL [x.py:1] ", "DEBUG 56542 [a.py:3] ", "INFO:     ", "ERROR:    ", "\x1b[1;36m", "\x1b[0m", "\r",
            "\n", "  ", "> ", "`"]
WORDS = sorted({*(sig.needle for sig in SIGNATURES), *_TROUBLE, *_FAILURE_WORDS, *_QUIET_WORDS, "raise ", 'File "',
                "assert ", "Traceback (most recent call last)", ", retrying 1 of 2", ' - "GET /', "Received request ",
                "Error retrieving safetensors", "ValueError: ", "RuntimeError: ", "EngineDeadError", "pid=", ": ",
                "0", "12", "-3.5", " GiB", " tokens", "%|", "█"})
PIECES = st.one_of(st.sampled_from(PREFIXES), st.sampled_from(WORDS), st.text(max_size=6))


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PIECES, max_size=8))
def test_generated_lines_give_the_plain_event(pieces: list[str]) -> None:
    line = "".join(pieces)
    assert same(line), line


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_real_event_lines_cut_and_mixed_give_the_plain_event(data: st.DataObject) -> None:
    """A real line of each event, with pieces put in front, inside and behind it, and cut at any place."""
    line = data.draw(st.sampled_from(event_lines()))
    cut = data.draw(st.integers(0, len(line)))
    head = "".join(data.draw(st.lists(PIECES, max_size=3)))
    inside = "".join(data.draw(st.lists(PIECES, max_size=2)))
    tail = "".join(data.draw(st.lists(PIECES, max_size=3)))
    mixed = head + line[:cut] + inside + line[cut:] + tail
    assert same(mixed), mixed
    assert same(line[:cut]) and same(line[cut:])


def test_a_line_read_as_holding_no_traceback_word_holds_none() -> None:
    """Diagnoser.feed skips its look for traceback and error words where read_line says the line holds none."""
    words = (*TRACEBACK_WORDS, "The above exception", "During handling of the above exception", "ERROR", "CRITICAL")
    lines = [*known_lines(), *(f"x {word} y" for word in words)]
    missed = [line[:200] for line in lines if any(word in line for word in words) and not read_line(line)[1]]
    assert not missed, missed[:5]
    assert sum(not read_line(line)[1] for line in lines) > len(lines) // 3  # and most lines are skipped
    assert all(read_line(line)[0] == classify(line) for line in lines[:3000])


def test_every_client_line_holds_a_request_word() -> None:
    """The gates look for a client's text only where one of _REQUEST_WORDS stands: every form `is_client_text`
    knows begins with one, prefixed or not, and a prefix that holds a gate word of its own hides none of them."""
    messages = ['127.0.0.1:35806 - "GET /health HTTP/1.1" 200 OK', "Received request chatcmpl-1: prompt: 'x'",
                "Received request: prompt: 'Traceback (most recent call last)'", "Generated response cmpl-1: output: 'y'",
                "Added request cmpl-2.", "Finished request cmpl-2.", "Aborted request cmpl-3.",
                "Request req-4 details: prompt: 'CUDA out of memory'"]
    prefixes = ["", "INFO:     ", "(APIServer pid=1) INFO 11-29 15:41:18 [logger.py:41] ",
                "vllm-failed-1  | (APIServer pid=1) INFO 11-29 15:41:18 [logger.py:41] "]
    for line in (prefix + message for prefix in prefixes for message in messages):
        assert is_client_text(normalize(line)[2]), line
        assert (classify(line), classify_plain(line)) == (_REQUEST, _REQUEST), line
        assert read_line(line)[1] is False, line  # its words are the client's: no traceback or error word read


def test_a_message_that_matched_nothing_is_remembered_and_matches_nothing_under_another_prefix() -> None:
    from launcher.vllm import classify as classify_module

    body = "    return func(*args, **kwargs)"
    first = f"(Worker_TP0 pid=11) ERROR 12-01 10:00:00 [multiproc_executor.py:1] {body}"
    again = f"(Worker_TP1 pid=12) ERROR 12-01 10:00:01 [multiproc_executor.py:1] {body}"
    assert classify(first) is None and body in classify_module._TABLE.unmatched
    assert classify(again) is None
    # A message that matches stays an event under any prefix (only a message that matched nothing is remembered).
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    for pid in (11, 12):
        event = classify(f"(Worker_TP0 pid={pid}) ERROR 12-01 10:00:00 [multiproc_executor.py:1] {oom}")
        assert event is not None and event.pid == pid and event.failure == "startup_memory"
