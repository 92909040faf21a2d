"""Text the launcher did not write, made fit for one line of an error, a log field or state.json.

A stranger's command line, a lock file's contents or a tampered state file may hold newlines, ANSI escape
sequences (which recolour, move the cursor or retitle the operator's terminal) and other control or format
characters (a right-to-left override that reverses what a line appears to say). `one_line` removes them all,
so that whatever such text contains, an error stays one honest line.
"""

from __future__ import annotations

import re
import unicodedata

# CSI (ESC [ … final), OSC (ESC ] … BEL or ESC \), and any other two-character escape.
_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|\x9b[0-?]*[ -/]*[@-~]")
_SPACES = re.compile(r"\s+")


def one_line(text: object, limit: int = 200) -> str:
    """`text` on one line: escape sequences dropped, control and format characters (newlines, tabs, C1, bidi
    overrides, zero-width marks) turned into spaces, runs of white space made one, cut to `limit` characters
    (an ellipsis marks a cut; 0 keeps it whole)."""
    raw = text if isinstance(text, str) else str(text)
    cleaned = "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in _ESCAPE.sub("", raw))
    flat = _SPACES.sub(" ", cleaned).strip()
    if limit and len(flat) > limit:
        return flat[:max(1, limit - 1)].rstrip() + "…"
    return flat
