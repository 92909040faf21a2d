"""The fault-injection suite: each case injects one fault into a running `up` and measures the recovery.

Every case asserts the exit code, that no process of the tree is left (the `launch` fixture), that there is
no restart loop, and that state and logs are intact. Recovery times are printed at the end of the run
(docs/failures.md's fault matrix quotes them).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

RECOVERY: dict[str, float] = {}


@pytest.fixture
def recovery(request: pytest.FixtureRequest) -> Iterator[dict[str, float]]:
    """Record {fault: seconds} for the matrix."""
    found: dict[str, float] = {}
    yield found
    RECOVERY.update(found)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not RECOVERY:
        return
    terminalreporter.section("fault matrix: measured recovery (seconds)")
    for fault, seconds in sorted(RECOVERY.items()):
        terminalreporter.write_line(f"{seconds:7.2f}  {fault}")
