"""Write tests/data/logs/real/INDEX.md from index.yaml (the expectations are read from the logs and their
threads; this only lays them out as a table). `--check` exits 1 when INDEX.md is out of date.

    .venv/bin/python scripts/corpus_index.py [--check]
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generated_file import write_or_check

REAL = Path(__file__).resolve().parent.parent / "tests" / "data" / "logs" / "real"


def cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def render(entries: list[dict[str, Any]]) -> str:
    classes = Counter(e["class"] for e in entries)
    sources = {e["source"] for e in entries}
    lines = [
        "# Real vLLM logs",
        "",
        "Verbatim logs and excerpts that people posted (issues, discussions, committed log files). Each file's first",
        "line is `# source: <url>`; the rest is the text as posted, prefixes, colours, wrapping and trims included.",
        "The expected class, reason and numbers were read from the log and its thread, never from the classifier.",
        "`tests/unit/vllm/test_real_logs.py` requires all of them, except the known misses (`miss:` in the index: an",
        "expected failure, strict, until the classifier is fixed); `benchmarks/diagnose_accuracy.py` prints the table.",
        "`hang: true`: the thread says the start-up hung, and the log ends with no error line. No line tells such a",
        "log from one cut while vLLM starts, so the diagnosis must read it as still starting (no failure, server",
        "`starting`) or as stalled (`unknown`), never as serving: `up` ends a hang by time (`launcher.startup_stall`,",
        "`launcher.startup_timeout`), not by a line.",
        "This file is generated from `index.yaml` by `scripts/corpus_index.py`.",
        "",
        f"{len(entries)} logs from {len(sources)} sources: "
        + ", ".join(f"{name} {count}" for name, count in sorted(classes.items())) + ".",
        "",
        "| log | source | vLLM (how known) | GPU | expected | numbers | traps |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        version = f"{e.get('vllm_version') or '?'} ({e.get('version_how') or 'unknown'})"
        expected = e["class"] + (f" / {e['reason']}" if e.get("reason") else "")
        if e.get("hang"):
            expected += " (hang: still starting, or stalled)"
        if e.get("miss"):
            expected += f" (known miss: {e['miss']})"
        numbers = ", ".join(f"{k}={v}" for k, v in (e.get("numbers") or {}).items())
        lines.append(f"| {cell(e['file'])} | {cell(e['source'])} | {cell(version)} | {cell(e.get('gpu'))} | "
                     f"{cell(expected)} | {cell(numbers)} | {cell(e.get('traps'))} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    entries = yaml.safe_load((REAL / "index.yaml").read_text(encoding="utf-8"))
    text = render(entries)
    return write_or_check(REAL / "INDEX.md", text, "scripts/corpus_index.py")


if __name__ == "__main__":
    sys.exit(main())
