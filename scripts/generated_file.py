"""Write a generated file, or with --check say (exit 1) that the committed copy is out of date."""

from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(target: Path, text: str, generator: str) -> int:
    if "--check" in sys.argv[1:]:
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            print(f"{target.name} is out of date: run {generator}", file=sys.stderr)
            return 1
        return 0
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}")
    return 0
