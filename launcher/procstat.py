"""What /proc says of a process: its stat fields, whether it is alive, and whether its title is one vLLM gives."""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int) -> list[bytes] | None:
    """Fields 3 onward of /proc/PID/stat (state, ppid, …, starttime at index 19); None when it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return data[data.rindex(b")") + 2:].split()


def alive(pid: int) -> bool:
    """The process runs: not gone, and not a zombie (Z) or dead (X) entry that only waits for its parent to reap
    it; such a process holds no memory and no port (psutil's is_running() says yes to a zombie)."""
    fields = stat_fields(pid) if pid > 0 else None
    return fields is not None and fields[0] not in (b"Z", b"X")


def is_vllm_title(name: str) -> bool:
    """vLLM names its engine and workers (setproctitle): `VLLM::EngineCore`, `VLLM::Worker_TP1`, …"""
    return name.startswith("VLLM::") or "EngineCore" in name
