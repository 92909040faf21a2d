"""The GPU inventory records and the `GpuProbe` seam that every probe implements.

Probes: NVML (`gpu.nvml`), `nvidia-smi` CSV (`gpu.smi`) and inventory files (`gpu.inventory_file`), chosen by
`gpu.detect`. Every probe returns a `GpuInventory`; a missing driver is an inventory with `error` set, never an
exception, so that preflight can say what to do about it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from launcher.units import GIB

NO_DRIVER_HINT = "the machine or container has no NVIDIA driver or no GPU attached"


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute process on a device. NVML PIDs are host PIDs: never signal one."""

    pid: int
    name: str | None
    used_bytes: int | None  # None when the driver does not say (usedGpuMemory None / [N/A])


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    uuid: str | None
    name: str
    cc: tuple[int, int] | None  # compute capability; None when unknown (old drivers)
    total_bytes: int
    free_bytes: int
    used_bytes: int
    reserved_bytes: int | None = None  # driver-reserved (NVML memory v2); None with the v1 API
    processes: tuple[GpuProcess, ...] = ()
    mig_enabled: bool | None = None
    ecc_uncorrected: int | None = None
    compute_mode: str | None = None  # "default", "exclusive_process", "prohibited"
    temperature_c: int | None = None
    throttle_reasons: tuple[str, ...] = ()
    pci_bus_id: str | None = None
    cuda_total_bytes: int | None = None  # what CUDA reports as total, when known (simulated GPUs)


@dataclass(frozen=True, slots=True)
class GpuInventory:
    """What the probe saw. `error` is set (and `devices` empty) when no driver or GPU answers."""

    source: str  # "nvml", "nvidia-smi", "inventory", "simulated", "none"
    devices: tuple[GpuDevice, ...] = ()
    visible: tuple[int, ...] = ()  # indices (into devices) vLLM will see, per CUDA_VISIBLE_DEVICES
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # e.g. "12.8"
    error: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    cuda_visible_devices: str | None = None  # the variable as set; None when unset

    @property
    def visible_devices(self) -> tuple[GpuDevice, ...]:
        by_index = {d.index: d for d in self.devices}
        return tuple(by_index[i] for i in self.visible if i in by_index)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; FakeProbe reads it back (sizes as bytes, plus GiB for people)."""
        return {
            "source": self.source,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "error": self.error,
            "cuda_visible_devices": self.cuda_visible_devices,
            "visible": list(self.visible),
            "notes": list(self.notes),
            "devices": [_device_dict(d) for d in self.devices],
        }


def _gib(n: int | None) -> float | None:
    return None if n is None else round(n / GIB, 2)


def _device_dict(d: GpuDevice) -> dict[str, Any]:
    data: dict[str, Any] = {"index": d.index, "uuid": d.uuid, "name": d.name, "pci_bus_id": d.pci_bus_id,
                            "cc": list(d.cc) if d.cc else None}
    for key in ("total", "free", "used", "reserved", "cuda_total"):
        value = getattr(d, f"{key}_bytes")
        data[f"{key}_bytes"] = value
        data[f"{key}_gib"] = _gib(value)
    data["processes"] = [{"pid": p.pid, "name": p.name, "used_bytes": p.used_bytes, "used_gib": _gib(p.used_bytes)}
                         for p in d.processes]
    data.update({"mig_enabled": d.mig_enabled, "ecc_uncorrected": d.ecc_uncorrected,
                 "compute_mode": d.compute_mode, "temperature_c": d.temperature_c,
                 "throttle_reasons": list(d.throttle_reasons)})
    return data


class GpuProbe(Protocol):
    """Anything that can read a GpuInventory (NVML, nvidia-smi, an inventory file)."""

    def read(self) -> GpuInventory: ...


def apply_visibility(inventory: GpuInventory, environ: Mapping[str, str] | None) -> GpuInventory:
    """Set `visible` (in CUDA's order) and a note naming what vLLM will see."""
    environ = os.environ if environ is None else environ
    value = environ.get("CUDA_VISIBLE_DEVICES")
    devices = inventory.devices
    notes = list(inventory.notes)
    if value is None:
        visible = tuple(d.index for d in devices)
    else:
        visible, extra = _parse_visible(value, devices)
        notes += extra
    if devices:
        seen = ", ".join(f"{i} ({d.name})" for i, d in zip(visible, _by_index(devices, visible), strict=True))
        where = "CUDA_VISIBLE_DEVICES unset" if value is None else f"CUDA_VISIBLE_DEVICES={value!r}"
        notes.append(f"{where}: vLLM will see {seen or 'no GPU'}")
        names = {d.name for d in devices}
        if value and len(names) > 1 and environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" \
                and any(p.strip().isdigit() for p in value.split(",")):
            # NVML numbers GPUs in PCI order, CUDA fastest first: mixed models can disagree.
            notes.append("mixed GPU models and numeric CUDA_VISIBLE_DEVICES: set CUDA_DEVICE_ORDER=PCI_BUS_ID "
                         "so that CUDA's numbering matches NVML's")
    return replace(inventory, visible=visible, notes=tuple(notes), cuda_visible_devices=value)


def _by_index(devices: Sequence[GpuDevice], indices: Sequence[int]) -> tuple[GpuDevice, ...]:
    by_index = {d.index: d for d in devices}
    return tuple(by_index[i] for i in indices)


def _parse_visible(value: str, devices: Sequence[GpuDevice]) -> tuple[tuple[int, ...], list[str]]:
    """CUDA's rules: indices or (prefixes of) UUIDs; the first entry it cannot resolve ends the list."""
    visible: list[int] = []
    notes: list[str] = []
    mig_devices = [d.index for d in devices if d.mig_enabled]
    for raw in value.split(","):
        entry = raw.strip()
        index: int | None = None
        if entry.isdigit():
            index = int(entry) if any(d.index == int(entry) for d in devices) else None
        elif entry.startswith("MIG-"):
            parent = entry.removeprefix("MIG-").split("/")[0]
            matches = [d.index for d in devices if d.uuid and parent.startswith("GPU-") and d.uuid == parent]
            index = matches[0] if matches else (mig_devices[0] if len(mig_devices) == 1 else None)
            notes.append(f"CUDA_VISIBLE_DEVICES names MIG instance {entry}: vLLM sees that slice, not the whole GPU; "
                         "the memory figures here are the parent GPU's")
        elif entry.startswith("GPU-"):
            matches = [d.index for d in devices if d.uuid and d.uuid.startswith(entry)]
            index = matches[0] if len(matches) == 1 else None
        if index is None:
            if entry:
                notes.append(f"CUDA_VISIBLE_DEVICES entry {entry!r} matches no GPU: CUDA ignores it and every "
                             "entry after it")
            break
        if index not in visible:
            visible.append(index)
    return tuple(visible), notes
