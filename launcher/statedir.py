"""Where the launcher keeps what it learns, and how it writes it: atomically, mode 0600, never a secret.

The state dir: $VLLM_LAUNCH_STATE_DIR, else $STATE_DIRECTORY (systemd's StateDirectory=), else
$XDG_STATE_HOME/vllm-launch (~/.local/state/vllm-launch), one folder per profile. The ground floor:
`plan` reads calibration records from it, `run` writes state, locks and records into it. The caches
are looked up here too: the launcher's own (vLLM's flag catalog per version) and the user's cache home
that Hugging Face's hub cache defaults to.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from launcher import safefile
from launcher.errors import ConfigError
from launcher.safefile import Unreadable

# state.json keeps its latest 50 decisions and 20 warnings (a few KiB); last_known_good.json one record per
# profile, GPU and vLLM version. Far above either, far below what would hurt to hold in memory.
MAX_STATE_BYTES = 8 * 2**20


def state_root(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    if environ.get("VLLM_LAUNCH_STATE_DIR"):
        return Path(environ["VLLM_LAUNCH_STATE_DIR"])
    if environ.get("STATE_DIRECTORY"):
        return Path(environ["STATE_DIRECTORY"].split(":")[0])
    base = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "vllm-launch"


def cache_home(environ: Mapping[str, str] | None = None) -> Path:
    """$XDG_CACHE_HOME, else ~/.cache: where the launcher's cache and Hugging Face's hub cache default to."""
    environ = os.environ if environ is None else environ
    return Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The launcher's cache: systemd's CacheDirectory=, else $XDG_CACHE_HOME/vllm-launch, else
    ~/.cache/vllm-launch."""
    environ = os.environ if environ is None else environ
    if environ.get("CACHE_DIRECTORY"):
        return Path(environ["CACHE_DIRECTORY"].split(":")[0])
    return cache_home(environ) / "vllm-launch"


def ensure_writable_dir(directory: Path, what: str, fix: str) -> None:
    """Create `directory` and prove a file can be made in it, or raise ConfigError naming it and the fix:
    found at start (exit 78), not as a traceback on the first write."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".write-test.")
        os.close(fd)
        Path(probe).unlink()
    except OSError as exc:
        raise ConfigError(f"{what} {directory} is not writable ({exc.strerror or exc}); {fix}") from None


def ensure_state_dirs(root: Path, profile_name: str) -> Path:
    """The state directory of `profile_name` (and `ports`, the port locks), created 0700, writable, and
    trusted only when it is this user's and nobody else can write it: anyone who can plant a file or a
    link there could make the daemon (maybe root) write through it. Returns the profile's directory."""
    directory = root / profile_name
    for path in (root, directory, root / "ports"):
        with contextlib.suppress(OSError):  # a failure is ensure_writable_dir's to report
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():  # checked before anything is written into it
            # The root is wherever the environment points (a link there is the admin's choice); below it, ours.
            check_private_dir(path, "the state directory", follow=path == root)
        ensure_writable_dir(path, "the state directory", "set VLLM_LAUNCH_STATE_DIR to a writable directory "
                            "(under systemd, StateDirectory= provides one)")
    return directory


def check_private_dir(directory: Path, what: str, *, follow: bool) -> None:
    """Refuse a link (unless `follow`), another user's directory, or one that group or others can write."""
    try:
        st = directory.stat() if follow else directory.lstat()
    except OSError as exc:
        raise ConfigError(f"{what} {directory} cannot be read ({exc.strerror or exc}); fix its permissions") from None
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(f"{what} {directory} is a symbolic link, which vllm-launch does not follow there; remove "
                          f"it (`rm {directory}`) and start again")
    uid = os.geteuid()
    if st.st_uid != uid:
        raise ConfigError(f"{what} {directory} is owned by uid {st.st_uid}, not by this user (uid {uid}); "
                          f"`chown {uid} {directory}` or set VLLM_LAUNCH_STATE_DIR to a directory of yours")
    if st.st_mode & 0o022:
        raise ConfigError(f"{what} {directory} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
                          f"`chmod go-w {directory}`")


def write_text_atomic(path: Path, text: str, mode: int = 0o600) -> None:
    """Write-then-rename, so a reader never sees half a file. The file is created with `mode` (never wider
    for an instant) and fsync'd before the rename: a power cut must not leave it empty."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """State is ours alone: 0600."""
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def read_json(path: Path, unreadable: Callable[[Unreadable], None] | None = None) -> dict[str, Any] | None:
    """A JSON object the launcher wrote into its state directory, read as hostile (safefile: no link, no FIFO,
    at most MAX_STATE_BYTES, bounded nesting): None when it is missing, or unreadable; then `unreadable` is
    told why (a warning, one line of `status`)."""
    try:
        found: dict[str, Any] = safefile.read_json(path, MAX_STATE_BYTES, follow=False)
    except safefile.Missing:
        return None
    except safefile.Unreadable as exc:
        if unreadable is not None:
            unreadable(exc)
        return None
    return found


