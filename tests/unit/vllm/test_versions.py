"""The utilization vLLM runs with: the one written, else the version's default."""

from __future__ import annotations

import pytest

from launcher.vllm.versions import semantics


@pytest.mark.parametrize(("version", "written", "expected"), [
    ("0.32.0", None, 0.92),
    ("0.11.0", None, 0.9),
    ("0.32.0", 0.85, 0.85),
])
def test_utilization_is_the_written_one_else_the_default(version: str, written: float | None, expected: float) -> None:
    assert expected == semantics(version).utilization(written)
