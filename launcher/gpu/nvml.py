"""The NVML probe: `nvidia-ml-py` (module `pynvml`), imported lazily so `import launcher` works without a driver.

The module is a seam: tests pass a fake one. Missing optional NVML calls (old drivers) read as unknown.
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from launcher.gpu.inventory import NO_DRIVER_HINT, GpuDevice, GpuInventory, GpuProcess, apply_visibility

# Clock-event bits that slow a GPU down for thermal or power reasons (nvml.h); idle, app clocks,
# sync boost and display clocks are normal and not named.
_CLOCK_EVENTS = (
    (0x04, "sw_power_cap"),
    (0x08, "hw_slowdown"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
)
_COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}


class NvmlProbe:
    """NVML through `nvidia-ml-py` (module `pynvml`); the module is a seam for tests."""

    def __init__(self, nvml: ModuleType | None = None, environ: Mapping[str, str] | None = None) -> None:
        self._nvml = nvml
        self._environ = environ

    def read(self) -> GpuInventory:
        nvml: Any = self._nvml
        if nvml is None:
            try:
                with warnings.catch_warnings():  # the deprecated `pynvml` dist warns on import
                    warnings.simplefilter("ignore")
                    nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                return GpuInventory(source="nvml", error=f"no NVIDIA driver: cannot import pynvml ({exc}); "
                                    "install nvidia-ml-py, or this machine has no GPU")
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            if isinstance(exc, nvml.NVMLError_LibraryNotFound | nvml.NVMLError_DriverNotLoaded):
                return GpuInventory(source="nvml", error=f"no NVIDIA driver: {exc} ({NO_DRIVER_HINT})")
            return GpuInventory(source="nvml", error=f"NVML did not start: {exc}")
        try:
            return apply_visibility(self._read(nvml), self._environ)
        except nvml.NVMLError as exc:
            return GpuInventory(source="nvml", error=f"NVML failed while reading the GPUs: {exc}")
        finally:
            with contextlib.suppress(nvml.NVMLError):  # nothing left to release
                nvml.nvmlShutdown()

    def _read(self, nvml: Any) -> GpuInventory:
        opt = _Optional(nvml)
        devices = tuple(self._device(nvml, opt, i) for i in range(nvml.nvmlDeviceGetCount()))
        cuda = opt("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = opt("nvmlSystemGetCudaDriverVersion")
        return GpuInventory(
            source="nvml", devices=devices, driver_version=_text(opt("nvmlSystemGetDriverVersion")),
            cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
        )

    def _device(self, nvml: Any, opt: _Optional, index: int) -> GpuDevice:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        total, free, used, reserved = _memory(nvml, handle)
        cc = opt("nvmlDeviceGetCudaComputeCapability", handle)
        mig = opt("nvmlDeviceGetMigMode", handle)
        pci = opt("nvmlDeviceGetPciInfo", handle)
        mode = opt("nvmlDeviceGetComputeMode", handle)
        return GpuDevice(
            index=index, uuid=_text(opt("nvmlDeviceGetUUID", handle)), name=_text(nvml.nvmlDeviceGetName(handle))
            or "unknown", cc=(int(cc[0]), int(cc[1])) if cc else None, total_bytes=total, free_bytes=free,
            used_bytes=used, reserved_bytes=reserved, processes=_processes(nvml, opt, handle),
            mig_enabled=bool(mig[0] == nvml.NVML_DEVICE_MIG_ENABLE) if mig else None,
            ecc_uncorrected=opt("nvmlDeviceGetTotalEccErrors", handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                nvml.NVML_VOLATILE_ECC),
            compute_mode=_COMPUTE_MODES.get(mode, str(mode)) if mode is not None else None,
            temperature_c=opt("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU),
            throttle_reasons=_clock_events(nvml, opt, handle),
            pci_bus_id=_text(pci.busId) if pci is not None else None,
        )


class _Optional:
    """Calls an NVML getter whose answer is optional: unsupported, not permitted, or absent from these
    bindings or this driver → None."""

    def __init__(self, nvml: Any) -> None:
        names = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound",
                 "NVMLError_NotFound", "NVMLLibraryMismatchError")
        self.nvml = nvml
        self.errors = tuple(getattr(nvml, n) for n in names if hasattr(nvml, n))

    def __call__(self, name: str, *args: Any) -> Any:
        fn = getattr(self.nvml, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.errors:
            return None


def _memory(nvml: Any, handle: Any) -> tuple[int, int, int, int | None]:
    """(total, free, used, reserved): v2 separates driver-reserved memory, which v1 counts as used."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            mem = nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            return int(mem.total), int(mem.free), int(mem.used), int(mem.reserved)
        except (nvml.NVMLError_FunctionNotFound, TypeError):
            pass  # driver older than R510, or bindings without the version argument
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    return int(mem.total), int(mem.free), int(mem.used), None


def _processes(nvml: Any, opt: _Optional, handle: Any) -> tuple[GpuProcess, ...]:
    try:
        found = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except opt.errors:
        # The unversioned call wraps _v3; drivers older than R510 only have _v2.
        found = opt("nvmlDeviceGetComputeRunningProcesses_v2", handle) or []
    processes = []
    for proc in found:
        used = getattr(proc, "usedGpuMemory", None)
        name = opt("nvmlSystemGetProcessName", proc.pid)
        processes.append(GpuProcess(int(proc.pid), _text(name), int(used) if used is not None else None))
    return tuple(processes)


def _clock_events(nvml: Any, opt: _Optional, handle: Any) -> tuple[str, ...]:
    mask = opt("nvmlDeviceGetCurrentClocksEventReasons", handle)
    if mask is None:  # renamed in R535; the throttle name goes away in CUDA 14
        mask = opt("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    if not isinstance(mask, int):
        return ()
    return tuple(name for bit, name in _CLOCK_EVENTS if mask & bit)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)
