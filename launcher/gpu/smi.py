"""The `nvidia-smi` probe: CSV queries, the fallback when the NVML bindings are missing. Always time-limited."""

from __future__ import annotations

import csv
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from launcher.gpu.inventory import NO_DRIVER_HINT, GpuDevice, GpuInventory, GpuProcess, apply_visibility
from launcher.units import MIB

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
                                f"({NO_DRIVER_HINT})")
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
