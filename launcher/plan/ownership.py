"""Which of this host's vLLM processes are ours, by proof, and which belong to someone else.

A `VLLM::EngineCore` whose parent is a live process that is not a vLLM server looks like an orphan, and may be
one of ours; it may as well be a notebook's offline `LLM()`, `vllm bench throughput` or a Ray replica, whose
owner would lose it. So a process is ours only with proof the launcher can check:

- it is in our own live process tree (the daemon as subreaper adopted it, e.g. from an earlier run of the same
  `up` in container mode);
- it is in the cgroup of our own systemd unit (a unit's cgroup holds only that unit's processes);
- an earlier run recorded it, or the session of the `vllm serve` it started (run/processes.recorded_children:
  `up` stops those before it gets here).

Not the environment: vLLM's titled processes overwrite their environment block when they set their title, so
/proc/PID/environ no longer shows what they inherited. Everything else is a stranger's: listed, never signalled.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.oneline import one_line
from launcher.procstat import is_vllm_title

ProcessIter = Callable[..., Iterable[Any]]
CgroupOf = Callable[[int], str | None]

IN_OUR_TREE = "in our own process tree"
IN_OUR_UNIT = "in our systemd unit's cgroup"


@dataclass(frozen=True, slots=True)
class LocalProcess:
    """A vLLM process on this host (a local PID: unlike NVML's, safe to signal when it is ours)."""

    pid: int
    name: str  # as the process titled itself: sanitised, it is the process's own text
    why: str  # the proof that it is ours, or why it is not


@dataclass(frozen=True, slots=True)
class LocalVllm:
    ours: tuple[LocalProcess, ...] = ()  # leftovers `up` stops
    strangers: tuple[LocalProcess, ...] = ()  # listed and left alone


def cgroup_of(pid: int) -> str | None:
    """The process's cgroup: the unified (v2) path, or the name=systemd (v1) one where only that names a unit
    (a hybrid host); None when unreadable."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    unified = systemd = None
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            unified = path
        elif controllers == "name=systemd":
            systemd = path
    return unified if unit_cgroup(unified) or not systemd else systemd


def unit_cgroup(path: str | None) -> str | None:
    """`path` when it is a systemd service's own cgroup (…/NAME.service), else None: a login session's scope, a
    user manager (user@UID.service) or a container's root hold anybody's processes and prove nothing."""
    if not path:
        return None
    leaf = path.rstrip("/").rsplit("/", 1)[-1]
    return path if leaf.endswith(".service") and not leaf.startswith("user@") else None


def local_vllm(*, process_iter: ProcessIter | None = None, uid: int | None = None, own_pid: int | None = None,
               cgroup: CgroupOf = cgroup_of) -> LocalVllm:
    """This user's `VLLM::` processes that no live vLLM server owns, as ours (with the proof) or a stranger's.

    A `VLLM::` process under a live server (`vllm serve`, its API server processes, their engine) is someone's
    running server, maybe another profile's: neither a leftover nor worth a word. Never raises."""
    try:
        import psutil
    except ImportError:
        return LocalVllm()
    process_iter = process_iter or psutil.process_iter
    uid = os.getuid() if uid is None else uid
    own_pid = os.getpid() if own_pid is None else own_pid
    names: dict[int, str] = {}  # pid → title, of this user's live VLLM:: processes
    parents: dict[int, int] = {}  # pid → ppid, of every live process
    servers: set[int] = set()  # live `vllm serve` API servers, of any user
    try:
        for proc in process_iter(["pid", "name", "ppid", "uids", "status", "cmdline"]):
            info = proc.info
            if info.get("status") == "zombie":
                continue
            pid, name = info["pid"], info.get("name") or ""
            parents[pid] = info.get("ppid") or 0
            if is_vllm_server(info.get("cmdline") or ()):
                servers.add(pid)
            uids = info.get("uids")
            if uids is not None and uids.real == uid and pid != own_pid and is_vllm_title(name):
                names[pid] = name
    except (OSError, psutil.Error):
        return LocalVllm()
    owned = _descendants(servers, parents)
    ours_by_tree = _descendants({own_pid}, parents)
    our_unit = unit_cgroup(cgroup(own_pid))
    ours, strangers = [], []
    for pid in sorted(set(names) - owned):
        name = one_line(names[pid], 80)
        if pid in ours_by_tree:
            ours.append(LocalProcess(pid, name, IN_OUR_TREE))
        elif our_unit is not None and cgroup(pid) == our_unit:
            ours.append(LocalProcess(pid, name, IN_OUR_UNIT))
        else:
            parent = parents.get(pid, 0)
            strangers.append(LocalProcess(pid, name, f"parent PID {parent}, not a vLLM server and not ours"))
    return LocalVllm(tuple(ours), tuple(strangers))


def _descendants(roots: set[int], parents: dict[int, int]) -> set[int]:
    """Every process below `roots` (not the roots themselves) in the table `parents` (pid → ppid)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [c for root in roots for c in children.get(root, [])]
    while todo:
        pid = todo.pop()
        if pid not in found and pid not in roots:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def is_vllm_server(cmdline: Sequence[str]) -> bool:
    """`vllm serve …` (the console script) or `python -m vllm.entrypoints…`: vLLM's API server, untitled."""
    args = list(cmdline)
    return any(Path(arg).name == "vllm" and args[i + 1:i + 2] == ["serve"] for i, arg in enumerate(args)) or \
        any(arg.startswith("vllm.entrypoints") for arg in args)
