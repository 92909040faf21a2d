"""Finding, reaping and killing processes by PID without trusting a PID alone.

A recorded PID is only ours while its start time matches: PIDs are reused. The start time is the kernel's
(clock ticks after boot, from /proc/PID/stat), not psutil's create_time, which adds the wall-clock boot
time: an NTP step moves that, and every escaped descendant would then look like a stranger. Since ticks
restart at boot, a record is only trusted on the boot that wrote it (the kernel's boot_id).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import psutil

from launcher.oneline import one_line
from launcher.procstat import alive, stat_fields

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def start_time(proc: psutil.Process) -> float:
    """Seconds after boot that the process started; raises psutil.NoSuchProcess when it is gone."""
    fields = stat_fields(proc.pid)
    if fields is None:
        raise psutil.NoSuchProcess(proc.pid)
    return int(fields[19]) / _CLOCK_TICKS  # field 22, starttime


def boot_id() -> str | None:
    try:
        return _BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def recorded_children(data: Any) -> list[psutil.Process]:
    """The processes an earlier run left alive that are provably its own: recorded in state.json (`child.known`:
    same boot, same PID, same start time), or still in the session of the `vllm serve` it started in a new
    session (`session_members`). Anything malformed proves nothing."""
    child = data.get("child") if isinstance(data, dict) else None
    if not isinstance(child, dict) or child.get("boot_id") != boot_id():
        return []
    known = child.get("known")
    try:
        found = remembered({int(pid): float(t) for pid, t in known.items()}) if isinstance(known, dict) else []
    except (TypeError, ValueError):
        found = []
    seen = {p.pid for p in found}
    return found + [p for p in session_members(child.get("pgid"), child.get("start_time")) if p.pid not in seen]


def session_members(sid: object, leader_started: object) -> list[psutil.Process]:
    """This user's live processes in the session of a `vllm serve` we started with setsid, whose leader started at
    `leader_started` (processes.start_time): an engine orphaned before the daemon put it on record still carries
    that session id, whoever adopted it. The kernel keeps a session's id from reuse while any member lives; a
    live leader that started at another time means the id was reused, and the session is somebody else's."""
    if not isinstance(sid, int) or isinstance(sid, bool) or sid <= 1 or not isinstance(leader_started, float | int):
        return []
    if alive(sid):
        with contextlib.suppress(psutil.Error):
            if abs(start_time(psutil.Process(sid)) - leader_started) >= 0.01:
                return []
    uid = os.getuid()
    found = []
    for proc in in_session(sid):
        with contextlib.suppress(psutil.Error):
            if proc.pid != os.getpid() and proc.uids().real == uid and start_time(proc) >= leader_started - 0.01:
                found.append(proc)
    return found


def tree(pid: int) -> list[psutil.Process]:
    try:
        leader = psutil.Process(pid)
        return [leader, *leader.children(recursive=True)]
    except psutil.Error:
        return []


def descendants(roots: Iterable[int]) -> list[psutil.Process]:
    """Every live process below `roots` (not the roots), from one read of the process table: after vLLM's API
    server has exited, its engine's children are no longer in the leader's tree, but still below the engine."""
    wanted = set(roots)
    procs: dict[int, psutil.Process] = {}
    children: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        procs[proc.pid] = proc
        children.setdefault(proc.info.get("ppid") or 0, []).append(proc.pid)
    found: dict[int, psutil.Process] = {}
    todo = [c for root in wanted for c in children.get(root, [])]
    while todo:
        pid = todo.pop()
        if pid in found or pid in wanted:
            continue
        if alive(pid):
            found[pid] = procs[pid]
        todo.extend(children.get(pid, []))
    return list(found.values())


def adopted(leader: int, since: float) -> list[psutil.Process]:
    """Our own children, other than vLLM's `leader`, started since it did (`since`: processes.start_time),
    with their descendants. While vLLM runs the daemon starts no lasting process of its own, and as
    subreaper it inherits whatever vLLM's tree orphans: a descendant that double-forked and called setsid
    has left both the tree and the session, and only this finds it."""
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return []
    found = []
    for proc in children:
        if proc.pid == leader:
            continue
        with contextlib.suppress(psutil.Error):
            if alive(proc.pid) and start_time(proc) >= since:
                found += [proc, *proc.children(recursive=True)]
    return found


def in_session(sid: int) -> list[psutil.Process]:
    """Every live process of the child's session (its group leader started it with setsid)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if alive(proc.pid) and os.getsid(proc.pid) == sid:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def remembered(known: Mapping[int, float]) -> list[psutil.Process]:
    """The remembered processes still alive; a matching start time guards against PID reuse."""
    alive = []
    for proc in live_processes(known):
        with contextlib.suppress(psutil.Error):
            if abs(start_time(proc) - known[proc.pid]) < 0.01:
                alive.append(proc)
    return alive


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
    """The name a process gave itself, fit for one line (it may be anyone's text)."""
    try:
        return one_line(proc.name(), 80) or "?"
    except psutil.Error:
        return "?"


def live_processes(pids: Iterable[int]) -> list[psutil.Process]:
    """The processes with these PIDs that are alive now (a zombie is not)."""
    found = []
    for pid in pids:
        if not alive(pid):
            continue
        with contextlib.suppress(psutil.Error):
            found.append(psutil.Process(pid))
    return found


def kill_processes(procs: list[psutil.Process], grace_s: float = 5.0, kill_wait_s: float = 5.0) -> list[str]:
    """Terminate then kill processes we own; returns what could not be stopped."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _, alive = psutil.wait_procs(alive, timeout=kill_wait_s)
    return [f"{p.pid} {name_of(p)}" for p in alive if not _dead(p)]


def _dead(proc: psutil.Process) -> bool:
    """A zombie has exited and holds no memory: it waits for its parent (for an orphan, whatever reaps orphans
    here, which may be slow) to collect its exit status, and nothing we send can stop it any further."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # it exists and cannot be read: not known to be stopped
        return False
