"""Before a relaunch on a GPU: wait until the memory the last attempt held is given back.

The driver frees a dead process's memory a little after the process is gone, and a process stuck
in the driver never frees it. Launching into that memory is an out-of-memory at start-up that the
ladder would misread as `startup_memory` and answer by lowering the utilization: so the next
attempt waits until each GPU's used memory is back near what preflight saw, and otherwise says
which PID holds it and does not launch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import structlog

from launcher.config.settings import default_seconds
from launcher.errors import TransientFailure
from launcher.gpu.inventory import GpuDevice, GpuInventory, GpuProbe
from launcher.units import GIB

log = structlog.get_logger("vllm_launch")

# Used memory within this much of the baseline counts as given back (the driver and other tenants move).
MARGIN_BYTES = GIB // 2
MARGIN_FRACTION = 0.02
RELEASE_TIMEOUT_S = default_seconds("gpu_release_timeout")


@dataclass(frozen=True, slots=True)
class Baseline:
    """Used bytes per GPU index, and the PIDs that held memory, before our first launch."""

    used: Mapping[int, int]
    pids: frozenset[int]


def baseline(devices: tuple[GpuDevice, ...]) -> Baseline:
    return Baseline({d.index: d.used_bytes for d in devices}, frozenset(p.pid for d in devices for p in d.processes))


def held(devices: tuple[GpuDevice, ...], base: Baseline, ours: frozenset[int] = frozenset()) -> list[GpuDevice]:
    """The GPUs whose used memory is still well above the baseline for a reason of ours: memory that a
    new process of someone else's holds is not waited for (the ladder reads free memory for that)."""
    busy = []
    for d in devices:
        if d.index not in base.used:
            continue
        strangers = sum(p.used_bytes or 0 for p in d.processes if p.pid not in base.pids and p.pid not in ours)
        if d.used_bytes - base.used[d.index] - strangers > max(MARGIN_BYTES, int(d.total_bytes * MARGIN_FRACTION)):
            busy.append(d)
    return busy


def as_if_stopped(inventory: GpuInventory, base: Baseline | None, ours: frozenset[int]) -> GpuInventory:
    """The GPUs as they will be once our serving tree has stopped and given its memory back, for a reload's
    preflight before the stop. Ours is what the driver lists under our PIDs; where it lists none of them (a
    container sees host PIDs, an old driver no per-process figure), the growth over the pre-launch baseline.
    A stranger's memory stays counted: it will still be held when the new vLLM starts."""
    if base is None:
        return inventory
    devices = []
    for d in inventory.devices:
        listed = [p for p in d.processes if p.pid in ours]
        if listed:
            held_by_us = sum(p.used_bytes or 0 for p in listed)
        else:
            held_by_us = max(0, d.used_bytes - base.used.get(d.index, d.used_bytes))
        held_by_us = min(held_by_us, d.used_bytes)
        devices.append(replace(d, used_bytes=d.used_bytes - held_by_us,
                               free_bytes=min(d.total_bytes, d.free_bytes + held_by_us),
                               processes=tuple(p for p in d.processes if p.pid not in ours)))
    return replace(inventory, devices=tuple(devices))


def wait_for_release(probe: GpuProbe, base: Baseline, wait: Callable[[float], bool], *,
                     ours: frozenset[int] = frozenset(), timeout_s: float = RELEASE_TIMEOUT_S,
                     clock: Callable[[], float] = time.monotonic) -> bool:
    """Block until the GPUs are back near the baseline (True), or a stop is asked for (False); raise
    TransientFailure naming the holders after `timeout_s`. `wait(seconds)` sleeps, True on a stop."""
    deadline = clock() + timeout_s
    announced = False
    while True:
        busy = held(probe.read().visible_devices, base, ours)
        if not busy:
            if announced:
                log.info("gpu.memory_released")
            return True
        if not announced:
            log.warning("gpu.memory_held", devices=[_describe(d, base) for d in busy],
                        action=f"waiting up to {timeout_s:.0f}s before the next launch")
            announced = True
        if clock() >= deadline:
            raise TransientFailure(f"GPU memory held by {'; '.join(_describe(d, base) for d in busy)} "
                                   f"{timeout_s:.0f}s after vLLM stopped; not relaunching into an "
                                   "out-of-memory (stop that process, or reboot if it is stuck in the driver)")
        if wait(1.0):
            return False


def _describe(device: GpuDevice, base: Baseline) -> str:
    extra = device.used_bytes - base.used.get(device.index, 0)
    holders = [f"PID {p.pid} ({p.name or '?'})" for p in device.processes if p.pid not in base.pids]
    who = ", ".join(holders) or "no listed process (the driver has not freed it yet)"
    return f"GPU {device.index}: {extra / GIB:.1f} GiB above the pre-launch baseline, {who}"
