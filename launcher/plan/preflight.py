"""GPU preflight: the checks that stop a doomed launch before minutes of weight loading.

`evaluate` is pure. It reads the inventory (gpuprobe), the host facts (hostfacts)
and the capacity plan, and returns the problems plus the flag changes that make a
launch possible: FP8 KV off on CC < 8.9, a lower utilization rung when another
process holds memory. `run_command` is the edge behind `vllm-launch preflight`.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from launcher.config.profile import FP8_KV_DTYPES, FlagValue, Profile, load
from launcher.gpu import inventory as gpuprobe
from launcher.gpu.catalog import GPU_TABLE, GpuModel, GpuSpec, lookup
from launcher.gpu.inventory import GpuDevice, GpuInventory, GpuProbe, GpuProcess
from launcher.plan.capacity import CapacityPlan
from launcher.plan.hostfacts import SHM_PATH, HostFacts, LocalProcess, host_facts
from launcher.units import GIB, MIB
from launcher.vllm.versions import VersionSemantics

__all__ = ["HostFacts", "PreflightResult", "Problem", "evaluate", "evaluate_inventory", "fitting_utilization",
           "gpu_spec", "host_facts", "inventory_from_spec", "render_text", "run_command"]

ERROR = "error"
WARNING = "warning"
# vLLM compares free memory with utilization × total after creating its own CUDA context
# (0.3–0.5 GiB), which NVML's free figure does not yet include.
FREE_MARGIN = GIB // 2
MIN_SHM = GIB
FP8_KV_MIN_CC = (8, 9)
_SLOWDOWNS = {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
_NO_GPU_FIX = ("check that the driver is loaded (`nvidia-smi`) and the container was started with GPUs "
               "(docker run --gpus all); on RunPod a restarted pod can come back with zero GPUs (its volume pins "
               "it to the host): restart the pod, or migrate it to a host with free GPUs")


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding: what is wrong, how bad, and what to do."""

    code: str
    severity: str  # "error" | "warning"
    message: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity, "message": self.message, "fix": self.fix}


@dataclass(frozen=True, slots=True)
class PreflightResult:
    """The inventory, the problems, and the flags preflight changed (with a line saying why)."""

    inventory: GpuInventory
    problems: tuple[Problem, ...]
    overrides: Mapping[str, FlagValue]
    changes: tuple[str, ...]
    gpu: GpuSpec | None

    @property
    def blocking(self) -> bool:
        return any(p.severity == ERROR for p in self.problems)

    def to_dict(self) -> dict[str, Any]:
        return {"inventory": self.inventory.to_dict(), "problems": [p.to_dict() for p in self.problems],
                "overrides": dict(self.overrides), "changes": list(self.changes), "blocking": self.blocking}


@dataclass(slots=True)
class _Findings:
    """The evaluation in progress (private and mutable; the result is frozen)."""

    problems: list[Problem] = field(default_factory=list)
    overrides: dict[str, FlagValue] = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)
    utilization: float | None = None  # after a rung change
    kv_factor: int = 1  # KV bytes per token multiplier after dropping FP8

    def add(self, severity: str, code: str, message: str, fix: str) -> None:
        self.problems.append(Problem(code, severity, message, fix))

    def result(self, inventory: GpuInventory, gpu: GpuSpec | None) -> PreflightResult:
        return PreflightResult(inventory, tuple(self.problems), MappingProxyType(dict(self.overrides)),
                               tuple(self.changes), gpu)


# --------------------------------------------------------------------------- GPU models and specs


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
    model = GpuModel(table.name if table else device.name, mib, _cc(device) or (0, 0))
    if table is not None:
        model = replace(model, cuda_visible=table.cuda_visible)
    cuda_total = device.cuda_total_bytes
    if cuda_total is not None and mib and abs(model.cuda_total_bytes - cuda_total) > MIB:
        model = replace(model, cuda_visible=cuda_total / (mib * MIB))
    return model


def _cc(device: GpuDevice) -> tuple[int, int] | None:
    """The device's compute capability, else the table's for its type (old drivers do not report it)."""
    table = match_gpu(device.name) if device.cc is None else None
    return device.cc or (table.cc if table else None)


def fitting_utilization(device: GpuDevice) -> float:
    """The highest gpu-memory-utilization (2 decimals, floored) that vLLM would accept on this device now."""
    total = device_model(device).cuda_total_bytes
    if total <= 0:
        return 0.0
    return max(0.0, math.floor((device.free_bytes - FREE_MARGIN) / total * 100) / 100)


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


# --------------------------------------------------------------------------- evaluation


def evaluate(profile: Profile, inventory: GpuInventory, *, host: HostFacts, capacity: CapacityPlan | None = None,
             version: VersionSemantics) -> PreflightResult:
    """Every check for launching `profile` on `inventory`. Pure: no I/O."""
    out = _Findings()
    if profile.launcher.device == "cpu":
        _leftover_check(host, out)
        _host_memory_check(profile, host, capacity, out)
        return out.result(inventory, None)
    if not _driver_check(inventory, out):
        return out.result(inventory, None)
    needed = profile.gpus_needed
    _count_check(inventory, needed, _parallel_words(profile), out)
    devices = inventory.visible_devices[:needed]
    if devices:
        base = profile.utilization or version.default_utilization
        _fp8_check(profile, devices, capacity, out)
        _free_memory_check(profile, devices, host, base, version, out)
        _foreign_check(devices, host, out)
        _capacity_check(profile, capacity, base, out)
        _health_checks(devices, out)
    _leftover_check(host, out)
    _host_checks(profile, host, capacity, out)
    _cuda_check(inventory, host, out)
    return out.result(inventory, gpu_spec(inventory, needed))


def evaluate_inventory(inventory: GpuInventory, host: HostFacts | None = None) -> PreflightResult:
    """The device-level checks alone, for `vllm-launch preflight` without a profile."""
    out = _Findings()
    host = host or HostFacts.none()
    if _driver_check(inventory, out):
        _count_check(inventory, 1, "vLLM", out)
        devices = inventory.visible_devices
        _leftover_check(host, out)
        _foreign_check(devices, host, out)
        _health_checks(devices, out)
        _cuda_check(inventory, host, out)
    return out.result(inventory, gpu_spec(inventory, len(inventory.visible)))


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _parallel_words(profile: Profile) -> str:
    words = [f"tensor-parallel-size {profile.tensor_parallel_size}"]
    if profile.pipeline_parallel_size > 1:
        words.append(f"pipeline-parallel-size {profile.pipeline_parallel_size}")
    if profile.gpus_needed != profile.tensor_parallel_size * profile.pipeline_parallel_size:
        words.append(f"data-parallel-size {profile.flag('data-parallel-size')}")
    return " × ".join(words)


def _driver_check(inventory: GpuInventory, out: _Findings) -> bool:
    """False (and an error) when no driver or no GPU answers: nothing else can be checked."""
    if inventory.error:
        code = "no_driver" if inventory.error.startswith("no NVIDIA driver") else "gpu_probe_failed"
        out.add(ERROR, code, inventory.error, _NO_GPU_FIX)
        return False
    if not inventory.devices:
        out.add(ERROR, "no_gpu", f"the NVIDIA driver answers ({inventory.source}) but reports 0 GPUs", _NO_GPU_FIX)
        return False
    return True


def _count_check(inventory: GpuInventory, needed: int, what: str, out: _Findings) -> None:
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
               out: _Findings) -> None:
    dtype = profile.kv_cache_dtype
    if dtype not in FP8_KV_DTYPES:
        return
    unknown = [d for d in devices if _cc(d) is None]
    if unknown:
        out.add(WARNING, "cc_unknown", f"GPU {unknown[0].index} ({unknown[0].name}) does not report its compute "
                f"capability (an old driver): kv-cache-dtype {dtype} needs 8.9 or newer",
                "check with `nvidia-smi --query-gpu=compute_cap --format=csv` after a driver update, "
                "or set kv-cache-dtype: auto")
        return
    old = [(d, c) for d in devices if (c := _cc(d)) is not None and c < FP8_KV_MIN_CC]
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
                       version: VersionSemantics, out: _Findings) -> None:
    """vLLM ≥ 0.9 refuses to start when free memory < utilization × total; lower rungs may fit."""
    short = [d for d in devices if d.free_bytes - FREE_MARGIN < util * device_model(d).cuda_total_bytes]
    if not short:
        return
    fit = min(fitting_utilization(d) for d in devices)
    device = short[0]
    total = device_model(device).cuda_total_bytes
    what = (f"GPU {device.index} has {_gib(device.free_bytes)} free of {_gib(total)} "
            f"({_holders(_processes(short), host)}): "
            f"gpu-memory-utilization {util} asks for {_gib(util * total)}")
    if not version.checks_free_memory_at_start:
        out.add(WARNING, "free_memory_low", f"{what}; vLLM {version.version} does not check this at start: expect "
                "CUDA out of memory or a smaller KV cache later",
                f"lower gpu-memory-utilization to {fit:.2f} or free the memory: {_owner_fix(short, host)}")
        return
    rungs = [r for r in profile.launcher.ladder.utilization_rungs if r <= fit and r < util]
    if rungs:
        rung = max(rungs)
        out.overrides["gpu-memory-utilization"] = rung
        out.utilization = rung
        out.add(WARNING, "free_memory_low", f"{what}; at most {fit:.2f} fits, so the launch starts at rung {rung}",
                f"to start at {util}: {_owner_fix(short, host)}")
        out.changes.append(f"starting at rung {rung}: {_gib(device.free_bytes)} free on GPU {device.index} fits "
                           f"gpu-memory-utilization ≤ {fit:.2f}, not {util}")
        return
    out.add(ERROR, "free_memory_low", f"{what}; at most {fit:.2f} would fit and no ladder rung is that low",
            f"set gpu-memory-utilization to {fit:.2f} or lower (or add it as the last rung of "
            f"launcher.ladder.gpu_memory_utilization), or free the memory: {_owner_fix(short, host)}")


def _leftover_check(host: HostFacts, out: _Findings) -> None:
    if host.leftovers:
        n = len(host.leftovers)
        out.add(WARNING, "leftover_processes",
                f"{n} leftover vLLM process{'es' if n > 1 else ''} of ours ({_local(host.leftovers)}) will be "
                "stopped before launch", "nothing to do for `up`; `vllm-launch down PROFILE` stops them now")


def _foreign_check(devices: Sequence[GpuDevice], host: HostFacts, out: _Findings) -> None:
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


def _capacity_check(profile: Profile, capacity: CapacityPlan | None, base: float, out: _Findings) -> None:
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
                f"the weights need {_gib(weights)} per GPU, more than gpu-memory-utilization {util} × "
                f"{_gib(total)} = {_gib(budget)}",
                f"use more GPUs (tensor-parallel-size {max(tp, profile.tensor_parallel_size + 1)} or more), a "
                "quantized checkpoint, or a larger GPU")
        return
    explicit = any("set explicitly" in a for a in capacity.assumptions)
    kv_budget = capacity.kv_budget_bytes if explicit else capacity.kv_budget_bytes - (capacity.budget_bytes - budget)
    reserve = capacity.activation_bytes + capacity.non_torch_bytes + capacity.cudagraph_bytes
    if kv_budget <= 0:
        out.add(WARNING, "no_kv_room",
                f"the weights ({_gib(weights)} per GPU) and the non-KV reserve ({_gib(reserve)}) leave no room for "
                f"the KV cache in {_gib(budget)}: vLLM would fail with \"No available memory for the cache blocks\"",
                "raise gpu-memory-utilization if free memory allows, set enforce-eager: true, lower "
                "max-num-batched-tokens, or use more GPUs")
        return
    changed = budget != capacity.budget_bytes or out.kv_factor != 1
    per_token = capacity.kv_bytes_per_token * out.kv_factor
    tokens = kv_budget // per_token if changed and per_token else capacity.kv_tokens
    if tokens < capacity.max_model_len:
        fit = tokens // 16 * 16
        out.add(WARNING, "context_too_long",
                f"one {capacity.max_model_len:,}-token request needs {_gib(capacity.max_model_len * per_token)} of KV "
                f"cache, only ~{tokens:,} tokens fit in {_gib(kv_budget)}",
                f"set max-model-len to {fit:,} or less (or launcher.ladder.min_model_len lets the ladder cut it), "
                "use fp8 KV on CC ≥ 8.9, a higher utilization, or more GPUs")


def _host_checks(profile: Profile, host: HostFacts, capacity: CapacityPlan | None, out: _Findings) -> None:
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
                    f"{profile.model} is not downloaded yet: it needs ~{_gib(missing)} in {host.cache_dir}, "
                    f"{_gib(host.cache_free_bytes)} is free there",
                    "free space there, or point HF_HOME (env: in the profile) at a larger volume "
                    "(on RunPod: /workspace/.cache/huggingface)")


def _health_checks(devices: Sequence[GpuDevice], out: _Findings) -> None:
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


def _version(text: str) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _cuda_check(inventory: GpuInventory, host: HostFacts, out: _Findings) -> None:
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


def _host_memory_check(profile: Profile, host: HostFacts, capacity: CapacityPlan | None, out: _Findings) -> None:
    """vLLM's CPU backend: weights plus the KV space must fit in the RAM that is available now."""
    if capacity is None or host.memory_available_bytes is None:
        return
    explicit = any("set explicitly" in a for a in capacity.assumptions)
    # Without an explicit KV size vLLM CPU asks for utilization × RAM, like the GPU free-memory check.
    need = capacity.weights_bytes + max(0, capacity.kv_budget_bytes) if explicit else capacity.budget_bytes
    if need > host.memory_available_bytes:
        out.add(ERROR, "host_memory_low",
                f"vLLM's CPU backend needs ~{_gib(need)} of RAM for {profile.model}, {_gib(host.memory_available_bytes)} "
                "is available",
                "set a smaller KV space (env: VLLM_CPU_KVCACHE_SPACE: 1, in GiB), a lower gpu-memory-utilization "
                "(it sizes CPU memory too), or free memory")


# --------------------------------------------------------------------------- the command


def run_command(profile_path: str | None, *, sets: Sequence[str] = (), inventory_path: str | None = None,
                environ: Mapping[str, str] | None = None,
                probe_factory: Callable[[Mapping[str, str] | None], GpuProbe | None] = gpuprobe.detect,
                state_pids: Sequence[int] = ()) -> PreflightResult:
    """`vllm-launch preflight [PROFILE] [--gpu-inventory FILE]`: read the GPUs and the host, then evaluate."""
    environ = os.environ if environ is None else environ
    prof = load(profile_path, sets) if profile_path else None
    if inventory_path:
        inventory = gpuprobe.FakeProbe(inventory_path, environ).read()
    elif prof is not None and prof.launcher.device == "cpu":
        inventory = GpuInventory(source="none", notes=("launcher.device: cpu: the GPUs are not probed",))
    else:
        probe = probe_factory(environ)
        inventory = probe.read() if probe is not None else GpuInventory(
            source="none", error="no NVIDIA driver: neither NVML (nvidia-ml-py) nor nvidia-smi answers on this machine")
    host = host_facts(prof, environ=environ, state_pids=state_pids)
    if prof is None:
        return evaluate_inventory(inventory, host)
    version, capacity = _capacity(prof, inventory, environ)
    return evaluate(prof, inventory, host=host, capacity=capacity, version=version)


def _capacity(prof: Profile, inventory: GpuInventory,
              environ: Mapping[str, str]) -> tuple[VersionSemantics, CapacityPlan | None]:
    """The installed vLLM's semantics and the capacity plan, when the model's config can be found."""
    from launcher.errors import ConfigError
    from launcher.plan import modelinfo
    from launcher.plan import report as planner
    from launcher.vllm import command, install

    try:
        vllm_path = install.find_vllm(prof.launcher.vllm_bin, environ)
    except ConfigError:
        vllm_path = None
    version, _, _ = planner.resolve_version(None, vllm_path)
    gpu = planner.host_gpu(environ) if prof.launcher.device == "cpu" else gpu_spec(inventory, prof.gpus_needed)
    if gpu is None:
        return version, None
    try:
        files = modelinfo.find_model(prof.model, None, {**environ, **prof.env})
        plan = command.build_plan(prof)
        return version, planner.capacity_for(prof, plan, gpu, version, files, None)
    except (ConfigError, ValueError, ZeroDivisionError):
        return version, None


# --------------------------------------------------------------------------- text output


def render_text(result: PreflightResult) -> str:
    """Devices, problems and changes as a readable table."""
    inv = result.inventory
    head = [f"GPUs ({inv.source}" + (f", driver {inv.driver_version}" if inv.driver_version else "")
            + (f", CUDA {inv.cuda_driver_version}" if inv.cuda_driver_version else "") + ")"]
    if inv.devices:
        head.append(f"  {'idx':>3}  {'name':<28} {'CC':>4}  {'used':>6}  {'free':>6}  {'total':>6} GiB  processes")
        for d in inv.devices:
            cc = f"{d.cc[0]}.{d.cc[1]}" if d.cc else "?"
            mark = " " if d.index in inv.visible else "-"  # not visible to vLLM
            procs = ", ".join(f"{p.pid} {p.name or '?'}" + (f" {p.used_bytes / GIB:.2f} GiB" if p.used_bytes else "")
                              for p in d.processes) or "-"
            head.append(f" {mark}{d.index:>3}  {d.name[:28]:<28} {cc:>4}  {d.used_bytes / GIB:6.2f}  "
                        f"{d.free_bytes / GIB:6.2f}  {d.total_bytes / GIB:6.2f}      {procs}")
    head += [f"  note: {n}" for n in inv.notes]
    lines = head
    if result.problems:
        lines.append("Problems:")
        for p in result.problems:
            lines.append(f"  {p.severity.upper():7s} {p.code}: {p.message}")
            lines.append(f"          fix: {p.fix}")
    if result.changes:
        lines.append("Changes:")
        lines += [f"  - {c}" for c in result.changes]
    errors = sum(p.severity == ERROR for p in result.problems)
    warnings = len(result.problems) - errors
    verdict = "BLOCKED" if result.blocking else "OK"
    lines.append(f"preflight: {verdict} ({errors} error{'s' if errors != 1 else ''}, "
                 f"{warnings} warning{'s' if warnings != 1 else ''})")
    return "\n".join(lines)
