"""Finding, reaping and killing processes by PID without trusting a PID alone.

A recorded PID is only ours while its start time matches: PIDs are reused.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterable, Mapping

import psutil


def tree(pid: int) -> list[psutil.Process]:
    try:
        leader = psutil.Process(pid)
        return [leader, *leader.children(recursive=True)]
    except psutil.Error:
        return []


def in_session(sid: int) -> list[psutil.Process]:
    """Every live process of the child's session (its group leader started it with setsid)."""
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(proc.pid) == sid:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def remembered(known: Mapping[int, float]) -> list[psutil.Process]:
    """The remembered processes still alive; a matching start time guards against PID reuse."""
    return [proc for proc in live_processes(known) if abs(proc.create_time() - known[proc.pid]) < 0.01]


def reap_orphans(tracked: subprocess.Popen[bytes] | None = None) -> list[int]:
    """Reap adopted zombies (we are a subreaper or PID 1) without stealing the tracked child's status.

    A plain waitpid(-1) would also reap vLLM's main process, after which Popen.wait()
    reports 0 (ECHILD): peek with WNOWAIT, and let Popen reap its own child.
    """
    reaped = []
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            break
        if info is None or info.si_pid == 0:
            break
        if tracked is not None and info.si_pid == tracked.pid:
            tracked.poll()
            if tracked.returncode is None:
                break
            continue
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info.si_pid, 0)
            reaped.append(info.si_pid)
    return reaped


def name_of(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return "?"


def leftover_vllm_processes(own_pids: Mapping[int, float]) -> list[psutil.Process]:
    """Processes recorded in our state by an earlier run that are still alive (same pid and start time)."""
    return remembered(own_pids)


def live_processes(pids: Iterable[int]) -> list[psutil.Process]:
    """The processes with these PIDs that are alive now (a zombie is not)."""
    alive = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            continue
    return alive


def kill_processes(procs: list[psutil.Process], grace_s: float = 5.0) -> list[str]:
    """Terminate then kill processes we own; returns what could not be stopped."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _, alive = psutil.wait_procs(alive, timeout=5)
    return [f"{p.pid} {name_of(p)}" for p in alive]
