"""Integration tier: real processes, signals, HTTP and sockets; the fake vllm replays real logs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.polling import poll_for
from tests.helpers.ports import free_port
from tests.integration.harness import Launcher


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many real healthy logs served on the first launch (tests/integration/test_healthy_replay.py)."""
    from tests.helpers.replay import HEALTHY, SERVED

    if SERVED:
        terminalreporter.write_line(f"healthy replay: {len(SERVED)} of {len(HEALTHY)} real healthy logs, from "
                                    f"{len(set(SERVED.values()))} sources, served on the first launch")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., Launcher]]:
    """Start `vllm-launch up`; afterwards, no process of the tree may be left (checked, then cleaned)."""
    started: list[Launcher] = []

    def start(profile_text: str, **kwargs: Any) -> Launcher:
        workdir = tmp_path / f"run{len(started)}"
        workdir.mkdir()
        launcher = Launcher(workdir, profile_text, **kwargs)
        started.append(launcher)
        return launcher

    yield start
    leftovers = []
    for launcher in started:
        try:
            if launcher.proc.poll() is not None:
                # the tree must already be gone: assert on the process table
                poll_for(lambda launcher=launcher: not launcher.our_processes(), 5,
                         "the fake vllm tree to be gone", launcher.output)
        except AssertionError as exc:
            leftovers.append(str(exc))
        finally:
            launcher.cleanup()
    assert not leftovers, leftovers
