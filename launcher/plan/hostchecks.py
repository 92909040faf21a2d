"""Preflight checks of the host rather than the GPU: shared memory, disk for the download, CUDA, RAM for the CPU backend."""

from __future__ import annotations

import re

from launcher.config.profile import Profile
from launcher.gpu.inventory import GpuInventory
from launcher.plan.capacity import CapacityPlan
from launcher.plan.hostfacts import SHM_PATH, HostFacts
from launcher.plan.problems import ERROR, WARNING, Findings, gib
from launcher.units import GIB, MIB

MIN_SHM = GIB


def host_checks(profile: Profile, host: HostFacts, capacity: CapacityPlan | None, out: Findings) -> None:
    workers = profile.tensor_parallel_size * profile.pipeline_parallel_size
    if host.shm_bytes is not None and workers > 1 and host.shm_bytes < MIN_SHM:
        out.add(ERROR, "shm_too_small",
                f"{SHM_PATH} is {host.shm_bytes / MIB:.0f} MiB: {workers} GPU workers exchange tensors through it "
                "(NCCL, torch IPC) and need at least 1 GiB",
                "run the container with --ipc=host or --shm-size=16g (docker run); on Kubernetes mount an "
                "emptyDir with medium: Memory at /dev/shm")
    if host.model_downloaded is False and host.cache_free_bytes is not None:
        size = host.model_bytes or (capacity.weights_bytes if capacity else None)
        missing = size - host.model_present_bytes if size else 0
        if missing > host.cache_free_bytes:
            out.add(ERROR, "disk_space_low",
                    f"{profile.model} is not downloaded yet: it needs ~{gib(missing)} in {host.cache_dir}, "
                    f"{gib(host.cache_free_bytes)} is free there",
                    "free space there, or point HF_HOME (env: in the profile) at a larger volume "
                    "(on RunPod: /workspace/.cache/huggingface)")


def _version(text: str) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def cuda_check(inventory: GpuInventory, host: HostFacts, out: Findings) -> None:
    driver = _version(inventory.cuda_driver_version or "")
    torch = _version(host.torch_cuda or "")
    if driver is None or torch is None or driver >= torch:
        return
    what = (f"the driver supports CUDA {inventory.cuda_driver_version} (driver {inventory.driver_version}), older "
            f"than the CUDA {host.torch_cuda} vLLM's torch was built for")
    fix = (f"upgrade the NVIDIA driver to one for CUDA {host.torch_cuda}, or install a vLLM/torch build for CUDA "
           f"{inventory.cuda_driver_version}")
    if driver[0] < torch[0]:
        out.add(ERROR, "cuda_driver_too_old", f"{what}: CUDA will not initialise", fix)
    else:
        out.add(WARNING, "cuda_driver_too_old", f"{what}: minor-version compatibility usually works, PTX JIT may not",
                fix)


def host_memory_check(profile: Profile, host: HostFacts, capacity: CapacityPlan | None, out: Findings) -> None:
    """vLLM's CPU backend: weights plus the KV space must fit in the RAM that is available now."""
    if capacity is None or host.memory_available_bytes is None:
        return
    explicit = any("set explicitly" in a for a in capacity.assumptions)
    # Without an explicit KV size vLLM CPU asks for utilization × RAM, like the GPU free-memory check.
    need = capacity.weights_bytes + max(0, capacity.kv_budget_bytes) if explicit else capacity.budget_bytes
    if need > host.memory_available_bytes:
        out.add(ERROR, "host_memory_low",
                f"vLLM's CPU backend needs ~{gib(need)} of RAM for {profile.model}, {gib(host.memory_available_bytes)} "
                "is available",
                "set a smaller KV space (env: VLLM_CPU_KVCACHE_SPACE: 1, in GiB), a lower gpu-memory-utilization "
                "(it sizes CPU memory too), or free memory")
