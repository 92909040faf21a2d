"""How often the diagnosis gets a real log fully right: class, reason, numbers and root cause, per class.

Input: the corpus of real logs people posted (tests/data/logs/real/, INDEX.md there). The expected
answers were read from each log and its thread. A successful start-up read as a failure is counted
on its own line: the launcher would kill a server that works. The unit test requires 100 %.

    .venv/bin/python benchmarks/diagnose_accuracy.py [--verbose]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.corpus import corpus  # noqa: E402
from tests.corpus_score import score  # noqa: E402


def main() -> int:
    logs = corpus()
    sources = {log.source for log in logs}
    print(f"real logs: {len(logs)} from {len(sources)} sources")
    result = score()
    print(result.table())
    if "--verbose" in sys.argv[1:]:
        for file, problems in sorted(result.wrong.items()):
            print(f"  {file}: {'; '.join(problems)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
