"""The profile's lock and the port's lock: taken without following links, asked about without being taken.

A lock is a POSIX record lock (fcntl F_SETLK) on the whole file, held for the daemon's life. Its holder
can be asked of the kernel without taking the lock (F_GETLK names the holding process): `status` and
`down` used to take it for an instant to see whether it was free, and a concurrent `up` then found it
held and exited 78. The kernel drops a POSIX lock when its process closes *any* descriptor of the file,
so a daemon opens its lock files here only, once, and never asks about a lock it holds itself.

The file holds its holder's identity, "PID START_TICKS BOOT_ID": written by the holder, read by `down`,
which signals the kernel's holder only when it is that very process and runs `vllm-launch up`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher import safefile
from launcher.errors import ConfigError, LockHeld, TransientFailure
from launcher.oneline import one_line
from launcher.procstat import stat_fields
from launcher.run.processes import boot_id

# struct flock on Linux: l_type, l_whence (short), l_start, l_len (off_t), l_pid (pid_t), padded to 32 bytes.
_FLOCK = "hhqqi4x"


@dataclass
class Lock:
    path: Path
    fd: int


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks after boot (field 22 of /proc/PID/stat); None when gone."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields is not None else None


def identity(pid: int) -> str:
    return f"{pid} {start_ticks(pid)} {boot_id()}"


def open_lock_file(path: Path, flags: int) -> int:
    """Open a lock file of ours: never through a symbolic link, never waiting on a FIFO, and only a plain file
    of this user's that no other name points to (as root, a planted link or hard link would have us truncate
    its target)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(f"{path} is a symbolic link, which vllm-launch never follows in its state directory; "
                              f"remove it (`rm {path}`)") from None
        if exc.errno == errno.EISDIR:
            raise ConfigError(_not_a_lock_file(path, "a directory")) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ConfigError(_not_a_lock_file(path, safefile.kind_of(st.st_mode)))
    if st.st_uid != os.geteuid() or st.st_nlink != 1:
        os.close(fd)
        raise ConfigError(f"{path} is not a plain file of this user's (uid {st.st_uid}, {st.st_nlink} links); "
                          f"remove it (`rm {path}`)")
    return fd


def _not_a_lock_file(path: Path, kind: str) -> str:
    remove = f"rm -r {path}" if kind == "a directory" else f"rm {path}"
    return f"{path} is {kind}, not a lock file; remove it (`{remove}`) and start again"


def _holder_of(fd: int) -> int | None:
    """The PID that holds a lock on the file open as `fd` (0: a process outside our PID namespace)."""
    query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    l_type, _, _, _, l_pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    return None if l_type == fcntl.F_UNLCK else int(l_pid)


def acquire_lock(path: Path, what: str, fix: str, write: Callable[[int, bytes, int], int] = os.pwrite) -> Lock:
    """The exclusive lock, for the daemon's life; a second `up` gets LockHeld naming the holder's PID. A lock
    that cannot be written (a full disk) is one line, exit 75: the start may work once there is room."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = open_lock_file(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _holder_of(fd) if exc.errno in (errno.EACCES, errno.EAGAIN) else None
        os.close(fd)
        if exc.errno not in (errno.EACCES, errno.EAGAIN):
            raise
        raise LockHeld(f"{what} is already held by vllm-launch PID {holder or 'unknown'} ({path}); {fix}") from None
    try:
        os.fchmod(fd, 0o600)  # one left 0644 by an earlier version
        os.ftruncate(fd, 0)
        write(fd, (identity(os.getpid()) + "\n").encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise TransientFailure(f"cannot write the lock {path} ({exc.strerror or exc}); free space on the state "
                               f"directory's filesystem (`df -h {path.parent}`) and start again") from None
    return Lock(path, fd)


def release_lock(lock: Lock) -> None:
    with contextlib.suppress(OSError):
        os.close(lock.fd)


def lock_holder(path: Path) -> int | None:
    """The PID holding this lock (0: one outside our PID namespace), or None when nobody holds it; the lock
    is never taken, so looking can never refuse a start. A lock that is not a plain file (a link, a FIFO, a
    directory someone put there) is ConfigError: who runs cannot be told from it."""
    try:
        fd, _ = safefile.open_regular(path, follow=False)
    except safefile.Missing:
        return None
    except safefile.Unreadable as exc:
        remove = f"rm -r {path}" if path.is_dir() and not path.is_symlink() else f"rm {path}"
        raise ConfigError(f"{exc}; whether a daemon holds it cannot be told: stop any `vllm-launch up` of this "
                          f"profile, then remove it (`{remove}`)") from None
    try:
        return _holder_of(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def recorded_identity(path: Path) -> list[str]:
    """What the holder wrote into the lock file: [PID, START_TICKS, BOOT_ID] (a claim, checked by the caller)."""
    try:
        head, _ = safefile.read_head(path, 256, follow=False)
    except safefile.Unreadable:
        return []
    return head.decode(errors="replace").split()


def is_up_command(cmdline: Sequence[str]) -> bool:
    """`vllm-launch up …` or `python -m launcher up …`."""
    args = list(cmdline)
    for i, arg in enumerate(args):
        if arg == "up" and i > 0:
            before = args[:i]
            return Path(before[-1]).name == "vllm-launch" or before[-2:] in (["-m", "launcher"], ["-m", "launcher.cli"])
    return False


def not_our_daemon(path: Path, pid: int) -> str | None:
    """Why the kernel's holder `pid` of the lock at `path` is not the `vllm-launch up` that took it; None
    when it is: the PID it wrote, its start ticks on this boot, and its command line all agree."""
    import psutil

    try:
        cmdline = psutil.Process(pid).cmdline()
    except psutil.Error as exc:
        return f"its command line cannot be read ({type(exc).__name__})"
    if not is_up_command(cmdline):
        return f"it runs {one_line(' '.join(cmdline)) or '?'}"  # a stranger's words: one line, no escapes
    recorded = recorded_identity(path)
    if recorded != identity(pid).split():
        return f"the lock file names {one_line(' '.join(recorded), 80) or 'nobody'}, not PID {pid} as started on this boot"
    return None


@contextlib.contextmanager
def held_locks(directory: Path, profile_name: str, port: int | None, root: Path) -> Iterator[None]:
    """The profile lock and the port lock (none for a headless worker rank), for as long as the daemon runs."""
    profile_lock = acquire_lock(directory / "lock", f"profile {profile_name}",
                                f"stop it with `vllm-launch down {profile_name}`")
    try:
        port_lock = None if port is None else acquire_lock(
            root / "ports" / f"{port}.lock", f"port {port}", "give this profile another vllm.port or stop the other daemon")
    except BaseException:
        release_lock(profile_lock)
        raise
    try:
        yield
    finally:
        if port_lock is not None:
            release_lock(port_lock)
        release_lock(profile_lock)
