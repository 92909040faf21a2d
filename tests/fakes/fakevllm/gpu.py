"""The fake tree's GPU memory, written into the inventory file the launcher reads with `--gpu-inventory FILE`.

Protocol (used when $FAKE_VLLM_INVENTORY names a JSON inventory file and the scenario has `gpu_memory`):

- Every change happens under `fcntl.flock(LOCK_EX)` on `<file>.lock` (created if missing): read the
  JSON, change it, write it to `<file>.<pid>.tmp` and `os.replace` it over the file, so a reader never
  sees half a file and two writers never lose each other's entries.
- At start, the process that holds a device's memory appends to `devices[i]["processes"]` (i is the
  position in the list; a device missing from the list is skipped):
      {"pid": <pid>, "name": "VLLM::EngineCore", "used": <gpu_memory bytes>, "release_on_exit": true}
  With tensor parallelism 1 that is the EngineCore on device 0; with TP=N each worker VLLM::Worker_TP<i>
  registers device i under its own pid and name, and the engine registers nothing. `gpu_memory` is per
  device. The device's own `used`/`free` keys are left alone: the reader accounts for the entries.
- When it exits by itself (SIGTERM, the engine's exit for a worker, or an engine's own death with
  `die_after_s`), the process sets `"held_until": time.time() + release_delay_s` on its entries and
  leaves them in the file: the driver frees a process's memory a little after it exits. A process
  killed with SIGKILL writes nothing (its entries go as soon as its pid is dead).
- The reader drops an entry whose pid is dead and whose `held_until` (when present) has passed
  (`release_on_exit: true` says the memory goes with the process); every other entry counts as used.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def inventory_file() -> Path | None:
    value = os.environ.get("FAKE_VLLM_INVENTORY")
    return Path(value) if value else None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def update(path: Path, change: Callable[[dict[str, Any]], None]) -> bool:
    """Apply `change` to the inventory document under the lock; False when the file is missing or not JSON."""
    with _locked(path):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return False
        if not isinstance(data, dict):
            return False
        change(data)
        tmp = Path(f"{path}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(path)
        return True


def register(device: int, name: str, used: int, pid: int | None = None) -> bool:
    """Append this process's entry to devices[device]["processes"]."""
    path = inventory_file()
    if path is None:
        return False
    entry = {"pid": os.getpid() if pid is None else pid, "name": name, "used": used, "release_on_exit": True}

    def change(data: dict[str, Any]) -> None:
        devices = data.get("devices")
        if isinstance(devices, list) and 0 <= device < len(devices) and isinstance(devices[device], dict):
            devices[device].setdefault("processes", []).append(entry)

    return update(path, change)


def release(delay_s: float, pid: int | None = None) -> bool:
    """Set held_until on every entry of this process (the memory is freed delay_s after now)."""
    path = inventory_file()
    if path is None:
        return False
    me = os.getpid() if pid is None else pid
    until = time.time() + delay_s

    def change(data: dict[str, Any]) -> None:
        for device in data.get("devices") or []:
            for entry in (device.get("processes") or []) if isinstance(device, dict) else []:
                if isinstance(entry, dict) and entry.get("pid") == me:
                    entry["held_until"] = until

    return update(path, change)
