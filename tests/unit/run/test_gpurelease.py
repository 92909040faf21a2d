"""Before a relaunch the GPU memory of the last attempt must be given back, else a clear stop (exit 75)."""

from __future__ import annotations

import pytest

from launcher.errors import TransientFailure
from launcher.gpu.inventory import GpuDevice, GpuInventory, GpuProcess
from launcher.run import gpurelease
from launcher.units import GIB

TOTAL = 48 * GIB


def device(used_gib: float, *procs: tuple[int, float]) -> GpuDevice:
    used = int(used_gib * GIB)
    return GpuDevice(0, None, "NVIDIA L40S", (8, 9), TOTAL, TOTAL - used, used,
                     processes=tuple(GpuProcess(pid, "python3", int(gib * GIB)) for pid, gib in procs))


class Probe:
    """Reads a scripted sequence of devices, the last one for ever."""

    def __init__(self, *states: GpuDevice) -> None:
        self.states = list(states)
        self.reads = 0

    def read(self) -> GpuInventory:
        self.reads += 1
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return GpuInventory(source="test", devices=(state,), visible=(0,))


BASE = gpurelease.baseline((device(1.0, (77, 1.0)),))


def test_back_near_the_baseline_counts_as_released() -> None:
    assert [] == gpurelease.held((device(1.5, (77, 1.0)),), BASE)
    assert [0] == [d.index for d in gpurelease.held((device(20.0, (77, 1.0)),), BASE)]


def test_a_strangers_new_process_is_not_ours_to_wait_for() -> None:
    """Another tenant started meanwhile: the ladder reads its memory as less free, nothing waits for it."""
    assert [] == gpurelease.held((device(21.0, (77, 1.0), (900, 20.0)),), BASE, ours=frozenset({500}))
    assert [0] == [d.index for d in gpurelease.held((device(21.0, (77, 1.0), (500, 20.0)),), BASE,
                                                    ours=frozenset({500}))]


def test_waits_until_the_driver_frees_it() -> None:
    probe = Probe(device(20.0), device(20.0), device(1.0))
    waits: list[float] = []
    assert gpurelease.wait_for_release(probe, BASE, lambda s: waits.append(s) is not None) is True
    assert probe.reads == 3 and waits == [1.0, 1.0]


def test_memory_that_stays_held_names_the_pid_and_does_not_launch() -> None:
    now = [0.0]

    def wait(seconds: float) -> bool:
        now[0] += seconds
        return False

    with pytest.raises(TransientFailure) as failure:
        gpurelease.wait_for_release(Probe(device(21.0, (77, 1.0), (4242, 20.0))), BASE, wait,
                                    ours=frozenset({4242}), timeout_s=5, clock=lambda: now[0])
    assert "GPU memory held by GPU 0: 20.0 GiB above the pre-launch baseline, PID 4242 (python3)" in str(failure.value)
    assert failure.value.exit_code == 75


def test_a_stop_ends_the_wait() -> None:
    assert gpurelease.wait_for_release(Probe(device(20.0)), BASE, lambda s: True) is False


def free_gib(inventory: GpuInventory) -> float:
    return round(inventory.devices[0].free_bytes / GIB, 2)


def test_a_reload_counts_the_memory_our_serving_tree_holds_as_free() -> None:
    """Before a reload stops vLLM, preflight sees the GPU as the new vLLM will: our engine's 40 GiB free,
    the notebook's (PID 77, there before our launch) and a newcomer's (PID 900) still held."""
    now = GpuInventory(source="test", devices=(device(51.0 - 3, (77, 1.0), (500, 40.0), (900, 7.0)),), visible=(0,))
    after = gpurelease.as_if_stopped(now, BASE, frozenset({500, 501}))
    assert free_gib(now) + 40.0 == free_gib(after)
    assert [77, 900] == [p.pid for p in after.devices[0].processes]


def test_without_our_pids_in_the_driver_list_the_growth_over_the_baseline_is_ours() -> None:
    """In a container NVML lists host PIDs (none of ours): what grew since our launch is counted as ours."""
    now = GpuInventory(source="test", devices=(device(41.0, (77, 1.0), (12345, 40.0)),), visible=(0,))
    assert free_gib(now) + 40.0 == free_gib(gpurelease.as_if_stopped(now, BASE, frozenset({500})))
    assert now == gpurelease.as_if_stopped(now, None, frozenset({500})), "no baseline (no GPU): as it is"
