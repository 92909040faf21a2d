"""Did the kernel's OOM killer end the start-up? vLLM prints nothing then (its engine is SIGKILLed mid-load;
at best "Engine core initialization failed … Failed core proc(s): {}"): the cgroup's own count says it.

cgroup v2 counts, in `memory.events`, every process of the cgroup (and its children) that any OOM killer
killed (`oom_kill`). vLLM runs in the launcher's cgroup (a systemd unit's, a container's), so the count is
read before an attempt and after it: if it rose and the log names no other cause, the attempt died of host
memory. Every read takes a path (the seam tests use); a missing or unreadable file means "cannot tell".
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from launcher.run.ladder import HOST_OOM
from launcher.vllm.diagnosis import Diagnosis
from launcher.vllm.signatures import ENGINE_DEAD, OK, STARTUP_MEMORY, UNKNOWN

PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")
_MAX_BYTES = 64 * 1024
# What the log says when the OOM killer took the engine or a worker: no cause, or only a process's death.
_SILENT = frozenset({UNKNOWN, OK, ENGINE_DEAD})


def events_path(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> Path | None:
    """`memory.events` of this process's cgroup v2 (the `0::/path` line of /proc/self/cgroup), or None."""
    try:
        text = proc_cgroup.read_text(encoding="utf-8", errors="replace")[:_MAX_BYTES]
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("0::/"):
            relative = line[4:].strip()
            if ".." in relative.split("/"):
                return None
            return root / relative / "memory.events" if relative else root / "memory.events"
    return None


def oom_kills(path: Path | None) -> int | None:
    """The `oom_kill` count in a memory.events file, or None (no cgroup v2, no memory controller, unreadable)."""
    if path is None:
        return None
    try:
        with path.open("rb") as handle:
            text = handle.read(_MAX_BYTES).decode("ascii", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value.strip())
    return None


def explain_oom(diagnosis: Diagnosis, before: int | None, after: int | None) -> Diagnosis:
    """The attempt's diagnosis, made host start-up memory when the OOM killer struck during it (pure)."""
    if before is None or after is None or after <= before or diagnosis.cls not in _SILENT:
        return diagnosis
    killed = after - before
    cause = (f"the kernel's OOM killer killed {killed} process{'es' if killed > 1 else ''} of vLLM's cgroup during "
             f"start-up (host RAM; memory.events oom_kill {before} → {after})")
    if diagnosis.root_cause:
        cause += f"; vLLM's last word: {diagnosis.root_cause[:200]}"
    return dataclasses.replace(diagnosis, cls=STARTUP_MEMORY, reason=HOST_OOM, root_cause=cause,
                               evidence="oom_kill")


def oom_kill_count() -> int | None:
    """This process's cgroup's oom_kill count now (None where the kernel does not say)."""
    return oom_kills(events_path())
