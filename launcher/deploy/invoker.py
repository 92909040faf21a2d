"""A `{file:}` secret as the user who ran the installer could read it, never with root's rights.

`sudo scripts/install-systemd` runs as root, which reads any file: a profile naming `/etc/shadow` as its
api_key would have it installed as the service's credential. So the file is opened by a child process that
first drops to the invoking user (SUDO_UID, SUDO_GID and that user's groups), and the installer gets what
that user could have read themselves, or a one-line refusal. Without sudo the installer reads it with its
own rights. Either way the file is opened without blocking (a FIFO cannot hang the install), must be a
regular file, and is read up to MAX_SECRET_BYTES.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.errors import ConfigError

MAX_SECRET_BYTES = 64 * 1024


class NotASecret(Exception):
    """The file opened, but it is no secret file (a FIFO, a device, too large)."""


def read_bounded(path: str, limit: int = MAX_SECRET_BYTES) -> bytes:
    """The file's bytes: opened without blocking or becoming a terminal, a regular file, at most `limit`."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotASecret("not a regular file")
        data = b""
        while len(data) <= limit and (piece := os.read(fd, limit + 1 - len(data))):
            data += piece
    finally:
        os.close(fd)
    if len(data) > limit:
        raise NotASecret(f"larger than {limit // 1024} KiB, which no secret is")
    return data


@dataclass(frozen=True, slots=True)
class Invoker:
    """Whose rights a secret file is read with: the user who ran sudo, or None for this process's own."""

    uid: int | None = None
    gid: int | None = None

    def describe(self) -> str:
        return "this user's rights" if self.uid is None else f"the rights of uid {self.uid}, who ran sudo"


def invoker(environ: Mapping[str, str], euid: int | None = None) -> Invoker:
    """Under sudo (running as root with SUDO_UID naming another user), that user; else this process itself."""
    euid = os.geteuid() if euid is None else euid
    uid = environ.get("SUDO_UID", "")
    if euid != 0 or not uid.isdigit() or int(uid) == 0:
        return Invoker()
    gid = environ.get("SUDO_GID", "")
    return Invoker(int(uid), int(gid) if gid.isdigit() else _primary_gid(int(uid)))


def read_secret(key: str, path: str, who: Invoker) -> str:
    """The secret in `path`, read with `who`'s rights; ConfigError in one line when they cannot read it."""
    try:
        data = read_bounded(path) if who.uid is None else _read_as(path, who.uid, who.gid or who.uid)
    except (OSError, NotASecret) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{key}: cannot read {path} with {who.describe()} ({why}); the installer copies a "
                          "{file:} secret only when that user can read it: give them read access, or pass the "
                          "secret in the installer's environment") from None
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{key}: {path} is not UTF-8 text, which no secret is") from None


def _read_as(path: str, uid: int, gid: int) -> bytes:
    """read_bounded in a forked child that has dropped to uid/gid (and the user's groups) before it opens the
    file; what it read, or why not, comes back through a pipe. A fork, not an exec: the user need not be
    able to run this interpreter."""
    groups = _groups(uid, gid)
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls, then _exit, whatever happens
        code = 1
        try:
            os.close(readable)
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            try:
                answer = b"+" + read_bounded(path)
            except OSError as exc:
                answer = b"-" + (exc.strerror or type(exc).__name__).encode()
            except NotASecret as exc:
                answer = b"-" + str(exc).encode()
            view = memoryview(answer)
            while view:
                view = view[os.write(writable, view):]
            code = 0
        finally:
            os._exit(code)
    os.close(writable)
    try:
        answer = b""
        while len(answer) <= MAX_SECRET_BYTES + 1 and (piece := os.read(readable, 65536)):
            answer += piece
    finally:
        os.close(readable)
        os.waitpid(pid, 0)
    if answer.startswith(b"+"):
        return answer[1:]
    if answer.startswith(b"-"):
        raise NotASecret(answer[1:].decode(errors="replace"))
    raise NotASecret(f"could not drop to uid {uid}, gid {gid} to read it")


def _primary_gid(uid: int) -> int:
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid


def _groups(uid: int, gid: int | None) -> list[int]:
    """The user's supplementary groups, as a login of theirs would have them (none known: the primary only)."""
    primary = uid if gid is None else gid
    try:
        return os.getgrouplist(pwd.getpwuid(uid).pw_name, primary)
    except KeyError:
        return [primary]
