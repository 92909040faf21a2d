"""vLLM's torch.compile cache, moved aside once when it holds a corrupted artifact (the ladder's compile_cache step).

vLLM 0.32 keeps it at `$VLLM_CACHE_ROOT/torch_compile_cache` (VLLM_CACHE_ROOT defaults to
`$XDG_CACHE_HOME/vllm`, else `~/.cache/vllm`: vllm/envs.py, vllm/compilation/backends.py and decorators.py).
The move renames the directory to `<dir>.corrupt-<UTC time>` beside it: nothing is deleted, a link is never
followed (the entry itself must be a real directory), and only a directory the service user owns is touched.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from launcher.run.ladder import Exhausted
from launcher.vllm.paste import COMPILE_CACHE_DIR

log = structlog.get_logger("vllm_launch")
SUBDIR = COMPILE_CACHE_DIR.strip("/")  # the folder a traceback's frames name is the one moved aside


@dataclass(frozen=True, slots=True)
class Moved:
    """What the move did: `to` is set when the cache was moved; otherwise `why` says why it was left."""

    path: Path
    to: Path | None = None
    why: str | None = None


def cache_dir(environ: Mapping[str, str]) -> Path:
    """Where the vLLM that gets `environ` keeps its torch.compile cache (vllm/envs.py's VLLM_CACHE_ROOT)."""
    root = environ.get("VLLM_CACHE_ROOT")
    if root:
        return Path(root).expanduser() / SUBDIR
    home = Path(environ["HOME"]) if environ.get("HOME") else Path.home()
    xdg = environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else home / ".cache") / "vllm" / SUBDIR


def move_aside(path: Path, *, uid: int | None = None, now: Callable[[], float] = time.time) -> Moved:
    """Rename `path` to `<path>.corrupt-<time>`; never deletes, never follows a link, never another user's."""
    owner = os.geteuid() if uid is None else uid
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return Moved(path, why="there is no such directory (vLLM may keep its cache elsewhere: "
                               "compilation-config's cache_dir)")
    except OSError as exc:
        return Moved(path, why=f"it cannot be read ({exc.strerror})")
    if stat.S_ISLNK(info.st_mode):
        return Moved(path, why="it is a symbolic link (never followed)")
    if not stat.S_ISDIR(info.st_mode):
        return Moved(path, why="it is not a directory")
    if info.st_uid != owner:
        return Moved(path, why=f"it belongs to uid {info.st_uid}, not to the service user (uid {owner})")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now()))
    for n in range(100):
        target = path.with_name(f"{path.name}.corrupt-{stamp}" + (f"-{n}" if n else ""))
        if os.path.lexists(target):
            continue
        try:
            path.rename(target)  # the entry itself, in its own directory: atomic, nothing copied or deleted
        except OSError as exc:
            return Moved(path, why=f"it could not be renamed ({exc.strerror})")
        return Moved(path, to=target)
    return Moved(path, why="every .corrupt-<time> name beside it is taken")


def move_compile_cache(path: Path, attempt: int, record: Callable[..., None]) -> Moved:
    """The ladder's MOVE_COMPILE_CACHE: move the cache aside and say so (log, state); not moved → exit 75."""
    moved = move_aside(path)
    record(compile_cache={"attempt": attempt, "path": str(path), "moved_to": str(moved.to) if moved.to else None,
                          "why_not": moved.why})
    if moved.to is None:
        log.error("compile_cache.not_moved", path=str(path), why=moved.why)
        raise Exhausted(f"compile_cache: vLLM's torch.compile cache {path} was not moved aside: {moved.why}; move "
                        "the directory aside by hand, or start without the cache (env: VLLM_DISABLE_COMPILE_CACHE: '1')")
    log.warning("compile_cache.moved_aside", path=str(path), to=str(moved.to), attempt=attempt,
                why="vLLM found a corrupted torch.compile artifact; it compiles afresh (once per run)")
    return moved
