"""The one reader for every file the launcher did not just write itself: bounded, a regular file, never blocking.

state.json, the locks, last_known_good.json, calibration records, the tune cache, the flag-catalog cache,
the profile and a model's config.json, index and safetensors headers can each be planted or broken by
someone else (the state directory is writable by the service user, and so by vLLM; a profile by whoever
writes /etc/vllm-launch or a ConfigMap; a model directory by a failed copy). So every read here:

- opens with O_NONBLOCK: a FIFO answers at once instead of waiting for a writer that never comes (a
  `status` that hangs, a daemon wedged on SIGHUP);
- never follows a link where the directory is the launcher's own (`follow=False`, the state directory and
  its caches); a profile or a model directory is the operator's, and is made of links on purpose (a
  Kubernetes ConfigMap, the Hugging Face cache), so there the link is followed but its target still checked;
- insists on a regular file (fstat of what was opened): not /dev/zero, a directory, a socket or a device;
- reads at most `limit` bytes (a file larger than that is refused, never read to its end);
- parses within bounds: strict UTF-8, JSON nested at most `max_depth` deep (a `[` repeated 200,000 times
  is a RecursionError in any later walk), the top-level type the caller needs.

Every failure is `Unreadable`: one line naming the file and what is wrong with it. A missing file is
`Missing` (an Unreadable too), which most callers take as "nothing recorded yet".
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

MAX_DEPTH = 64  # the deepest file the launcher writes (state.json) nests 4 deep; a model's config.json about 6

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class Unreadable(Exception):
    """A file that cannot be used: `problem` says why, `str()` is one line that starts with the path."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class Missing(Unreadable):
    """No file at that path (nor a link)."""


class TooLarge(Unreadable):
    """More bytes than the file may hold."""


def kind_of(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | Path, *, follow: bool = False) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file at `path` and its fstat; the caller closes it."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise Missing(path, "no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise Unreadable(path, "is a symbolic link, which vllm-launch does not follow here") from None
        raise Unreadable(path, f"cannot be opened ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise Unreadable(path, f"cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Unreadable(path, f"is {kind_of(st.st_mode)}, not a regular file")
    return fd, st


def read_bytes(path: str | Path, limit: int, *, follow: bool = False) -> bytes:
    """The whole file, at most `limit` bytes (a larger one is Unreadable)."""
    fd, st = open_regular(path, follow=follow)
    try:
        if st.st_size > limit:
            raise TooLarge(path, f"is {st.st_size:,} bytes, more than the {limit:,} this file may hold")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # the size may have grown since the fstat: read one byte past the cap at most
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise Unreadable(path, f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise TooLarge(path, f"holds more than the {limit:,} bytes this file may hold")
    return b"".join(chunks)


def read_head(path: str | Path, count: int, *, follow: bool = False) -> tuple[bytes, int]:
    """The first `count` bytes of a regular file and its size (a safetensors header, an LFS pointer's line)."""
    fd, st = open_regular(path, follow=follow)
    try:
        return os.read(fd, count), st.st_size
    except OSError as exc:
        raise Unreadable(path, f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def decode(data: bytes, source: str | Path) -> str:
    """Strict UTF-8 (a leading BOM allowed)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Unreadable(source, f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8") from None


def read_text(path: str | Path, limit: int, *, follow: bool = False) -> str:
    return decode(read_bytes(path, limit, follow=follow), path)


def loads_json(data: bytes | str, source: str | Path, *, expect: type | tuple[type, ...] = dict,
               max_depth: int = MAX_DEPTH) -> Any:
    """JSON text as a value of type `expect`, nested at most `max_depth` deep; anything else is Unreadable."""
    text = decode(data, source) if isinstance(data, bytes) else data
    try:
        value = json.loads(text)
    except RecursionError:
        raise Unreadable(source, f"nests deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise Unreadable(source, f"is not JSON ({exc})") from None
    if depth_exceeds(value, max_depth):
        raise Unreadable(source, f"nests deeper than {max_depth} levels")
    if not isinstance(value, expect):
        wanted = " or ".join(_json_type(t) for t in (expect if isinstance(expect, tuple) else (expect,)))
        raise Unreadable(source, f"holds {_json_type(type(value))}, not {wanted}")
    return value


def read_json(path: str | Path, limit: int, *, follow: bool = False, expect: type | tuple[type, ...] = dict,
              max_depth: int = MAX_DEPTH) -> Any:
    """A JSON file read within every bound above."""
    return loads_json(read_bytes(path, limit, follow=follow), path, expect=expect, max_depth=max_depth)


def depth_exceeds(value: Any, max_depth: int) -> bool:
    """Whether lists and objects nest deeper than `max_depth` (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > max_depth:
                    return True
                stack.append((child, depth + 1))
    return False


def _json_type(kind: type) -> str:
    return {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
            bool: "true or false", type(None): "null"}.get(kind, kind.__name__)
