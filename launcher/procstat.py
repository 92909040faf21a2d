"""What /proc says of a process: its stat fields, and whether its title is one vLLM gives."""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int) -> list[bytes] | None:
    """Fields 3 onward of /proc/PID/stat (state, ppid, …, starttime at index 19); None when it is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return data[data.rindex(b")") + 2:].split()


def is_vllm_title(name: str) -> bool:
    """vLLM names its engine and workers (setproctitle): `VLLM::EngineCore`, `VLLM::Worker_TP1`, …"""
    return name.startswith("VLLM::") or "EngineCore" in name
