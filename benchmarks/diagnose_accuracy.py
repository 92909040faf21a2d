"""How often the diagnosis gets a real log fully right: class, reason, numbers and root cause, per class.

Input: the corpus of real logs people posted (tests/data/logs/real/, INDEX.md there). The expected
answers were read from each log and its thread. A successful start-up read as a failure is counted
on its own line: the launcher would kill a server that works. The unit test requires 100 %.

    .venv/bin/python benchmarks/diagnose_accuracy.py [--batch NAME] [--verbose]

--batch NAME scores only the index entries whose `batch` is NAME (a set of logs gathered after the
classifier was written, scored before anything is fitted to it). --verbose lists what is wrong with
each log, the successful start-ups read as failures and the failures read as successes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.corpus import corpus  # noqa: E402
from tests.corpus_score import score  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--batch", help="score only the index entries whose `batch` is this name")
    parser.add_argument("--verbose", action="store_true", help="list what is wrong with each log")
    args = parser.parse_args()
    logs = corpus()
    if args.batch is not None:
        logs = [log for log in logs if log.expected.get("batch") == args.batch]
        if not logs:
            print(f"no index entry has batch: {args.batch}", file=sys.stderr)
            return 2
    sources = {log.source for log in logs}
    scope = f" (batch {args.batch})" if args.batch is not None else ""
    print(f"real logs{scope}: {len(logs)} from {len(sources)} sources")
    result = score(logs)
    print(result.table())
    if args.verbose:
        print(f"failures read as successful start-ups: {len(result.missed)}")
        print("successful start-ups read as failures (the launcher would kill a working server):")
        for file in result.false_failures:
            print(f"  {file}: {'; '.join(result.wrong[file])}")
        print("failures read as successful start-ups (the launcher would wait on a dead server):")
        for file in result.missed:
            print(f"  {file}: {'; '.join(result.wrong[file])}")
        print("every log not fully right:")
        for file, problems in sorted(result.wrong.items()):
            print(f"  {file}: {'; '.join(problems)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
