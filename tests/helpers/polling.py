"""Waiting for what a real process does, with a deadline and a message that says what never came."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def poll_for(predicate: Callable[[], Any], timeout: float, what: str, show: Callable[[], str] = lambda: "") -> Any:
    """Wait until predicate() is truthy, failing with what we were waiting for and the output so far."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{show()}")
