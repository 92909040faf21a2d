"""Score the diagnosis against the real-log corpus: per class, the share with class, reason, numbers and root cause right."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from launcher.vllm.signatures import OK
from tests.corpus import RealLog, corpus, mismatches


@dataclass
class Score:
    total: Counter[str] = field(default_factory=Counter)
    right: Counter[str] = field(default_factory=Counter)
    wrong: dict[str, list[str]] = field(default_factory=dict)  # file → what is wrong
    false_failures: list[str] = field(default_factory=list)  # successful start-ups read as failures
    missed: list[str] = field(default_factory=list)  # failures read as successful start-ups

    def add(self, log: RealLog) -> None:
        cls = log.expected["class"]
        self.total[cls] += 1
        problems = mismatches(log)
        if problems:
            self.wrong[log.file] = problems
            if cls == OK and any(p.startswith("class ") for p in problems):
                self.false_failures.append(log.file)
            if cls != OK and any(p.startswith(f"class {OK} ") for p in problems):
                self.missed.append(log.file)
        else:
            self.right[cls] += 1

    def table(self) -> str:
        rows = [f"{'class':<18}{'logs':>6}{'right':>7}{'share':>9}"]
        for cls in sorted(self.total):
            rows.append(f"{cls:<18}{self.total[cls]:>6}{self.right[cls]:>7}{self.right[cls] / self.total[cls]:>9.1%}")
        all_total, all_right = sum(self.total.values()), sum(self.right.values())
        rows.append(f"{'all':<18}{all_total:>6}{all_right:>7}{all_right / all_total:>9.1%}")
        rows.append(f"successful start-ups read as failures: {len(self.false_failures)}")
        return "\n".join(rows)


def score(logs: Iterable[RealLog] | None = None) -> Score:
    """Score the given logs (default: the whole corpus)."""
    result = Score()
    for log in corpus() if logs is None else logs:
        result.add(log)
    return result
