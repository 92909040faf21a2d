"""An `up` started by `tune` or `bench --compare` stops, in order, when the process that started it is gone.

Those commands run `up` in its own session, so that a Ctrl-C at the terminal reaches only them (they stop the
`up` in order). A SIGKILL (the OOM killer, `timeout -k`, a cancelled CI job) gives them no chance to: their `up`
and its vLLM would go on holding the GPU, the port and the lock for good. So they name themselves in
`VLLM_LAUNCH_PARENT_PID`, and `up` watches that process through a pidfd: when it exits, `up` sends itself the
SIGTERM an operator would, and stops vLLM as for any SIGTERM.

Not PR_SET_PDEATHSIG: it fires when the parent *thread* that forked us ends, not the process, and it is set
after the fork, so a parent that died first is missed. After opening the pidfd, the parent is checked to be
still ours (our parent PID): one that died before that is caught there.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Callable, Mapping

import structlog

log = structlog.get_logger("vllm_launch")

PARENT_VARIABLE = "VLLM_LAUNCH_PARENT_PID"


def stop_ourselves(parent: int) -> None:
    """What an operator's `kill` would do: the daemon's signal handling stops vLLM in order, then exits 0."""
    log.warning("parent.gone", parent_pid=parent, variable=PARENT_VARIABLE,
                action="stopping: the command that started this up is gone")
    os.kill(os.getpid(), signal.SIGTERM)


def watch_parent(environ: Mapping[str, str], *, on_gone: Callable[[int], None] = stop_ourselves,
                 parent_pid: Callable[[], int] = os.getppid) -> threading.Thread | None:
    """Watch the process `environ` names in VLLM_LAUNCH_PARENT_PID; `on_gone(pid)` once it has exited (at once
    when it is gone already, or is no longer our parent). None when there is nothing to watch."""
    raw = environ.get(PARENT_VARIABLE, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) <= 1:
        log.warning("parent.ignored", variable=PARENT_VARIABLE, value=raw[:20],
                    why="not a process ID; nothing is watched")
        return None
    parent = int(raw)
    try:
        pidfd = os.pidfd_open(parent)
    except ProcessLookupError:
        on_gone(parent)
        return None
    except OSError as exc:  # a kernel before 5.3: no pidfd; watch our parent PID instead
        log.info("parent.polled", parent_pid=parent, why=exc.strerror or str(exc))
        return _start(lambda: _poll(parent, parent_pid), parent, on_gone)
    if parent_pid() != parent:  # it died before the pidfd was opened (we were re-parented), or it is not ours
        os.close(pidfd)
        on_gone(parent)
        return None
    return _start(lambda: _wait(pidfd), parent, on_gone)


def _start(wait: Callable[[], None], parent: int, on_gone: Callable[[int], None]) -> threading.Thread:
    def run() -> None:
        wait()
        on_gone(parent)

    thread = threading.Thread(target=run, name="parent-watch", daemon=True)
    thread.start()
    return thread


def _wait(pidfd: int) -> None:
    """Until the process exits: its pidfd becomes readable then."""
    try:
        while not select.select([pidfd], [], [])[0]:
            continue
    finally:
        os.close(pidfd)


def _poll(parent: int, parent_pid: Callable[[], int]) -> None:
    """Until our parent PID is no longer `parent` (an orphan is re-parented to a subreaper or init)."""
    stopped = threading.Event()
    while parent_pid() == parent:
        stopped.wait(0.5)
