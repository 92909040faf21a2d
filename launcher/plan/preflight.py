"""GPU preflight: the checks that stop a doomed launch before minutes of weight loading.

`evaluate` is pure. It reads the inventory (gpuprobe), the host facts (hostfacts)
and the capacity plan, and returns the problems plus the flag changes that make a
launch possible: FP8 KV off on CC < 8.9, a lower utilization rung when another
process holds memory. `run_command` is the edge behind `vllm-launch preflight`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from launcher.config.profile import FP8_KV_DTYPES, Profile
from launcher.gpu.inventory import GpuDevice, GpuInventory, GpuProcess
from launcher.gpu.match import device_cc, device_model, gpu_spec
from launcher.plan.capacity import CapacityPlan
from launcher.plan.hostchecks import cuda_check, host_checks, host_memory_check
from launcher.plan.hostfacts import HostFacts
from launcher.plan.ownership import LocalProcess
from launcher.plan.problems import ERROR, WARNING, Findings, PreflightResult, gib
from launcher.units import GIB
from launcher.vllm.versions import DEFAULT_BLOCK_SIZE, VersionSemantics

# vLLM compares free memory with utilization × total after creating its own CUDA context
# (0.3–0.5 GiB), which NVML's free figure does not yet include: every "does this utilization fit" keeps it
# free (here, and the ladder's reading of vLLM's own free-memory figures).
FREE_MARGIN = GIB // 2
FP8_KV_MIN_CC = (8, 9)
_SLOWDOWNS = {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
_NO_GPU_FIX = ("check that the driver is loaded (`nvidia-smi`) and the container was started with GPUs "
               "(docker run --gpus all); on RunPod a restarted pod can come back with zero GPUs (its volume pins "
               "it to the host): restart the pod, or migrate it to a host with free GPUs")


def fitting_utilization(device: GpuDevice) -> float:
    """The highest gpu-memory-utilization (2 decimals, floored) that vLLM would accept on this device now."""
    total = device_model(device).cuda_total_bytes
    if total <= 0:
        return 0.0
    return max(0.0, math.floor((device.free_bytes - FREE_MARGIN) / total * 100) / 100)


def lower_rung_that_fits(rungs: Sequence[float], current: float, fits: float | None) -> float | None:
    """The highest of the ladder's rungs (highest first) below `current` and at most `fits` (None: any fits), or
    None when there is none: where preflight starts and where the ladder goes after startup_memory."""
    return next((r for r in rungs if r < current - 1e-9 and (fits is None or r <= fits)), None)


def evaluate(profile: Profile, inventory: GpuInventory, *, host: HostFacts, capacity: CapacityPlan | None = None,
             version: VersionSemantics) -> PreflightResult:
    """Every check for launching `profile` on `inventory`. Pure: no I/O."""
    out = Findings()
    if profile.launcher.device == "cpu":
        _leftover_check(host, out)
        host_memory_check(profile, host, capacity, out)
        return out.result(inventory, None)
    if not _driver_check(inventory, out):
        return out.result(inventory, None)
    needed = profile.gpus_needed
    _count_check(inventory, needed, _parallel_words(profile), out)
    devices = inventory.visible_devices[:needed]
    if devices:
        base = version.utilization(profile.utilization)
        _fp8_check(profile, devices, capacity, out)
        _free_memory_check(profile, devices, host, base, version, out)
        _foreign_check(devices, host, out)
        _capacity_check(profile, capacity, base, out)
        _health_checks(devices, out)
    _leftover_check(host, out)
    host_checks(profile, host, capacity, out)
    cuda_check(inventory, host, out)
    return out.result(inventory, gpu_spec(inventory, needed))


def evaluate_inventory(inventory: GpuInventory, host: HostFacts | None = None) -> PreflightResult:
    """The device-level checks alone, for `vllm-launch preflight` without a profile."""
    out = Findings()
    host = host or HostFacts.none()
    if _driver_check(inventory, out):
        _count_check(inventory, 1, "vLLM", out)
        devices = inventory.visible_devices
        _leftover_check(host, out)
        _foreign_check(devices, host, out)
        _health_checks(devices, out)
        cuda_check(inventory, host, out)
    return out.result(inventory, gpu_spec(inventory, len(inventory.visible)))


def _parallel_words(profile: Profile) -> str:
    words = [f"tensor-parallel-size {profile.tensor_parallel_size}"]
    if profile.pipeline_parallel_size > 1:
        words.append(f"pipeline-parallel-size {profile.pipeline_parallel_size}")
    if profile.gpus_needed != profile.tensor_parallel_size * profile.pipeline_parallel_size:
        words.append(f"data-parallel-size {profile.flag('data-parallel-size')}")
    return " × ".join(words)


def _driver_check(inventory: GpuInventory, out: Findings) -> bool:
    """False (and an error) when no driver or no GPU answers: nothing else can be checked."""
    if inventory.error:
        code = "no_driver" if inventory.error.startswith("no NVIDIA driver") else "gpu_probe_failed"
        out.add(ERROR, code, inventory.error, _NO_GPU_FIX)
        return False
    if not inventory.devices:
        out.add(ERROR, "no_gpu", f"the NVIDIA driver answers ({inventory.source}) but reports 0 GPUs", _NO_GPU_FIX)
        return False
    return True


def _count_check(inventory: GpuInventory, needed: int, what: str, out: Findings) -> None:
    visible = len(inventory.visible)
    if visible >= needed:
        return
    cvd = inventory.cuda_visible_devices
    shown = "unset" if cvd is None else repr(cvd)
    message = (f"{what} needs {needed} GPU{'s' if needed > 1 else ''}, {visible} visible "
               f"({len(inventory.devices)} on the machine, CUDA_VISIBLE_DEVICES {shown})")
    if len(inventory.devices) >= needed:
        indices = ",".join(str(d.index) for d in inventory.devices[:needed])
        fix = f"set CUDA_VISIBLE_DEVICES to {needed} devices (e.g. {indices}) or unset it"
    else:
        fix = (f"lower tensor-parallel-size (× pipeline-parallel-size) to at most {len(inventory.devices)}, "
               f"or run on a machine with {needed} GPUs")
    out.add(ERROR, "not_enough_gpus", message, fix)


def _fp8_check(profile: Profile, devices: Sequence[GpuDevice], capacity: CapacityPlan | None,
               out: Findings) -> None:
    dtype = profile.kv_cache_dtype
    if dtype not in FP8_KV_DTYPES:
        return
    unknown = [d for d in devices if device_cc(d) is None]
    if unknown:
        out.add(WARNING, "cc_unknown", f"GPU {unknown[0].index} ({unknown[0].name}) does not report its compute "
                f"capability (an old driver): kv-cache-dtype {dtype} needs 8.9 or newer",
                "check with `nvidia-smi --query-gpu=compute_cap --format=csv` after a driver update, "
                "or set kv-cache-dtype: auto")
        return
    old = [(d, c) for d in devices if (c := device_cc(d)) is not None and c < FP8_KV_MIN_CC]
    if not old:
        return
    device, (major, minor) = old[0]
    cc = f"{major}.{minor}"
    what = (f"GPU {device.index} ({device.name}) has compute capability {cc}: kv-cache-dtype {dtype} needs 8.9 "
            "or newer (Ada, Hopper, Blackwell)")
    if not profile.launcher.ladder.drop_fp8_kv_if_unsupported:
        out.add(ERROR, "fp8_kv_unsupported", what,
                "set kv-cache-dtype: auto (KV capacity halves), use a GPU with CC ≥ 8.9, or allow the launcher to "
                "do it: launcher.ladder.drop_fp8_kv_if_unsupported: true")
        return
    out.overrides["kv-cache-dtype"] = "auto"
    out.kv_factor = 2
    out.add(WARNING, "fp8_kv_unsupported", f"{what}; the KV cache falls back to auto (the model's dtype)",
            "nothing to do; to keep FP8 KV use a GPU with CC ≥ 8.9, or write kv-cache-dtype: auto to silence this")
    if capacity is not None and capacity.kv_tokens > 0:
        halves = f"KV capacity halves: ~{capacity.kv_tokens:,} → ~{capacity.kv_tokens // 2:,} tokens"
    else:
        halves = "KV capacity halves (KV bytes per token double)"
    out.changes.append(f"kv-cache-dtype {dtype} → auto: GPU {device.index} (CC {cc}) has no FP8 KV cache; {halves}")


def _holders(processes: Sequence[GpuProcess], host: HostFacts) -> str:
    ours = {p.pid for p in host.leftovers}
    listed = [f"pid {p.pid} {p.name or '?'} " + (f"{p.used_bytes / GIB:.2f} GiB" if p.used_bytes is not None else "? GiB")
              + (" (ours)" if p.pid in ours else "") for p in processes]
    return ", ".join(listed) if listed else "no process listed"


def _processes(devices: Sequence[GpuDevice]) -> list[GpuProcess]:
    return [p for d in devices for p in d.processes]


def _owner_fix(devices: Sequence[GpuDevice], host: HostFacts) -> str:
    ours = {p.pid for p in host.leftovers}
    foreign = [p for p in _processes(devices) if p.pid not in ours]
    parts = []
    if host.leftovers:
        parts.append(f"our leftover vLLM processes ({_local(host.leftovers)}) probably hold it: `up` stops them "
                     "before launch; run preflight again once they are gone")
    if foreign:
        parts.append(f"processes that are not ours hold memory ({_holders(foreign, host)}): stop them "
                     "yourself, the launcher never signals them")
    if not parts:
        parts.append("no process is listed (processes of other containers are invisible from here): free the GPU")
    return "; ".join(parts)


def _local(processes: Sequence[LocalProcess]) -> str:
    return ", ".join(f"pid {p.pid} {p.name}" for p in processes)


def _free_memory_check(profile: Profile, devices: Sequence[GpuDevice], host: HostFacts, util: float,
                       version: VersionSemantics, out: Findings) -> None:
    """vLLM ≥ 0.9 refuses to start when free memory < utilization × total; lower rungs may fit."""
    short = [d for d in devices if d.free_bytes - FREE_MARGIN < util * device_model(d).cuda_total_bytes]
    if not short:
        return
    fit = min(fitting_utilization(d) for d in devices)
    device = short[0]
    total = device_model(device).cuda_total_bytes
    what = (f"GPU {device.index} has {gib(device.free_bytes)} free of {gib(total)} "
            f"({_holders(_processes(short), host)}): "
            f"gpu-memory-utilization {util} asks for {gib(util * total)}")
    if not version.checks_free_memory_at_start:
        out.add(WARNING, "free_memory_low", f"{what}; vLLM {version.version} does not check this at start: expect "
                "CUDA out of memory or a smaller KV cache later",
                f"lower gpu-memory-utilization to {fit:.2f} or free the memory: {_owner_fix(short, host)}")
        return
    rung = lower_rung_that_fits(profile.launcher.ladder.utilization_rungs, util, fit)
    if rung is not None:
        out.overrides["gpu-memory-utilization"] = rung
        out.utilization = rung
        out.add(WARNING, "free_memory_low", f"{what}; at most {fit:.2f} fits, so the launch starts at rung {rung}",
                f"to start at {util}: {_owner_fix(short, host)}")
        out.changes.append(f"starting at rung {rung}: {gib(device.free_bytes)} free on GPU {device.index} fits "
                           f"gpu-memory-utilization ≤ {fit:.2f}, not {util}")
        return
    out.add(ERROR, "free_memory_low", f"{what}; at most {fit:.2f} would fit and no ladder rung is that low",
            f"set gpu-memory-utilization to {fit:.2f} or lower (or add it as the last rung of "
            f"launcher.ladder.gpu_memory_utilization), or free the memory: {_owner_fix(short, host)}")


def _leftover_check(host: HostFacts, out: Findings) -> None:
    if host.leftovers:
        n = len(host.leftovers)
        out.add(WARNING, "leftover_processes",
                f"{n} leftover vLLM process{'es' if n > 1 else ''} of ours ({_local(host.leftovers)}) will be "
                "stopped before launch", "nothing to do for `up`; `vllm-launch down PROFILE` stops them now")
    if host.strangers:
        n = len(host.strangers)
        # Nothing proves these ours (plan/ownership.py): a notebook's LLM(), `vllm bench`, a Ray replica.
        out.add(WARNING, "vllm_processes_not_ours",
                f"{n} vLLM process{'es' if n > 1 else ''} that nothing shows to be ours ("
                + ", ".join(f"pid {p.pid} {p.name}: {p.why}" for p in host.strangers) + ") are left alone",
                "if they hold memory this profile needs, stop them yourself; what a killed `vllm-launch up` left "
                "is known by its state and stopped by the next `up` or by `vllm-launch down PROFILE`")


def _foreign_check(devices: Sequence[GpuDevice], host: HostFacts, out: Findings) -> None:
    # NVML PIDs are host PIDs inside a container: a match with one of our local PIDs may be a
    # coincidence, so the match only labels; nothing here ever signals a process.
    ours = {p.pid for p in host.leftovers}
    for device in devices:
        foreign = [p for p in device.processes if p.pid not in ours]
        if not foreign:
            continue
        out.add(WARNING, "foreign_processes",
                f"GPU {device.index} ({device.name}) is shared with processes that are not ours: {_holders(foreign, host)}; "
                f"at most gpu-memory-utilization {fitting_utilization(device):.2f} fits beside them",
                "they are reported, never signalled (inside a container NVML shows host PIDs): stop them yourself "
                "if they should not run, or plan with that utilization")


def _capacity_check(profile: Profile, capacity: CapacityPlan | None, base: float, out: Findings) -> None:
    """Weights against the budget (an error), then KV room and context (warnings), after preflight's changes."""
    if capacity is None:
        return
    util = out.utilization or base
    budget = capacity.budget_bytes if util == base else int(capacity.budget_bytes * util / base)
    total = capacity.budget_bytes / base
    weights = capacity.weights_per_gpu_bytes
    if weights >= budget:
        tp = math.ceil(capacity.weights_bytes / budget) if budget > 0 else 0
        out.add(ERROR, "weights_do_not_fit",
                f"the weights need {gib(weights)} per GPU, more than gpu-memory-utilization {util} × "
                f"{gib(total)} = {gib(budget)}",
                f"use more GPUs (tensor-parallel-size {max(tp, profile.tensor_parallel_size + 1)} or more), a "
                "quantized checkpoint, or a larger GPU")
        return
    explicit = any("set explicitly" in a for a in capacity.assumptions)
    kv_budget = capacity.kv_budget_bytes if explicit else capacity.kv_budget_bytes - (capacity.budget_bytes - budget)
    reserve = capacity.activation_bytes + capacity.non_torch_bytes + capacity.cudagraph_bytes
    if kv_budget <= 0:
        out.add(WARNING, "no_kv_room",
                f"the weights ({gib(weights)} per GPU) and the non-KV reserve ({gib(reserve)}) leave no room for "
                f"the KV cache in {gib(budget)}: vLLM would fail with \"No available memory for the cache blocks\"",
                "raise gpu-memory-utilization if free memory allows, set enforce-eager: true, lower "
                "max-num-batched-tokens, or use more GPUs")
        return
    changed = budget != capacity.budget_bytes or out.kv_factor != 1
    per_token = capacity.kv_bytes_per_token * out.kv_factor
    tokens = kv_budget // per_token if changed and per_token else capacity.kv_tokens
    if tokens < capacity.max_model_len:
        fit = tokens // DEFAULT_BLOCK_SIZE * DEFAULT_BLOCK_SIZE
        out.add(WARNING, "context_too_long",
                f"one {capacity.max_model_len:,}-token request needs {gib(capacity.max_model_len * per_token)} of KV "
                f"cache, only ~{tokens:,} tokens fit in {gib(kv_budget)}",
                f"set max-model-len to {fit:,} or less (or launcher.ladder.min_model_len lets the ladder cut it), "
                "use fp8 KV on CC ≥ 8.9, a higher utilization, or more GPUs")


def _health_checks(devices: Sequence[GpuDevice], out: Findings) -> None:
    for d in devices:
        gpu = f"GPU {d.index} ({d.name})"
        if d.mig_enabled:
            out.add(WARNING, "mig_enabled", f"{gpu} has MIG enabled: CUDA sees only the MIG instances named in "
                    "CUDA_VISIBLE_DEVICES, each with a slice of the memory shown here",
                    f"disable MIG (`nvidia-smi -i {d.index} -mig 0`, then reset the GPU) or set CUDA_VISIBLE_DEVICES "
                    "to a MIG UUID and plan for that slice (--gpu \"mem=...\")")
        if d.compute_mode == "prohibited":
            # A warning would let a launch run that cannot create a single CUDA context.
            out.add(ERROR, "compute_mode", f"{gpu} is in compute mode PROHIBITED: no process may use it",
                    f"`nvidia-smi -i {d.index} -c DEFAULT` (as root), or use another GPU")
        elif d.compute_mode in ("exclusive_process", "exclusive_thread"):
            out.add(WARNING, "compute_mode", f"{gpu} is in compute mode {d.compute_mode.upper()}: only one process "
                    "may hold a CUDA context, and vLLM's API server, engine and workers are several",
                    f"`nvidia-smi -i {d.index} -c DEFAULT` (as root) if the launch fails with \"busy or unavailable\"")
        if d.ecc_uncorrected:
            # A warning, not an error: the volatile count stays above zero until the driver reloads,
            # even after Ampere+ row remapping retired the bad memory; a real fault shows at once as
            # an engine crash (Xid 48/94) that the supervisor reports.
            out.add(WARNING, "ecc_errors", f"{gpu} has {d.ecc_uncorrected} uncorrected ECC error"
                    f"{'s' if d.ecc_uncorrected > 1 else ''} since the driver loaded",
                    "if vLLM crashes with Xid 48/94 in `dmesg`, reset the GPU (or reboot / migrate the pod)")
        slow = [r for r in d.throttle_reasons if r in _SLOWDOWNS]
        if slow:
            temp = f" at {d.temperature_c} °C" if d.temperature_c is not None else ""
            out.add(WARNING, "gpu_throttled", f"{gpu} is slowed down{temp}: {', '.join(slow)}",
                    "check cooling and power (`nvidia-smi -q -d PERFORMANCE,TEMPERATURE`): throughput will suffer")
