"""What execve(2) can carry: every argv word and environment entry is a C string (no NUL byte) of valid
Unicode, at most MAX_ARG_STRLEN bytes with its terminator (Linux: 32 pages); one longer word fails the
whole exec with E2BIG. A profile is checked against this when it is read, so that `up` never finds out at
spawn time, after the old vLLM of a reload was stopped.
"""

from __future__ import annotations

from typing import Any, NamedTuple

MAX_ARG_STRLEN = 32 * 4096  # bytes of one argument or "NAME=value", the terminating NUL included


def word_problem(text: str, prefix: str = "") -> str | None:
    """Why `prefix + text` cannot be one argv word or environment entry; None when it can."""
    if "\0" in text:
        return "holds a NUL byte (\\0), which no command line or environment can carry"
    try:
        size = len((prefix + text).encode("utf-8"))
    except UnicodeEncodeError:
        return "holds a lone surrogate (an escape like \\ud800), which is not text a command line can carry"
    if size >= MAX_ARG_STRLEN:
        return (f"is {size:,} bytes: Linux takes at most {MAX_ARG_STRLEN - 1:,} in one argument or environment "
                "entry (MAX_ARG_STRLEN)")
    return None


class Unexecutable(NamedTuple):
    key: str  # dotted, as the profile writes it: env.NAME, vllm.served_model_name
    problem: str
    fix: str


def document_problem(data: Any, prefix: str = "") -> Unexecutable | None:
    """The first key of a parsed profile whose name or text could not reach vLLM, or a mapping key that is not
    text (YAML makes `1:` a number: next to `a:` it breaks every sorted walk, and JSON writes it as text anyway)."""
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                return Unexecutable(f"{prefix}{key}", f"the key {key!r} is {type(key).__name__}, not text",
                                    f"quote it: '{key}': …")
            problem = word_problem(key)
            if problem:
                return Unexecutable(f"{prefix}{key!r}", f"this key {problem}", "remove it from the key")
            found = document_problem(value, f"{prefix}{key}.")
            if found:
                return found
    elif isinstance(data, list):
        for item in data:
            found = document_problem(item, prefix)
            if found:
                return found
    elif isinstance(data, str):
        problem = word_problem(data)
        if problem:
            fix = "write a shorter value" if "bytes" in problem else "remove it from the value"
            return Unexecutable(prefix.rstrip(".") or "(the profile)", f"the value {problem}", fix)
    return None
