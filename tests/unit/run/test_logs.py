"""The launcher's own log lines: colour as NO_COLOR and FORCE_COLOR say, tracebacks as fields in JSON."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
import structlog

from launcher.run import logs

ANSI = "\x1b["


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()


def console_line(stream: io.StringIO, environ: dict[str, str]) -> str:
    logs.configure("console", stream, environ)
    structlog.get_logger("vllm_launch").warning("attempt.failed", failure="oom")
    return stream.getvalue()


@pytest.mark.parametrize(("terminal", "environ", "coloured"), [
    (True, {}, True),
    (False, {}, False),
    (True, {"NO_COLOR": "1"}, False),
    (True, {"NO_COLOR": ""}, True),  # set but empty: as if unset
    (False, {"FORCE_COLOR": "1"}, True),
    (False, {"FORCE_COLOR": ""}, False),
    (True, {"NO_COLOR": "1", "FORCE_COLOR": "1"}, False),
])
def test_colour_follows_the_terminal_no_color_and_force_color(terminal: bool, environ: dict[str, str],
                                                              coloured: bool) -> None:
    line = console_line(Terminal() if terminal else io.StringIO(), environ)
    assert "attempt.failed" in line and "failure" in line
    assert coloured == (ANSI in line)


def test_force_color_leaves_the_format_alone() -> None:
    """Off a terminal `auto` stays JSON (journald, collectors): FORCE_COLOR colours the console format only."""
    stream = io.StringIO()
    logs.configure("auto", stream, {"FORCE_COLOR": "1"})
    structlog.get_logger("vllm_launch").info("ready")
    assert "ready" == json.loads(stream.getvalue())["event"]


def test_a_json_traceback_is_structured() -> None:
    stream = io.StringIO()
    logs.configure("json", stream, {})
    try:
        {}["missing"]
    except KeyError:
        structlog.get_logger("vllm_launch").exception("supervisor.crashed")
    record = json.loads(stream.getvalue())
    [error] = record["exception"]
    assert ("KeyError", "'missing'") == (error["exc_type"], error["exc_value"])
    assert "test_a_json_traceback_is_structured" == error["frames"][-1]["name"]
    assert "exc_info" not in record
