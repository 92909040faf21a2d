"""Reading the GPUs: the `GpuProbe` seam and its inventory records.

Implementations: NVML (`nvidia-ml-py`, imported lazily so that `import launcher`
works without a driver), `nvidia-smi` CSV as a fallback, and a fake that reads an
inventory file (YAML or JSON) for tests and `--gpu-inventory FILE`. Every probe
returns a `GpuInventory`; a missing driver is an inventory with `error` set, never
an exception, so that preflight can say what to do about it.
"""

from __future__ import annotations

import contextlib
import csv
import importlib
import os
import shutil
import subprocess
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from launcher.errors import UsageError
from launcher.units import GIB, MIB, parse_size


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, origin: str = "<inventory>",
                  environ: Mapping[str, str] | None = None, source: str = "inventory") -> GpuInventory:
        """Read an inventory document (the format of tests/data/inventories/README.md).

        `visible` and `notes` in the document are ignored: they are recomputed from
        CUDA_VISIBLE_DEVICES in `environ`, which is what the launched vLLM will see.
        """
        return _InventoryReader(origin).inventory(data, environ, source)


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


# --------------------------------------------------------------------------- CUDA_VISIBLE_DEVICES


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


# --------------------------------------------------------------------------- NVML


_NO_DRIVER_HINT = "the machine or container has no NVIDIA driver or no GPU attached"
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
                return GpuInventory(source="nvml", error=f"no NVIDIA driver: {exc} ({_NO_DRIVER_HINT})")
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


# --------------------------------------------------------------------------- nvidia-smi


SMI_GPU_FIELDS = ("index", "uuid", "pci.bus_id", "name", "compute_cap", "memory.total", "memory.used",
                  "memory.free", "driver_version")
SMI_APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
_SMI_NONE = {"[N/A]", "[Not Supported]", "N/A", "", "[Unknown Error]", "[Insufficient Permissions]"}

Runner = Callable[..., subprocess.CompletedProcess[str]]


class SmiProbe:
    """`nvidia-smi` CSV queries: the fallback when the NVML bindings are missing. Always time-limited."""

    def __init__(self, run: Runner = subprocess.run, timeout: float = 10.0,
                 environ: Mapping[str, str] | None = None) -> None:
        self._run = run
        self._timeout = timeout
        self._environ = environ

    def read(self) -> GpuInventory:
        fields: tuple[str, ...] = SMI_GPU_FIELDS
        try:
            done = self._query("--query-gpu", fields)
            if done.returncode != 0 and "is not a valid field to query" in _output(done):
                fields = tuple(f for f in fields if f != "compute_cap")  # drivers before R510
                done = self._query("--query-gpu", fields)
            if done.returncode != 0:
                return GpuInventory(source="nvidia-smi", error=_smi_failure(done))
            devices = [_smi_device(dict(zip(fields, row, strict=False))) for row in _csv(done.stdout)]
            apps = self._query("--query-compute-apps", SMI_APP_FIELDS)
        except FileNotFoundError:
            return GpuInventory(source="nvidia-smi", error=f"no NVIDIA driver: nvidia-smi is not on PATH "
                                f"({_NO_DRIVER_HINT})")
        except subprocess.TimeoutExpired:
            return GpuInventory(source="nvidia-smi", error=f"nvidia-smi timed out after {self._timeout:g}s "
                                "(a wedged GPU?); check `dmesg` for Xid errors, the GPU may need a reset")
        except OSError as exc:
            return GpuInventory(source="nvidia-smi", error=f"cannot run nvidia-smi: {exc}")
        notes: list[str] = []
        if "compute_cap" not in fields:
            notes.append("this driver's nvidia-smi cannot report compute capability: FP8 support is unknown")
        if apps.returncode == 0:
            devices = _attach_processes(devices, _csv(apps.stdout))
        else:
            notes.append(f"nvidia-smi could not list compute processes: {_output(apps).strip()[:200]}")
        driver = next((d for _, d in devices if d), None)
        inventory = GpuInventory(source="nvidia-smi", devices=tuple(dev for dev, _ in devices),
                                 driver_version=driver, notes=tuple(notes))
        return apply_visibility(inventory, self._environ)

    def _query(self, query: str, fields: Sequence[str]) -> subprocess.CompletedProcess[str]:
        argv = ["nvidia-smi", f"{query}={','.join(fields)}", "--format=csv,noheader,nounits"]
        return self._run(argv, capture_output=True, text=True, timeout=self._timeout, check=False)


def _output(done: subprocess.CompletedProcess[str]) -> str:
    return f"{done.stdout or ''}{done.stderr or ''}"


def _smi_failure(done: subprocess.CompletedProcess[str]) -> str:
    text = _output(done).strip()
    first = text.splitlines()[0] if text else f"exit status {done.returncode}"
    if "couldn't communicate with the NVIDIA driver" in text or "No devices were found" in text:
        return f"no NVIDIA driver: {first}"
    return f"nvidia-smi failed (exit {done.returncode}): {first}"


def _csv(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in row] for row in csv.reader(text.splitlines(), skipinitialspace=True) if row]


def _smi_value(row: Mapping[str, str], key: str) -> str | None:
    value = row.get(key)
    return None if value is None or value.strip() in _SMI_NONE else value.strip()


def _smi_mib(row: Mapping[str, str], key: str) -> int | None:
    value = _smi_value(row, key)
    try:
        return int(float(value) * MIB) if value is not None else None
    except ValueError:
        return None


def _smi_device(row: Mapping[str, str]) -> tuple[GpuDevice, str | None]:
    """One --query-gpu row (sizes in MiB with nounits), and the driver version it names."""
    cc_text = _smi_value(row, "compute_cap")
    major, _, minor = (cc_text or "").partition(".")
    total = _smi_mib(row, "memory.total") or 0
    used = _smi_mib(row, "memory.used")
    free = _smi_mib(row, "memory.free")
    if free is None:
        free = total - (used or 0)
    device = GpuDevice(
        index=int(row["index"]), uuid=_smi_value(row, "uuid"), name=_smi_value(row, "name") or "unknown",
        cc=(int(major), int(minor)) if major.isdigit() and minor.isdigit() else None, total_bytes=total,
        free_bytes=free, used_bytes=used if used is not None else total - free,
        pci_bus_id=_smi_value(row, "pci.bus_id"),
    )
    return device, _smi_value(row, "driver_version")


def _attach_processes(devices: list[tuple[GpuDevice, str | None]],
                      rows: list[list[str]]) -> list[tuple[GpuDevice, str | None]]:
    by_uuid: dict[str, list[GpuProcess]] = {}
    for row in rows:
        app = dict(zip(SMI_APP_FIELDS, row, strict=False))
        pid = _smi_value(app, "pid")
        if pid is None or not pid.isdigit():
            continue
        by_uuid.setdefault(app.get("gpu_uuid", ""), []).append(
            GpuProcess(int(pid), _smi_value(app, "process_name"), _smi_mib(app, "used_memory")))
    return [(replace(d, processes=tuple(by_uuid.get(d.uuid or "", ()))), v) for d, v in devices]


# --------------------------------------------------------------------------- inventory files


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
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))  # JSON is YAML
    except OSError as exc:
        raise UsageError(f"--gpu-inventory {path}: cannot read it ({exc.strerror}); check the path") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--gpu-inventory {path}: not YAML or JSON ({exc}); fix the syntax") from None
    if not isinstance(data, Mapping):
        raise UsageError(f"--gpu-inventory {path}: expected a mapping with a devices: list; "
                         "see tests/data/inventories/README.md")
    return GpuInventory.from_dict(data, origin=str(path), environ=environ)


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
        value = data.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected a whole number, got {value!r}", f"write {name}: 0")
        return value

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
        index = self.integer(item, "index", f"{key}.index")
        throttle = item.get("throttle_reasons") or []
        if not isinstance(throttle, list):
            raise self.fail(f"{key}.throttle_reasons", "expected a list", "write throttle_reasons: [hw_slowdown]")
        mig = item.get("mig_enabled")
        if mig is not None and not isinstance(mig, bool):
            raise self.fail(f"{key}.mig_enabled", f"expected true or false, got {mig!r}", "write mig_enabled: true")
        return GpuDevice(
            index=position if index is None else index, uuid=self.text(item, "uuid", f"{key}.uuid"), name=name,
            cc=self.cc(item.get("cc"), f"{key}.cc"), total_bytes=total, free_bytes=free, used_bytes=used,
            reserved_bytes=reserved, processes=self.processes(item.get("processes"), f"{key}.processes"),
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

    def processes(self, value: Any, key: str) -> tuple[GpuProcess, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.fail(key, "expected a list", "write processes: [{pid: 4242, name: python3, used: 6GiB}]")
        found = []
        for n, proc in enumerate(value):
            where = f"{key}[{n}]"
            if not isinstance(proc, Mapping):
                raise self.fail(where, "expected a mapping", "write {pid: 4242, name: python3, used: 6GiB}")
            pid = self.integer(proc, "pid", f"{where}.pid")
            if pid is None:
                raise self.fail(f"{where}.pid", "missing", "write pid: 4242")
            found.append(GpuProcess(pid, self.text(proc, "name", f"{where}.name"),
                                    self.size(proc, "used", f"{where}.used")))
        return tuple(found)


# --------------------------------------------------------------------------- detection


def detect(environ: Mapping[str, str] | None = None, *,
           importer: Callable[[str], ModuleType] = importlib.import_module,
           which: Callable[..., str | None] = shutil.which) -> GpuProbe | None:
    """NVML if its bindings load and initialise, else nvidia-smi if on PATH, else None. Never raises."""
    environ = os.environ if environ is None else environ
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nvml: Any = importer("pynvml")
        nvml.nvmlInit()
        with contextlib.suppress(Exception):  # a failed shutdown after a good init still means NVML works
            nvml.nvmlShutdown()
        return NvmlProbe(nvml, environ)
    except Exception:  # noqa: S110  (any failure at this boundary means "no usable NVML")
        pass
    if which("nvidia-smi", path=environ.get("PATH")):
        return SmiProbe(environ=environ)
    return None
