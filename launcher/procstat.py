"""The fields of /proc/PID/stat after the process name (which may hold spaces and parentheses)."""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int) -> list[bytes] | None:
    """Fields 3 onward of /proc/PID/stat (state, ppid, …, starttime at index 19); None when it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return data[data.rindex(b")") + 2:].split()
