"""How often the diagnosis gets a real log fully right: class, reason, numbers and root cause, per class.

Input: the corpus of real logs people posted (tests/data/logs/real/, INDEX.md there). The expected
answers were read from each log and its thread. A successful start-up read as a failure is counted
on its own line: the launcher would kill a server that works. The unit test requires 100 %.

    .venv/bin/python benchmarks/diagnose_accuracy.py [--verbose] [--batch NAME]

--batch NAME scores only the entries whose `batch:` is NAME (the logs added together).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.corpus import corpus  # noqa: E402
from tests.corpus_score import Score  # noqa: E402


def main() -> int:
    args = sys.argv[1:]
    batch = None
    if "--batch" in args:
        at = args.index("--batch") + 1
        if at >= len(args):
            print("diagnose_accuracy.py: --batch needs a NAME, the `batch:` value of entries in index.yaml", file=sys.stderr)
            return 2
        batch = args[at]
    logs = [log for log in corpus() if batch is None or log.expected.get("batch") == batch]
    if not logs:
        print(f"diagnose_accuracy.py: no entry of index.yaml has batch: {batch}", file=sys.stderr)
        return 2
    sources = {log.source for log in logs}
    print(f"real logs: {len(logs)} from {len(sources)} sources" + (f" (batch {batch})" if batch else ""))
    result = Score()
    for log in logs:
        result.add(log)
    print(result.table())
    if "--verbose" in sys.argv[1:]:
        for file, problems in sorted(result.wrong.items()):
            print(f"  {file}: {'; '.join(problems)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
