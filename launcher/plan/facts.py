"""What `plan`, `preflight` and `up` stand on, gathered one way: the GPUs, the model's files, the capacity
estimate and what this box measured instead.

Where the inventory comes from, the one "no GPU" message, and which failures mean "no estimate" are
decided here. Each caller keeps what is its own: plan the --gpu simulation and its report, preflight
the host facts and the checks, up the leftovers, the GPU baseline and the refusal to launch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from launcher.config.profile import Profile
from launcher.errors import ConfigError, UsageError
from launcher.gpu.catalog import GpuSpec
from launcher.gpu.detect import detect
from launcher.gpu.inventory import GpuInventory, GpuProbe
from launcher.gpu.inventory_file import FakeProbe
from launcher.gpu.match import gpu_spec, host_gpu
from launcher.plan import calibration, modelinfo
from launcher.plan.capacity import CapacityPlan, capacity_for, capacity_inputs
from launcher.vllm.command import Plan
from launcher.vllm.diagnose import diagnose_lines
from launcher.vllm.versions import VersionSemantics

# Starts with "no NVIDIA driver": preflight files it under the no_driver code, like the probes' own errors.
NO_GPU = "no NVIDIA driver: neither NVML (nvidia-ml-py) nor nvidia-smi answers on this machine"

# A model whose config.json cannot be found or read (ConfigError), or one the estimator cannot size
# (ValueError, ZeroDivisionError from odd config values): no estimate, and the reason is kept. Anything
# else is a bug and raises.
NO_ESTIMATE: tuple[type[Exception], ...] = (ConfigError, ValueError, ArithmeticError)

ProbeFactory = Callable[[Mapping[str, str] | None], GpuProbe | None]


def gpu_probe(inventory_path: str | None, environ: Mapping[str, str],
              probe_factory: ProbeFactory | None = None) -> GpuProbe | None:
    """Where the GPUs are read from: the --gpu-inventory file, else NVML or nvidia-smi (`detect`, unless a
    caller brings its own factory); None: neither answers."""
    if inventory_path:
        return FakeProbe(inventory_path, environ)
    return (probe_factory or detect)(environ)


def read_inventory(inventory_path: str | None, environ: Mapping[str, str],
                   probe_factory: ProbeFactory | None = None) -> GpuInventory:
    """The GPUs as `gpu_probe` reads them; when neither probe answers, an inventory whose error is NO_GPU."""
    probe = gpu_probe(inventory_path, environ, probe_factory)
    return probe.read() if probe is not None else GpuInventory(source="none", error=NO_GPU)


def no_gpu(inventory: GpuInventory) -> bool:
    """Neither NVML nor nvidia-smi answered (read_inventory's NO_GPU inventory)."""
    return inventory.source == "none" and inventory.error == NO_GPU


@dataclass(frozen=True, slots=True)
class Facts:
    """The GPUs a profile is sized for, its model's files and its capacity."""

    inventory: GpuInventory | None  # None: the CPU backend, sized on host memory
    gpu: GpuSpec | None  # None: the inventory holds no usable GPU (its error says why)
    files: modelinfo.ModelFiles | None
    estimate: CapacityPlan | None  # from the model's config and the GPU alone
    capacity: CapacityPlan | None  # the estimate, or what a measured start-up of the same setup gives
    no_estimate: str | None = None  # why the model gave no estimate (None without a GPU to size for)


def gather(profile: Profile, plan: Plan, inventory: GpuInventory | None, *, version: VersionSemantics,
           environ: Mapping[str, str], model_config: str | None = None, weights_gib: float | None = None,
           records: Path | None = None, from_log: str | None = None) -> Facts:
    """The facts for `plan` (the argv the estimate reads) on `inventory` (None: host memory), the capacity
    calibrated where `records` or `from_log` hold a measurement of the same setup (see `calibrated`)."""
    gpu = host_gpu(environ) if inventory is None else gpu_spec(inventory, profile.gpus_needed)
    try:
        # The model is looked up where vLLM will look: with the profile's env (its HF_HOME) applied.
        files = modelinfo.find_model(profile.model, model_config, {**environ, **profile.env})
    except NO_ESTIMATE as exc:
        return Facts(inventory, gpu, None, None, None, str(exc))
    if gpu is None:
        return Facts(inventory, None, files, None, None)
    try:
        estimate = capacity_for(profile, plan, gpu, version, files, weights_gib)
    except NO_ESTIMATE as exc:
        reason = str(exc) if isinstance(exc, ConfigError) else f"{profile.model}: config.json cannot be sized ({exc})"
        return Facts(inventory, gpu, files, None, None, reason)
    facts = Facts(inventory, gpu, files, estimate, estimate)
    return calibrated(facts, profile, plan, version, weights_gib=weights_gib, records=records, from_log=from_log)


def calibrated(facts: Facts, profile: Profile, plan: Plan, version: VersionSemantics, *,
               weights_gib: float | None = None, records: Path | None = None, from_log: str | None = None) -> Facts:
    """The facts with the estimate replaced by what a start-up of the same setup measured: the vLLM log
    `from_log` (`plan --from-log`), else this box's records in the `records` directory where one matches.
    GPU runs only: the CPU backend keeps no records."""
    gpu, files, estimate = facts.gpu, facts.files, facts.estimate
    if gpu is None or files is None or estimate is None or gpu.source == "host" or not (from_log or records):
        return facts
    driver = facts.inventory.driver_version if facts.inventory is not None else None
    capacity = _measured(profile, plan, gpu, version, files, weights_gib, estimate,
                         records=records, from_log=from_log, driver=driver)
    return replace(facts, capacity=capacity)


def _measured(profile: Profile, plan: Plan, gpu: GpuSpec, version: VersionSemantics,
                files: modelinfo.ModelFiles, weights_gib: float | None, estimate: CapacityPlan, *,
                records: Path | None, from_log: str | None, driver: str | None) -> CapacityPlan:
    """The estimate replaced by what a real start-up measured: an existing log, or this box's records."""
    inputs = capacity_inputs(profile, plan, gpu, version, files, weights_gib)
    record_key = calibration.key(gpu.model.name, gpu.count, version.version, profile.model, plan.flags)
    if from_log:
        try:
            with open(from_log, encoding="utf-8", errors="replace") as handle:
                numbers = diagnose_lines(handle).numbers
        except OSError as exc:
            raise UsageError(f"--from-log {from_log}: cannot read it ({exc.strerror})") from None
        record = calibration.measured(numbers, record_key=record_key, vllm_version=version.version,
                                      utilization=inputs.utilization, max_model_len=inputs.max_model_len,
                                      source=from_log)
        if record is None:
            raise UsageError(f"--from-log {from_log}: the log holds no 'Available KV cache memory' and "
                             "'KV cache size' lines (vLLM prints them once the engine sized its cache); pass the "
                             "log of a start-up that got that far")
    else:
        assert records is not None  # noqa: S101 - calibrated calls with one of the two
        record = calibration.matching(calibration.load(records).values(), record_key, driver)
        if record is None:
            return estimate
    return calibration.predict(inputs, record, estimate)
