"""Inventory files (YAML or JSON) in place of a GPU: the probe behind tests and `--gpu-inventory FILE`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from launcher import safefile
from launcher.errors import UsageError
from launcher.gpu.inventory import GpuDevice, GpuInventory, GpuProcess, apply_visibility
from launcher.procstat import alive
from launcher.units import BadValue, parse_size, true_or_false, whole_number

T = TypeVar("T")
MAX_BYTES = 2**20  # an inventory lists a few GPUs: a few hundred bytes


class FakeProbe:
    """Reads an inventory file (YAML or JSON) instead of a GPU: tests and `--gpu-inventory FILE`.

    The format (tests/data/inventories/README.md has examples)::

        driver_version: "570.124.06"      # optional
        cuda_driver_version: "12.8"       # optional; what the driver supports
        error: null                       # set it to simulate "no driver" (devices then empty)
        devices:
          - name: NVIDIA L40S             # required
            total: 46068MiB               # required; bytes as an int, or "48GiB", "46068MiB"
            free: 45000MiB                # default: total - used - reserved
            used: 523MiB                  # default: total - free - reserved
            index: 0                      # default: position in the list
            uuid: GPU-5e1b...             # optional, as are all keys below
            cc: "8.9"                     # or [8, 9]
            reserved: 0                   # driver-reserved (NVML memory v2)
            cuda_total: 45469MiB          # what CUDA calls total, when known
            processes: [{pid: 4242, name: python3, used: 6GiB}]
            # An entry with release_on_exit: true is memory a live process takes on top of free/used (the
            # integration fake registers its engine so); it is dropped once that PID is gone and its
            # held_until (epoch seconds: the driver still freeing it) has passed.
            mig_enabled: false
            ecc_uncorrected: 0
            compute_mode: default         # exclusive_process, prohibited
            temperature_c: 45
            throttle_reasons: [hw_thermal_slowdown]
            pci_bus_id: "00000000:01:00.0"

    `GpuInventory.to_dict()` output is also accepted (`*_bytes` keys; `*_gib` keys are ignored).
    """

    def __init__(self, path: str | Path, environ: Mapping[str, str] | None = None) -> None:
        self.path = Path(path)
        self._environ = environ

    def read(self) -> GpuInventory:
        return load_inventory(self.path, self._environ)


def load_inventory(path: str | Path, environ: Mapping[str, str] | None = None) -> GpuInventory:
    """An inventory file as a GpuInventory; a bad file is a UsageError naming the file and the key."""
    path = Path(path)
    try:  # read as every file the launcher did not write: a regular file, bounded, never waiting on a FIFO
        data = yaml.safe_load(safefile.read_text(path, MAX_BYTES, follow=True))  # JSON is YAML
    except safefile.Missing:
        raise UsageError(f"--gpu-inventory {path}: cannot read it (no such file); check the path") from None
    except safefile.Unreadable as exc:
        raise UsageError(f"--gpu-inventory {path}: {exc.problem}; name an inventory file") from None
    except RecursionError:
        raise UsageError(f"--gpu-inventory {path}: nested too deep; see tests/data/inventories/README.md") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--gpu-inventory {path}: not YAML or JSON ({' '.join(str(exc).split())}); "
                         "fix the syntax") from None
    if not isinstance(data, Mapping):
        raise UsageError(f"--gpu-inventory {path}: expected a mapping with a devices: list; "
                         "see tests/data/inventories/README.md")
    return inventory_from_dict(data, origin=str(path), environ=environ)


def inventory_from_dict(data: Mapping[str, Any], *, origin: str = "<inventory>",
                        environ: Mapping[str, str] | None = None, source: str = "inventory") -> GpuInventory:
    """Read an inventory document (the format of tests/data/inventories/README.md).

    `visible` and `notes` in the document are ignored: they are recomputed from
    CUDA_VISIBLE_DEVICES in `environ`, which is what the launched vLLM will see.
    """
    return _InventoryReader(origin).inventory(data, environ, source)


class _InventoryReader:
    """Validates an inventory document; every failure names the origin and the key."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, key: str, problem: str, fix: str) -> UsageError:
        return UsageError(f"{self.origin}: {key}: {problem}; {fix}")

    def inventory(self, data: Mapping[str, Any], environ: Mapping[str, str] | None, source: str) -> GpuInventory:
        raw_devices = data.get("devices") or []
        if not isinstance(raw_devices, list):
            raise self.fail("devices", "expected a list", "write devices: as a list of `- name: ...` items")
        devices = tuple(self.device(item, position) for position, item in enumerate(raw_devices))
        indices = [d.index for d in devices]
        if len(set(indices)) != len(indices):
            raise self.fail("devices", f"index given twice ({indices})", "give each device its own index")
        error = data.get("error")
        inventory = GpuInventory(
            source=source, devices=devices if error is None else (),
            driver_version=self.text(data, "driver_version", "driver_version"),
            cuda_driver_version=self.text(data, "cuda_driver_version", "cuda_driver_version"),
            error=str(error) if error is not None else None,
            notes=(f"read from {self.origin}",),
        )
        return apply_visibility(inventory, environ)

    def text(self, data: Mapping[str, Any], name: str, key: str) -> str | None:
        value = data.get(name)
        if value is None:
            return None
        if isinstance(value, bool | dict | list):
            raise self.fail(key, f"expected text, got {value!r}", f"write {name}: \"...\"")
        return str(value)

    def size(self, data: Mapping[str, Any], name: str, key: str) -> int | None:
        value = data.get(name, data.get(f"{name}_bytes"))
        if value is None:
            return None
        try:
            size = parse_size(value)
        except ValueError:
            raise self.fail(key, f"expected a size, got {value!r}",
                            f"write {name}: 48GiB, 46068MiB or a number of bytes") from None
        if size < 0:
            raise self.fail(key, "a size cannot be negative", f"write {name}: 0 or more")
        return size

    def integer(self, data: Mapping[str, Any], name: str, key: str) -> int | None:
        return self._checked(data, name, key, whole_number, "0")

    def boolean(self, data: Mapping[str, Any], name: str, key: str) -> bool | None:
        return self._checked(data, name, key, true_or_false, "true")

    def _checked(self, data: Mapping[str, Any], name: str, key: str, check: Callable[[Any], T],
                 example: str) -> T | None:
        """`name` read through the profile's own check (launcher/units.py); absent is None."""
        value = data.get(name)
        if value is None:
            return None
        try:
            return check(value)
        except BadValue as exc:
            raise self.fail(key, exc.problem, f"write {name}: {example}") from None

    def device(self, item: Any, position: int) -> GpuDevice:
        key = f"devices[{position}]"
        if not isinstance(item, Mapping):
            raise self.fail(key, "expected a mapping", "write each device as `- name: ...` with total: and free:")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise self.fail(f"{key}.name", "missing", "write name: NVIDIA L40S (as nvidia-smi prints it)")
        total = self.size(item, "total", f"{key}.total")
        if total is None:
            raise self.fail(f"{key}.total", "missing", "write total: 46068MiB (memory.total)")
        reserved = self.size(item, "reserved", f"{key}.reserved")
        free = self.size(item, "free", f"{key}.free")
        used = self.size(item, "used", f"{key}.used")
        if free is None:
            free = total - (used or 0) - (reserved or 0)
        if used is None:
            used = max(0, total - free - (reserved or 0))
        if free > total or free < 0:
            raise self.fail(f"{key}.free", f"{free} bytes free of {total} total", "free must be between 0 and total")
        processes, taken = self.processes(item.get("processes"), f"{key}.processes")
        free, used = max(0, free - taken), used + min(taken, free)
        index = self.integer(item, "index", f"{key}.index")
        throttle = item.get("throttle_reasons") or []
        if not isinstance(throttle, list):
            raise self.fail(f"{key}.throttle_reasons", "expected a list", "write throttle_reasons: [hw_slowdown]")
        mig = self.boolean(item, "mig_enabled", f"{key}.mig_enabled")
        return GpuDevice(
            index=position if index is None else index, uuid=self.text(item, "uuid", f"{key}.uuid"), name=name,
            cc=self.cc(item.get("cc"), f"{key}.cc"), total_bytes=total, free_bytes=free, used_bytes=used,
            reserved_bytes=reserved, processes=processes,
            mig_enabled=mig, ecc_uncorrected=self.integer(item, "ecc_uncorrected", f"{key}.ecc_uncorrected"),
            compute_mode=self.text(item, "compute_mode", f"{key}.compute_mode"),
            temperature_c=self.integer(item, "temperature_c", f"{key}.temperature_c"),
            throttle_reasons=tuple(str(t) for t in throttle),
            pci_bus_id=self.text(item, "pci_bus_id", f"{key}.pci_bus_id"),
            cuda_total_bytes=self.size(item, "cuda_total", f"{key}.cuda_total"),
        )

    def cc(self, value: Any, key: str) -> tuple[int, int] | None:
        if value is None:
            return None
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
            return int(value[0]), int(value[1])
        major, sep, minor = str(value).partition(".")
        if isinstance(value, bool) or not (sep and major.isdigit() and minor.isdigit()):
            raise self.fail(key, f"expected a compute capability, got {value!r}", "write cc: \"8.9\" or cc: [8, 9]")
        return int(major), int(minor)

    def processes(self, value: Any, key: str) -> tuple[tuple[GpuProcess, ...], int]:
        """The processes, and the bytes that live release_on_exit entries take on top of free/used."""
        if value is None:
            return (), 0
        if not isinstance(value, list):
            raise self.fail(key, "expected a list", "write processes: [{pid: 4242, name: python3, used: 6GiB}]")
        found = []
        taken = 0
        for n, proc in enumerate(value):
            where = f"{key}[{n}]"
            if not isinstance(proc, Mapping):
                raise self.fail(where, "expected a mapping", "write {pid: 4242, name: python3, used: 6GiB}")
            pid = self.integer(proc, "pid", f"{where}.pid")
            if pid is None:
                raise self.fail(f"{where}.pid", "missing", "write pid: 4242")
            used = self.size(proc, "used", f"{where}.used")
            if proc.get("release_on_exit") is True:
                held_until = proc.get("held_until")
                lingering = isinstance(held_until, int | float) and time.time() < held_until
                if not (alive(pid) or lingering):  # a zombie has given its memory back
                    continue
                taken += used or 0
            found.append(GpuProcess(pid, self.text(proc, "name", f"{where}.name"), used))
        return tuple(found), taken
