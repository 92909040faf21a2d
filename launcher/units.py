"""Parsing of durations ("30m") and sizes ("1.5GiB") as profiles and flags write them."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, None: 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|[kmgt]b?|B)?\s*$")
_SIZE_UNITS = {
    None: 1, "B": 1,
    "K": 1024, "KiB": 1024, "KB": 1000, "k": 1000, "kb": 1000, "Ki": 1024,
    "M": 1024**2, "MiB": 1024**2, "MB": 1000**2, "m": 1000**2, "mb": 1000**2, "Mi": 1024**2,
    "G": 1024**3, "GiB": 1024**3, "GB": 1000**3, "g": 1000**3, "gb": 1000**3, "Gi": 1024**3,
    "T": 1024**4, "TiB": 1024**4, "TB": 1000**4, "t": 1000**4, "tb": 1000**4, "Ti": 1024**4,
}

# The text forms as regular expressions, for the profile's JSON Schema (config/schema.py).
DURATION_PATTERN = _DURATION.pattern
SIZE_PATTERN = _SIZE.pattern

GIB = 1024**3
MIB = 1024**2


class BadValue(ValueError):
    """A value of the wrong kind in a profile or an inventory file: what was expected and what came (the
    reader adds the file, the key and, unless `fix` says it already, the fix)."""

    def __init__(self, problem: str, fix: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix


def whole_number(value: object, minimum: int | None = None) -> int:
    """`value` when it is an int (not a bool) of at least `minimum`; else BadValue."""
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        at_least = f" ≥ {minimum}" if minimum is not None else ""
        raise BadValue(f"expected a whole number{at_least}, got {value!r}")
    return value


def true_or_false(value: object) -> bool:
    if not isinstance(value, bool):
        raise BadValue(f"expected true or false, got {value!r}")
    return value


def parse_duration(value: object) -> float:
    """Seconds from `90`, `"90s"`, `"10m"`, `"1h"`; raises ValueError with the accepted forms."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s, 10m or 1h")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    raise ValueError("expected a duration such as 30s, 10m or 1h")


def parse_size(value: object) -> int:
    """Bytes from `1073741824`, `"1GiB"`, `"512MiB"`, `"2G"` (binary, like vLLM's `G`) or `"2GB"` (decimal)."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 512MiB or 2GiB")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match and match.group(2) in _SIZE_UNITS:
            return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])
    raise ValueError("expected a size such as 512MiB or 2GiB")


def format_duration(seconds: float) -> str:
    """`95.0` → `1m35s`; short and exact enough for status lines."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def gib(n_bytes: float) -> float:
    return n_bytes / GIB
