"""`vllm-launch down`: stop the daemon that holds a profile's lock, or what its last run left behind.

Only our own processes are signalled: the lock's holder when it is this profile's `vllm-launch up`, or the
processes a dead daemon recorded (the same PID and start time on the same boot).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launcher.errors import EX_OK, ConfigError, TransientFailure
from launcher.observe.status import profile_dirs
from launcher.run import locks, processes
from launcher.run.locks import lock_holder
from launcher.safefile import Unreadable
from launcher.statedir import check_private_dir, read_json


def down_command(profile: str, timeout: float = 120.0, environ: Mapping[str, str] | None = None) -> int:
    """SIGTERM the daemon serving PROFILE and wait until it has exited.

    The daemon is whoever holds the profile's lock, not whatever process now has the PID that
    state.json recorded (PIDs are reused). With no daemon, the processes its last run recorded and
    left alive (the same PID *and* start time) are stopped, and `down` says so.
    """
    name = Path(profile).stem
    directory = profile_dirs(profile, environ)[0]
    unreadable: list[Unreadable] = []
    data = read_json(directory / "state.json", unreadable.append)
    holder = lock_holder(directory / "lock")
    if holder is None:
        if unreadable:
            print(f"{name}: not running; nothing its last run recorded was stopped: {unreadable[0]}")
            return EX_OK
        try:
            # Whoever can write the directory can record any process (PID and start ticks are public).
            if directory.exists() or directory.is_symlink():
                check_private_dir(directory, "the state directory", follow=False)
        except ConfigError as exc:
            print(f"{name}: not running; its records were not acted on, nothing was stopped: {exc}")
            return EX_OK
        left = _stop_recorded_children(data)
        print(f"{name}: not running" + (f"; stopped what its last run left: {', '.join(left)}" if left else ""))
        return EX_OK
    if holder <= 0:  # never os.kill(-1, …): that is every process we may signal
        raise TransientFailure(f"the lock of {name} is held but names no PID ({directory / 'lock'}); stop its "
                               "daemon through its service manager (systemctl stop vllm-launch@NAME)")
    _signal_our_daemon(name, directory / "lock", holder)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lock_holder(directory / "lock") is None:
            print(f"{name}: stopped (vllm-launch PID {holder})")
            return EX_OK
        time.sleep(0.2)
    raise TransientFailure(f"vllm-launch PID {holder} did not exit within {timeout:.0f}s; check `vllm-launch status "
                           f"{name}` and its log")


def _signal_our_daemon(name: str, lock: Path, pid: int) -> None:
    """SIGTERM `pid` only if it is this profile's `vllm-launch up` (locks.not_our_daemon), through a pidfd:
    checked and signalled as one process, even if it exits and its PID is reused in between."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # gone already: the wait below sees the lock free
    try:
        if locks.lock_holder(lock) != pid:
            return  # it let go of the lock meanwhile: the wait below sees whether anyone holds it now
        why = locks.not_our_daemon(lock, pid)
        if why is not None:
            raise TransientFailure(f"{name}: the lock {lock} is held by PID {pid}, which is not this profile's "
                                   f"`vllm-launch up` ({why}); nothing was signalled: see what it is with "
                                   f"`ps -o pid,lstart,args -p {pid}`")
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
    finally:
        os.close(pidfd)


def _stop_recorded_children(data: Any) -> list[str]:
    """Stop the processes a dead daemon recorded (PID and start time both match): ours, never a stranger."""
    alive = processes.recorded_children(data)
    names = [f"{p.pid} {processes.name_of(p)}" for p in alive]
    stuck = processes.kill_processes(alive)
    return [n for n in names if n not in stuck] + [f"{n} (could not be stopped)" for n in stuck]
