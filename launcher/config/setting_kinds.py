"""Check one `launcher:` value against its declared kind and bounds (config/settings.py): the typed value, or
`BadValue` with the problem (and, where the kind says more than the setting's fix, the fix)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from launcher.config.profile import parse_max_model_len
from launcher.config.settings import Setting
from launcher.units import BadValue, parse_duration, parse_size, true_or_false, whole_number


def check(item: Setting, value: Any) -> Any:
    """`value` as the launcher uses it (None stays None for a key without a default)."""
    if value is None and item.default is None:
        return None
    return _CHECKS[item.kind](item, value)


def _choice(item: Setting, value: Any) -> str:
    if value not in item.choices:
        raise BadValue(f"expected {' or '.join(item.choices)}, got {value!r}")
    return str(value)


def _path(item: Setting, value: Any) -> str:
    if not isinstance(value, str):
        raise BadValue("expected a path")
    return value


def _size(item: Setting, value: Any) -> int:
    try:
        return parse_size(value)
    except ValueError as exc:
        raise BadValue(str(exc)) from None


def _count(item: Setting, value: Any) -> int:
    return whole_number(value, int(item.bounds[0] or 0))


def _duration(item: Setting, value: Any) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise BadValue(f"{exc}, got {value!r}") from None
    low, high = item.bounds
    if (low is not None and seconds < low) or (high is not None and seconds > high):
        raise BadValue(f"{seconds:g}s is outside {low or 0:g}s to {high or float('inf'):g}s", item.range_fix)
    return seconds


def _boolean(item: Setting, value: Any) -> bool:
    return true_or_false(value)


def _positive(item: Setting, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise BadValue(f"expected a positive number, got {value!r}")
    return float(value)


def _tokens(item: Setting, value: Any) -> int | None:
    try:
        return parse_max_model_len(value)
    except ValueError as exc:
        raise BadValue(f"{exc}, got {value!r}") from None


def _fractions(item: Setting, value: Any) -> tuple[float, ...]:
    if not isinstance(value, list) or not value:
        raise BadValue("expected a list of utilizations, highest first")
    for rung in value:
        if isinstance(rung, bool) or not isinstance(rung, int | float) or not 0 < rung <= 1:
            raise BadValue(f"each rung must be a fraction in (0, 1], got {rung!r}")
    rungs = tuple(float(r) for r in value)
    if list(rungs) != sorted(rungs, reverse=True) or len(set(rungs)) != len(rungs):
        raise BadValue("rungs must be distinct and in descending order")
    return rungs


def _delays(item: Setting, value: Any) -> tuple[float, float]:
    if not isinstance(value, list) or len(value) != 2:
        raise BadValue("expected [first, longest] delays")
    try:
        low, high = parse_duration(value[0]), parse_duration(value[1])
    except ValueError as exc:
        raise BadValue(str(exc)) from None
    if low > high:
        raise BadValue("the first delay is longer than the longest")
    return low, high


def _address(item: Setting, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise BadValue(f"expected an address, got {value!r}")
    return value


def _prom_path(item: Setting, value: Any) -> str:
    if not isinstance(value, str) or not value.endswith(".prom"):
        raise BadValue(f"expected a path ending in .prom, got {value!r}")
    return value


def _section(item: Setting, value: Any) -> Any:
    raise TypeError(f"{item.key} is a section: read its keys")


_CHECKS: dict[str, Callable[[Setting, Any], Any]] = {
    "section": _section, "choice": _choice, "path": _path, "size": _size, "count": _count, "duration": _duration,
    "boolean": _boolean, "positive": _positive, "tokens": _tokens, "fractions": _fractions, "delays": _delays,
    "address": _address, "prom_path": _prom_path,
}
