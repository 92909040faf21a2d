"""Which catalog model a probed device is, and the GpuSpec a plan is made for.

NVML names ("NVIDIA A100-SXM4-80GB") are matched to the catalog's entries; the device's own
total and compute capability win over the table's, which fills in what old drivers leave out.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import replace

from launcher.gpu.catalog import GPU_TABLE, GpuModel, GpuSpec, lookup
from launcher.gpu.inventory import GpuDevice, GpuInventory
from launcher.units import MIB


def match_gpu(name: str) -> GpuModel | None:
    """The GPU_TABLE entry for an NVML name such as "NVIDIA A100-SXM4-80GB" or "NVIDIA GeForce RTX 4090"."""
    direct = lookup(name)
    if direct is not None:
        return direct
    tokens = [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t and t not in ("nvidia", "geforce", "tesla")]
    words = set(tokens) | {a + b for a, b in itertools.pairwise(tokens)}
    for key in sorted(GPU_TABLE, key=len, reverse=True):  # "h100-nvl" before "h100"
        if all(part in words for part in key.split("-")):
            return GPU_TABLE[key]
    return None


def device_model(device: GpuDevice) -> GpuModel:
    """The device as a GpuModel: the table's CUDA-visible share for its type, its own total."""
    table = match_gpu(device.name)
    mib = device.total_bytes // MIB
    model = GpuModel(table.name if table else device.name, mib, device_cc(device) or (0, 0))
    if table is not None:
        model = replace(model, cuda_visible=table.cuda_visible, fabric=table.fabric)
    cuda_total = device.cuda_total_bytes
    if cuda_total is not None and mib and abs(model.cuda_total_bytes - cuda_total) > MIB:
        model = replace(model, cuda_visible=cuda_total / (mib * MIB))
    return model


def device_cc(device: GpuDevice) -> tuple[int, int] | None:
    """The device's compute capability, else the table's for its type (old drivers do not report it)."""
    table = match_gpu(device.name) if device.cc is None else None
    return device.cc or (table.cc if table else None)


def gpu_spec(inventory: GpuInventory, count: int) -> GpuSpec | None:
    """A GpuSpec for the first `count` visible devices (the smallest one sizes the plan); None without one."""
    devices = inventory.visible_devices[:max(1, count)]
    if not devices:
        return None
    smallest = min(devices, key=lambda d: d.total_bytes)
    source = {"nvml": "probe", "nvidia-smi": "probe"}.get(inventory.source, inventory.source)
    return GpuSpec(device_model(smallest), len(devices), source, tuple(d.free_bytes for d in devices))


def inventory_from_spec(spec: GpuSpec) -> GpuInventory:
    """`spec.count` idle devices of the spec's model, so that `plan --gpu` runs the same checks."""
    total = spec.model.nvml_mib * MIB
    devices = tuple(GpuDevice(index=i, uuid=None, name=spec.model.name, cc=spec.model.cc, total_bytes=total,
                              free_bytes=spec.total_bytes, used_bytes=0, reserved_bytes=total - spec.total_bytes,
                              cuda_total_bytes=spec.total_bytes) for i in range(spec.count))
    return GpuInventory(source="simulated", devices=devices, visible=tuple(range(spec.count)),
                        notes=(f"simulated: {spec.describe()}, all memory free",))


def host_gpu(environ: Mapping[str, str]) -> GpuSpec:
    """The CPU backend's "device": host memory (vLLM sizes its KV cache from it)."""
    import psutil

    total = psutil.virtual_memory().total
    return GpuSpec(GpuModel("cpu", int(total / MIB), (0, 0), 1.0), 1, "host")
