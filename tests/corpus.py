"""The corpus of real vLLM logs (tests/data/logs/real/) and how a diagnosis is scored against it.

Used by the accuracy test (tests/unit/vllm/test_real_logs.py) and benchmarks/diagnose_accuracy.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from launcher.vllm.classify import normalize
from launcher.vllm.diagnose import diagnose_lines
from launcher.vllm.diagnosis import Diagnosis
from launcher.vllm.log_export import printed_lines
from launcher.vllm.signatures import OK

REAL = Path(__file__).resolve().parent / "data" / "logs" / "real"


@dataclass(frozen=True)
class RealLog:
    file: str
    source: str
    expected: dict[str, Any]  # the index entry

    @property
    def path(self) -> Path:
        return REAL / self.file

    @property
    def miss(self) -> str | None:
        """Why the diagnosis is known to get this log wrong (index field `miss:`), or None.

        A known miss is scored as wrong by the benchmark, and its test is an expected failure
        (strict): once the classifier gets the log right the test passes unexpectedly and
        fails, so the marker has to be removed with the fix.
        """
        why = self.expected.get("miss")
        return str(why) if why else None

    def lines(self) -> Iterator[str]:
        with self.path.open(encoding="utf-8", errors="replace", newline="") as handle:
            text = handle.read()
        first, _, rest = text.partition("\n")
        if not first.startswith("# source: "):
            raise ValueError(f"{self.file}: the first line must be '# source: <url>'")
        # Keep `\r` inside lines (progress bars, vLLM's multi-line records) as a pipe would deliver them. A logging
        # service's JSON export is read as `vllm-launch diagnose` reads it: the lines its entries hold.
        yield from printed_lines(rest.split("\n"))


def corpus() -> list[RealLog]:
    entries = yaml.safe_load((REAL / "index.yaml").read_text(encoding="utf-8"))
    return [RealLog(e["file"], e["source"], e) for e in entries]


def _same(expected: Any, got: Any) -> bool:
    if isinstance(expected, float) or isinstance(got, float):
        return isinstance(got, int | float) and math.isclose(float(expected), float(got), rel_tol=1e-6)
    return bool(expected == got)


def mismatches(log: RealLog, diagnosis: Diagnosis | None = None) -> list[str]:
    """What the diagnosis gets wrong about this log (empty: class, reason, numbers and root cause all right)."""
    d = diagnosis or diagnose_lines(log.lines())
    want = log.expected
    wrong = []
    if want.get("hang") and d.cls == OK:
        # A start-up the thread says hung, whose log ends with no error line: from the log alone it is still
        # starting (up ends such an attempt at launcher.startup_stall or startup_timeout); only "serving" is wrong.
        if d.state != "starting":
            wrong.append(f"server {d.state} (expected starting: the log ends before the server answered)")
        want = {**want, "class": OK, "reason": None}
    if d.cls != want["class"]:
        wrong.append(f"class {d.cls} (expected {want['class']})")
    if d.reason != want.get("reason"):
        wrong.append(f"reason {d.reason} (expected {want.get('reason')})")
    for key, value in (want.get("numbers") or {}).items():
        if not _same(value, d.numbers.get(key)):
            wrong.append(f"{key} {d.numbers.get(key)!r} (expected {value!r})")
    if want["class"] != OK and d.cls == want["class"]:
        expected_line = normalize(str(want.get("root_cause") or ""))[2].strip()
        if expected_line.endswith(("...", "…")):  # the index trims long lines; the start must match
            expected_line = expected_line.rstrip(".… ")
        got = (d.root_cause or "").strip()
        if not got or (got not in expected_line and expected_line not in got):
            wrong.append(f"root cause {got[:120]!r} (expected {expected_line[:120]!r})")
    return wrong
