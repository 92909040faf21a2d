"""What every process of the fake tree shares: paths, output, events, argv reading and process names."""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
FAKES = PACKAGE.parent  # tests/fakes: where `vllm` lives, and what a child puts on sys.path
DATA = FAKES.parent / "data"
HELP = DATA / "help" / "serve_help_all-0.32.0.txt"
PR_SET_NAME = 15

_OUT = threading.Lock()  # the HTTP threads and the main thread write whole lines, never interleaved
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|[kmgt]b?|B)?\s*$")
_UNITS = {None: 1, "B": 1}
for _power, _letter in enumerate("KMGT", start=1):
    _UNITS.update({_letter: 1024**_power, f"{_letter}i": 1024**_power, f"{_letter}iB": 1024**_power,
                   f"{_letter}B": 1000**_power, _letter.lower(): 1000**_power, f"{_letter.lower()}b": 1000**_power})


def emit(line: str) -> None:
    """One whole line on stdout, flushed."""
    write(line + "\n")


def write(text: str) -> None:
    """Raw text on stdout, flushed at once (a progress bar redraw has no newline)."""
    with _OUT:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except (BrokenPipeError, ValueError):
            pass  # nobody reads any more (the supervisor is gone): vLLM would not die of it either


def mark(kind: str, **extra: object) -> None:
    """A timing mark as a JSON line in $FAKE_VLLM_EVENTS, for tests that measure latencies."""
    path = os.environ.get("FAKE_VLLM_EVENTS")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps({"event": kind, "time": time.time(), "pid": os.getpid(), **extra}) + "\n")


def option(argv: list[str], name: str, default: str | None = None, many: bool = False) -> str | list[str] | None:
    """The value(s) of `--name VALUE` (or `--name=VALUE`) in argv."""
    for i, arg in enumerate(argv):
        if arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
            return [value] if many else value
        if arg != name:
            continue
        values = []
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            values.append(argv[j])
            j += 1
            if not many:
                break
        return values if many else (values[0] if values else default)
    return default


def text_option(argv: list[str], name: str, default: str) -> str:
    value = option(argv, name, default)
    return value if isinstance(value, str) else default


def tensor_parallel_size(argv: list[str]) -> int:
    value = option(argv, "--tensor-parallel-size") or option(argv, "-tp")
    try:
        return max(1, int(str(value))) if isinstance(value, str) else 1
    except ValueError:
        return 1


def parse_size(value: object) -> int:
    """Bytes from 1073741824, "20GiB", "512MiB", "2G" (binary) or "2GB" (decimal), as the launcher reads them."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int | float):
        return int(value)
    match = _SIZE.match(str(value))
    if match is None or match.group(2) not in _UNITS:
        raise ValueError(f"not a size: {value!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def set_process_name(name: str) -> None:
    """What setproctitle does where psutil looks: /proc/PID/comm (15 characters) via prctl(PR_SET_NAME).

    The full name comes from argv[0], which the parent set when it started this interpreter: psutil.name()
    extends a 15-character comm with basename(cmdline[0]) when that starts with it.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


def interpreter() -> str:
    """The running interpreter's binary: a child started under a made-up argv[0] has an empty sys.executable."""
    if sys.executable:
        return sys.executable
    return str(Path("/proc/self/exe").readlink())


def state_dir() -> Path | None:
    """$FAKE_VLLM_STATE, else the scenario file's folder, else None (no shm marker then)."""
    value = os.environ.get("FAKE_VLLM_STATE")
    if value:
        return Path(value)
    scenarios = os.environ.get("FAKE_VLLM_SCENARIOS")
    return Path(scenarios).parent if scenarios else None
