"""A log exported by a logging service, read as the lines vLLM printed.

Cloud logging exports a container's output as JSON: a list of entries (`gcloud logging read --format=json`), or one
entry per line, each with the printed line in `textPayload` and a `timestamp`. Read line by line, such a file shows
JSON keys and escaped quotes (`File \\"/usr/…\\"`): no traceback, no prefix. `printed_lines` gives the
printed lines instead, oldest first (an export may list the newest first); any other text passes through unchanged.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from typing import Any

# An export is read whole to be sorted; a bigger file is read as plain lines (what it then shows is still bounded).
MAX_EXPORT_CHARS = 64 * 1024 * 1024


def printed_lines(lines: Iterable[str]) -> Iterator[str]:
    """The lines of a log; for a logging service's JSON export, the printed lines its entries hold, oldest first."""
    lines = iter(lines)
    head: list[str] = []
    for line in lines:
        head.append(line)
        if line.strip():
            break
    if not head or not head[-1].lstrip().startswith(("[", "{")):
        yield from itertools.chain(head, lines)
        return
    size = sum(map(len, head))
    for line in lines:
        head.append(line)
        size += len(line)
        if size > MAX_EXPORT_CHARS:
            yield from itertools.chain(head, lines)
            return
    entries = _entries("\n".join(line.rstrip("\n") for line in head))
    if entries is None:
        yield from head
        return
    for entry in sorted(entries, key=lambda entry: entry[0]):
        yield from entry[1].split("\n")


def _entries(text: str) -> list[tuple[str, str]] | None:
    """(timestamp, printed text) of each entry that holds one; None when the text is no export of log entries."""
    try:
        document: Any = json.loads(text)
    except ValueError:
        try:
            document = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError:
            return None
    if isinstance(document, dict):
        document = [document]
    if not isinstance(document, list) or not all(isinstance(entry, dict) for entry in document):
        return None
    found = [(str(entry.get("timestamp") or ""), entry["textPayload"]) for entry in document
             if isinstance(entry.get("textPayload"), str)]
    return found or None
