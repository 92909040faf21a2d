"""The launcher's own log lines: JSON for journald and collectors, readable on a terminal.

A small, stable vocabulary: preflight.*, attempt.started, attempt.failed,
ladder.step, ready, restart.*, shutdown.*. vLLM's own lines are not re-encoded:
they go to the log file and the console as they are, after a `vllm |` prefix.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import TextIO, cast

import structlog

_console_lock = threading.Lock()


def colour_wanted(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """A terminal gets colour; NO_COLOR (no-color.org) turns it off, FORCE_COLOR (force-color.org) on where
    there is no terminal (a CI log that renders ANSI). Either counts when set to anything but the empty string;
    with both, no colour."""
    if environ.get("NO_COLOR"):
        return False
    return bool(environ.get("FORCE_COLOR")) or stream.isatty()


def configure(log_format: str = "auto", stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> None:
    """JSON when the stream is not a terminal (or asked for), the console renderer otherwise."""
    stream = stream or sys.stdout
    environ = os.environ if environ is None else environ
    json_mode = log_format == "json" or (log_format == "auto" and not stream.isatty())
    # JSON: a traceback as fields (type, message, frames) a collector can query, not one preformatted string.
    renderers: list[structlog.typing.Processor] = (
        [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()] if json_mode
        else [structlog.dev.ConsoleRenderer(colors=colour_wanted(stream, environ))])
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *renderers,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        # WriteLogger writes message and newline in one call, so the pump's lines cannot land in between.
        logger_factory=structlog.WriteLoggerFactory(file=cast(TextIO, _LockedStream(stream))),
        cache_logger_on_first_use=False,
    )


class _LockedStream:
    """Serialises writes from the launcher and the log pump so lines never interleave."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        with _console_lock:
            return self.stream.write(text)

    def flush(self) -> None:
        with _console_lock:
            self.stream.flush()


def echo_summary(text: str, stream: TextIO | None = None) -> None:
    """The one-screen READY summary, for the operator at a terminal."""
    stream = stream or sys.stdout
    with _console_lock:
        stream.write(text + "\n")
        stream.flush()


def echo_child_line(line: str, stream: TextIO | None = None) -> None:
    """One vLLM line on the console, prefixed so it is told apart from the launcher's own."""
    stream = stream or sys.stdout
    with _console_lock:
        try:
            stream.write(f"vllm | {line}\n")
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed console must not stop the log pump
