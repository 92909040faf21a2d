"""Text from outside (a stranger's command line, a lock file, a state file) reaches an error as one clean line."""

from __future__ import annotations

import pytest

from launcher.oneline import one_line


@pytest.mark.parametrize(("text", "expected"), [
    ("python3 -c 'import time'", "python3 -c 'import time'"),
    ("evil\n(APIServer pid=1) ERROR faked line", "evil (APIServer pid=1) ERROR faked line"),
    ("\x1b[31mred\x1b[0m and \x1b]0;new terminal title\x07plain", "red and plain"),
    ("a\r\tb\x00c\x7fd\x85e", "a b c d e"),
    ("safe \u202egnp.exe", "safe gnp.exe"),  # a right-to-left override would reverse what the reader sees
    ("line\u2028separator", "line separator"),
    ("  leading and trailing  ", "leading and trailing"),
    ("\x1b", ""),
])
def test_control_characters_and_escapes_are_removed(text: str, expected: str) -> None:
    """Newlines, ANSI escapes, C0/C1 controls and format characters never reach the line."""
    assert expected == one_line(text)


def test_a_long_text_is_cut_with_an_ellipsis() -> None:
    """A cut is marked, and the result is never longer than the limit."""
    cut = one_line("x" * 500, limit=40)
    assert 40 == len(cut) and cut.endswith("…")
    assert "x" * 500 == one_line("x" * 500, limit=0)


def test_anything_printable_is_kept() -> None:
    """Non-ASCII text that is printable (a model name, a path) is left as it is."""
    assert "modèle/日本語 ✓" == one_line("modèle/日本語 ✓")
