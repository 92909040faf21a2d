"""The GPU probes: NVML against a fake `pynvml`, nvidia-smi against recorded CSV, inventory files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, ClassVar

import pytest

from launcher.errors import UsageError
from launcher.gpu.detect import detect
from launcher.gpu.inventory import GpuDevice, GpuInventory, GpuProcess
from launcher.gpu.inventory_file import FakeProbe, inventory_from_dict
from launcher.gpu.nvml import NvmlProbe
from launcher.gpu.smi import SmiProbe
from tests.conftest import DATA

MIB = 1024**2
GIB = 1024**3
INVENTORIES = DATA / "inventories"
SMI = DATA / "nvidia-smi"
L40S_UUID = "GPU-5e1b6a8e-0d1c-4c57-9f0a-3f4c1e2d7a10"


# --------------------------------------------------------------------------- a fake pynvml


class NVMLError(Exception):
    """Shaped like nvidia-ml-py's: one subclass per NVML_ERROR_* code, `value` holds the code."""

    value = 999
    strings: ClassVar[dict[int, str]] = {
        3: "Not Supported", 4: "Insufficient Permissions", 6: "Not Found", 9: "Driver Not Loaded",
        12: "NVML Shared Library Not Found", 13: "Function Not Found", 15: "GPU is lost"}

    def __str__(self) -> str:
        return self.strings.get(self.value, f"NVML Error with code {self.value}")


def _error_class(name: str, value: int) -> type[NVMLError]:
    return type(name, (NVMLError,), {"value": value})


NotSupported = _error_class("NVMLError_NotSupported", 3)
NoPermission = _error_class("NVMLError_NoPermission", 4)
NotFound = _error_class("NVMLError_NotFound", 6)
DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", 9)
LibraryNotFound = _error_class("NVMLError_LibraryNotFound", 12)
FunctionNotFound = _error_class("NVMLError_FunctionNotFound", 13)
GpuIsLost = _error_class("NVMLError_GpuIsLost", 15)


class NVMLLibraryMismatchError(Exception):
    pass


def l40s(**changes: Any) -> dict[str, Any]:
    """One fake device's answers; an exception class as a value makes that getter raise it."""
    device: dict[str, Any] = {
        "name": "NVIDIA L40S", "uuid": L40S_UUID, "cc": (8, 9), "total": 46068 * MIB, "reserved": 569 * MIB,
        "used": 3999 * MIB, "free": 41500 * MIB, "processes": [(5151, 3840 * MIB)], "names": {5151: "jupyter-lab"},
        "mig": NotSupported, "ecc": 0, "mode": 0, "temp": 34, "clocks": 0x01, "bus": b"00000000:01:00.0",
    }
    device.update(changes)
    return device


class FakeNvml:
    """A module object with nvidia-ml-py's names; records every call as (name, args, kwargs)."""

    def __init__(self, devices: list[dict[str, Any]], *, init_error: type[Exception] | None = None,
                 memory: str = "v2", processes: str = "v3", clock_events: bool = True, cuda: int = 12080,
                 count_error: type[Exception] | None = None) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.devices = devices
        module = ModuleType("pynvml")
        for cls in (NVMLError, NotSupported, NoPermission, NotFound, DriverNotLoaded, LibraryNotFound,
                    FunctionNotFound, GpuIsLost):
            setattr(module, cls.__name__, cls)
        module.NVMLLibraryMismatchError = NVMLLibraryMismatchError  # type: ignore[attr-defined]
        for name, value in (("nvmlMemory_v2", 0x02000028), ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                            ("NVML_VOLATILE_ECC", 0), ("NVML_TEMPERATURE_GPU", 0), ("NVML_DEVICE_MIG_ENABLE", 1)):
            setattr(module, name, value)

        def init() -> None:
            if init_error is not None:
                raise init_error()

        def count() -> int:
            if count_error is not None:
                raise count_error()
            return len(devices)

        def memory_info(handle: int, version: int | None = None) -> SimpleNamespace:
            d = devices[handle]
            if version is not None:
                if memory == "v1":
                    raise FunctionNotFound()
                return SimpleNamespace(version=version, total=d["total"], reserved=d["reserved"], free=d["free"],
                                       used=d["used"])
            return SimpleNamespace(total=d["total"], free=d["free"], used=d["used"] + d["reserved"])

        def memory_info_old_bindings(handle: int) -> SimpleNamespace:  # no `version` argument at all
            return memory_info(handle)

        def running(version: str) -> Callable[[int], list[SimpleNamespace]]:
            def call(handle: int) -> list[SimpleNamespace]:
                if processes != version:
                    raise NVMLLibraryMismatchError("Unversioned function called ...")
                return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in devices[handle]["processes"]]
            return call

        def process_name(pid: int) -> str:
            for d in devices:
                if pid in d["names"]:
                    return str(answer(d["names"][pid]))
            raise NotFound()

        functions: dict[str, Callable[..., Any]] = {
            "nvmlInit": init,
            "nvmlShutdown": lambda: None,
            "nvmlDeviceGetCount": count,
            "nvmlDeviceGetHandleByIndex": lambda i: i,
            "nvmlSystemGetDriverVersion": lambda: "570.124.06",
            "nvmlSystemGetCudaDriverVersion_v2": lambda: cuda,
            "nvmlSystemGetCudaDriverVersion": lambda: cuda,
            "nvmlDeviceGetName": lambda h: answer(devices[h]["name"]),
            "nvmlDeviceGetUUID": lambda h: answer(devices[h]["uuid"]),
            "nvmlDeviceGetCudaComputeCapability": lambda h: answer(devices[h]["cc"]),
            "nvmlDeviceGetMemoryInfo": memory_info if memory != "old-bindings" else memory_info_old_bindings,
            "nvmlDeviceGetComputeRunningProcesses": running("v3"),
            "nvmlDeviceGetComputeRunningProcesses_v2": running("v2"),
            "nvmlSystemGetProcessName": process_name,
            "nvmlDeviceGetMigMode": lambda h: answer(devices[h]["mig"]),
            "nvmlDeviceGetTotalEccErrors": lambda h, kind, counter: answer(devices[h]["ecc"]),
            "nvmlDeviceGetComputeMode": lambda h: answer(devices[h]["mode"]),
            "nvmlDeviceGetTemperature": lambda h, sensor: answer(devices[h]["temp"]),
            "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: answer(devices[h]["clocks"]),
            "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=answer(devices[h]["bus"])),
        }
        if clock_events:
            functions["nvmlDeviceGetCurrentClocksEventReasons"] = lambda h: answer(devices[h]["clocks"])
        for name, fn in functions.items():
            setattr(module, name, self._recorded(name, fn))
        self.module = module

    def _recorded(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            return fn(*args, **kwargs)
        return call

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]


def answer(value: Any) -> Any:
    if isinstance(value, type) and issubclass(value, Exception):
        raise value()
    return value


def read(fake: FakeNvml, environ: dict[str, str] | None = None) -> GpuInventory:
    return NvmlProbe(fake.module, environ=environ or {}).read()


class TestNvmlProbe:
    def test_reads_every_field_of_a_device(self) -> None:
        """An L40S with one process reads into a complete GpuDevice."""
        inventory = read(FakeNvml([l40s()]))
        assert GpuDevice(
            index=0, uuid=L40S_UUID, name="NVIDIA L40S", cc=(8, 9), total_bytes=46068 * MIB,
            free_bytes=41500 * MIB, used_bytes=3999 * MIB, reserved_bytes=569 * MIB,
            processes=(GpuProcess(5151, "jupyter-lab", 3840 * MIB),), mig_enabled=None, ecc_uncorrected=0,
            compute_mode="default", temperature_c=34, throttle_reasons=(), pci_bus_id="00000000:01:00.0",
        ) == inventory.devices[0]
        assert ("nvml", "570.124.06", "12.8", None, (0,)) == (
            inventory.source, inventory.driver_version, inventory.cuda_driver_version, inventory.error,
            inventory.visible)

    def test_asks_for_memory_v2_and_always_shuts_down(self) -> None:
        """Memory is read with version=nvmlMemory_v2; nvmlInit comes first and nvmlShutdown last."""
        fake = FakeNvml([l40s()])
        read(fake)
        assert ("nvmlDeviceGetMemoryInfo", (0,), {"version": 0x02000028}) in fake.calls
        assert ["nvmlInit", "nvmlShutdown"] == [fake.names()[0], fake.names()[-1]]

    @pytest.mark.parametrize(("error", "expected"), [
        (LibraryNotFound, "no NVIDIA driver: NVML Shared Library Not Found"),
        (DriverNotLoaded, "no NVIDIA driver: Driver Not Loaded"),
        (NoPermission, "NVML did not start: Insufficient Permissions"),
    ])
    def test_init_failures_become_an_inventory_error(self, error: type[Exception], expected: str) -> None:
        """A failed nvmlInit is an inventory with an error and no devices, not an exception."""
        fake = FakeNvml([l40s()], init_error=error)
        inventory = read(fake)
        assert (expected, ()) == (inventory.error[:len(expected)] if inventory.error else None, inventory.devices)
        assert ["nvmlInit"] == fake.names()

    def test_a_missing_pynvml_module_means_no_driver(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without the nvidia-ml-py bindings the probe reports "no NVIDIA driver"."""
        monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
        inventory = NvmlProbe(environ={}).read()
        assert inventory.error is not None
        assert inventory.error.startswith("no NVIDIA driver: cannot import pynvml")

    def test_a_failure_while_reading_still_shuts_down(self) -> None:
        """An NVML error after init (a lost GPU) becomes an inventory error, and NVML is shut down."""
        fake = FakeNvml([l40s()], count_error=GpuIsLost)
        inventory = read(fake)
        assert "NVML failed while reading the GPUs: GPU is lost" == inventory.error
        assert "nvmlShutdown" == fake.names()[-1]

    def test_fields_that_are_not_supported_are_none(self) -> None:
        """NotSupported (GeForce, old drivers) on optional fields gives None or empty, never a crash."""
        device = l40s(uuid=NotSupported, cc=NotSupported, mig=NotSupported, ecc=NotSupported, mode=NoPermission,
                      temp=NotSupported, clocks=NotSupported, bus=NotSupported)
        got = read(FakeNvml([device])).devices[0]
        assert (None, None, None, None, None, None, (), None) == (
            got.uuid, got.cc, got.mig_enabled, got.ecc_uncorrected, got.compute_mode, got.temperature_c,
            got.throttle_reasons, got.pci_bus_id)

    @pytest.mark.parametrize("memory", ["v1", "old-bindings"])
    def test_memory_falls_back_to_v1(self, memory: str) -> None:
        """FunctionNotFound on the v2 call (old driver) or a TypeError (old bindings) reads v1 memory info."""
        got = read(FakeNvml([l40s()], memory=memory)).devices[0]
        assert (46068 * MIB, 41500 * MIB, (3999 + 569) * MIB, None) == (
            got.total_bytes, got.free_bytes, got.used_bytes, got.reserved_bytes)

    def test_processes_without_memory_or_name(self) -> None:
        """usedGpuMemory None stays None; a name lookup that fails gives None."""
        device = l40s(processes=[(77, None), (78, 1 * GIB)], names={77: "python3", 78: NotFound})
        assert (GpuProcess(77, "python3", None), GpuProcess(78, None, GIB)) == read(FakeNvml([device])).devices[0].processes

    def test_old_drivers_list_processes_with_v2(self) -> None:
        """The unversioned call wraps _v3; on a library mismatch the _v2 call is used."""
        fake = FakeNvml([l40s()], processes="v2")
        assert (GpuProcess(5151, "jupyter-lab", 3840 * MIB),) == read(fake).devices[0].processes
        assert "nvmlDeviceGetComputeRunningProcesses_v2" in fake.names()

    @pytest.mark.parametrize(("mask", "clock_events", "expected"), [
        (0x01, True, ()),
        (0x04 | 0x40, True, ("sw_power_cap", "hw_thermal_slowdown")),
        (0x08 | 0x20 | 0x80, True, ("hw_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown")),
        (0x40, False, ("hw_thermal_slowdown",)),
    ])
    def test_clock_event_reasons_are_named(self, mask: int, clock_events: bool, expected: tuple[str, ...]) -> None:
        """Thermal and power slowdown bits are named; bindings without the R535 name use ThrottleReasons."""
        assert expected == read(FakeNvml([l40s(clocks=mask)], clock_events=clock_events)).devices[0].throttle_reasons

    @pytest.mark.parametrize(("mig", "expected"), [([1, 1], True), ([0, 0], False), ([0, 1], False)])
    def test_mig_mode_is_the_current_mode(self, mig: list[int], expected: bool) -> None:
        """MIG counts as enabled when its current mode is on (a pending change needs a reset first)."""
        assert expected is read(FakeNvml([l40s(mig=mig)])).devices[0].mig_enabled

    @pytest.mark.parametrize(("version", "expected"), [(12080, "12.8"), (13000, "13.0"), (11080, "11.8")])
    def test_cuda_driver_version_is_major_dot_minor(self, version: int, expected: str) -> None:
        """nvmlSystemGetCudaDriverVersion_v2's integer 12080 is CUDA 12.8."""
        assert expected == read(FakeNvml([l40s()], cuda=version)).cuda_driver_version

    def test_getters_missing_from_old_bindings_are_none(self) -> None:
        """Bindings that lack a getter (here _v2 CUDA version and MIG mode) read the rest without it."""
        fake = FakeNvml([l40s(mig=[1, 0])], cuda=11040)
        del fake.module.nvmlSystemGetCudaDriverVersion_v2
        del fake.module.nvmlDeviceGetMigMode
        inventory = read(fake)
        assert ("11.4", None, "NVIDIA L40S") == (inventory.cuda_driver_version, inventory.devices[0].mig_enabled,
                                                 inventory.devices[0].name)

    def test_cuda_visible_devices_is_applied(self) -> None:
        """The probe sets `visible` from the environment it was given."""
        second = l40s(uuid="GPU-22222222-0000-4000-8000-000000000000")
        assert (1,) == read(FakeNvml([l40s(), second]), {"CUDA_VISIBLE_DEVICES": "1"}).visible

    def test_the_fake_uses_only_real_pynvml_names(self) -> None:
        """Every name the fake module offers exists in nvidia-ml-py, so the probe codes against real names."""
        real = pytest.importorskip("pynvml")
        fake = FakeNvml([l40s()]).module
        assert [] == [name for name in vars(fake) if not name.startswith("__") and not hasattr(real, name)]

    def test_real_pynvml_without_a_driver(self) -> None:
        """With the real bindings on a machine without a driver, the probe says "no NVIDIA driver"."""
        real = pytest.importorskip("pynvml")
        try:
            real.nvmlInit()
        except real.NVMLError:
            pass
        else:
            real.nvmlShutdown()
            pytest.skip("this machine has a working NVIDIA driver")
        inventory = NvmlProbe(real, environ={}).read()
        assert inventory.error is not None
        assert inventory.error.startswith("no NVIDIA driver")


# --------------------------------------------------------------------------- nvidia-smi


class FakeSmi:
    """Answers nvidia-smi queries from recorded files: {query prefix: (exit status, file)}."""

    def __init__(self, answers: dict[str, tuple[int, str]], *, raises: type[BaseException] | None = None) -> None:
        self.answers = answers
        self.raises = raises
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append((argv, kwargs))
        if self.raises is subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(argv, kwargs["timeout"])
        if self.raises is not None:
            raise self.raises(2, "No such file or directory: 'nvidia-smi'")
        for prefix, (status, name) in self.answers.items():
            if argv[1].startswith(prefix):
                return subprocess.CompletedProcess(argv, status, (SMI / name).read_text(), "")
        raise AssertionError(f"unexpected nvidia-smi call {argv}")


def smi(answers: dict[str, tuple[int, str]], **kwargs: Any) -> tuple[GpuInventory, FakeSmi]:
    fake = FakeSmi(answers, **kwargs)
    return SmiProbe(run=fake, environ={}).read(), fake


class TestSmiProbe:
    def test_reads_a_device_and_its_processes(self) -> None:
        """The CSV row becomes a GpuDevice (MiB → bytes); compute apps attach by GPU UUID."""
        inventory, _ = smi({"--query-gpu": (0, "gpu-l40s.csv"), "--query-compute-apps": (0, "apps-l40s.csv")})
        assert GpuDevice(
            index=0, uuid=L40S_UUID, name="NVIDIA L40S", cc=(8, 9), total_bytes=46068 * MIB, free_bytes=41500 * MIB,
            used_bytes=3999 * MIB, processes=(GpuProcess(5151, "jupyter-lab", 3840 * MIB),),
            pci_bus_id="00000000:01:00.0",
        ) == inventory.devices[0]
        assert ("nvidia-smi", "570.124.06", None, (0,)) == (
            inventory.source, inventory.driver_version, inventory.error, inventory.visible)

    def test_queries_the_documented_fields_with_a_timeout(self) -> None:
        """Both queries ask for CSV without header or units, and every call carries the timeout."""
        _, fake = smi({"--query-gpu": (0, "gpu-l40s.csv"), "--query-compute-apps": (0, "apps-none.csv")})
        assert [
            ["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id,name,compute_cap,memory.total,memory.used,memory.free,"
             "driver_version", "--format=csv,noheader,nounits"],
            ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
             "--format=csv,noheader,nounits"],
        ] == [argv for argv, _ in fake.calls]
        assert [10.0, 10.0] == [kwargs["timeout"] for _, kwargs in fake.calls]

    def test_not_available_fields_are_none(self) -> None:
        """[N/A] and [Not Supported] are None; used or free is derived from the other."""
        inventory, _ = smi({"--query-gpu": (0, "gpu-na.csv"), "--query-compute-apps": (0, "apps-na.csv")})
        first, second = inventory.devices
        assert ((8, 9), 24564 * MIB - 17745 * MIB, (GpuProcess(4242, "python3", None),)) == (
            first.cc, first.used_bytes, first.processes)
        assert (None, None, 24564 * MIB - 1 * MIB) == (second.uuid, second.cc, second.free_bytes)

    def test_old_drivers_are_asked_again_without_compute_cap(self) -> None:
        """An R470 driver rejects compute_cap: the query is repeated without it and CC is unknown."""
        inventory, fake = smi({"--query-gpu=index,uuid,pci.bus_id,name,compute_cap": (2, "old-driver-compute-cap.txt"),
                               "--query-gpu": (0, "gpu-old-driver.csv"),
                               "--query-compute-apps": (0, "apps-none.csv")})
        assert ("Tesla T4", None, 15360 * MIB, "470.82.01") == (
            inventory.devices[0].name, inventory.devices[0].cc, inventory.devices[0].total_bytes,
            inventory.driver_version)
        assert "compute_cap" not in fake.calls[1][0][1]
        assert any("compute capability" in note for note in inventory.notes)

    @pytest.mark.parametrize(("fake", "expected"), [
        (FakeSmi({}, raises=subprocess.TimeoutExpired), "nvidia-smi timed out after 10s (a wedged GPU?)"),
        (FakeSmi({}, raises=FileNotFoundError), "no NVIDIA driver: nvidia-smi is not on PATH"),
        (FakeSmi({"--query-gpu": (9, "no-driver.txt")}),
         "no NVIDIA driver: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
    ])
    def test_failures_become_an_inventory_error(self, fake: FakeSmi, expected: str) -> None:
        """A hang, a missing nvidia-smi or a missing driver is an inventory error, not an exception."""
        inventory = SmiProbe(run=fake, environ={}).read()
        assert (expected, ()) == ((inventory.error or "")[:len(expected)], inventory.devices)

    def test_a_failed_process_query_is_a_note(self) -> None:
        """When compute apps cannot be listed, the devices are still read and a note says why."""
        inventory, _ = smi({"--query-gpu": (0, "gpu-l40s.csv"), "--query-compute-apps": (9, "no-driver.txt")})
        assert () == inventory.devices[0].processes
        assert any("could not list compute processes" in note for note in inventory.notes)


# --------------------------------------------------------------------------- CUDA_VISIBLE_DEVICES


def two_h100(environ: dict[str, str]) -> GpuInventory:
    return FakeProbe(INVENTORIES / "h100x2.yaml", environ).read()


UUID_0 = "GPU-11111111-2222-4333-8444-555555555501"
UUID_1 = "GPU-11111111-2222-4333-8444-555555555502"


class TestVisibility:
    @pytest.mark.parametrize(("value", "expected"), [
        (None, (0, 1)),
        ("", ()),
        ("1", (1,)),
        ("1,0", (1, 0)),
        ("0,7,1", (0,)),  # CUDA stops at the first entry it cannot resolve
        ("-1", ()),
        (UUID_1, (1,)),
        ("GPU-11111111", ()),  # a prefix that matches both is ambiguous
        (f"MIG-{UUID_0}/1/0", (0,)),
        ("0,0", (0,)),
    ])
    def test_cuda_visible_devices(self, value: str | None, expected: tuple[int, ...]) -> None:
        """Indices, UUIDs and MIG UUIDs select devices in CUDA's order; empty selects none; unset selects all."""
        environ = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
        inventory = two_h100(environ)
        assert (expected, value) == (inventory.visible, inventory.cuda_visible_devices)

    @pytest.mark.parametrize(("value", "expected"), [
        (None, "CUDA_VISIBLE_DEVICES unset: vLLM will see 0 (NVIDIA H100 80GB HBM3), 1 (NVIDIA H100 80GB HBM3)"),
        ("", "CUDA_VISIBLE_DEVICES='': vLLM will see no GPU"),
        ("1", "CUDA_VISIBLE_DEVICES='1': vLLM will see 1 (NVIDIA H100 80GB HBM3)"),
    ])
    def test_a_note_names_what_vllm_will_see(self, value: str | None, expected: str) -> None:
        """The inventory notes which devices the launched vLLM will see."""
        environ = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
        assert expected in two_h100(environ).notes

    def test_a_new_style_mig_uuid_maps_to_the_only_mig_gpu(self) -> None:
        """A MIG UUID without its parent's UUID maps to the one GPU with MIG on, with a note."""
        inventory = FakeProbe(INVENTORIES / "a100-mig.yaml", {"CUDA_VISIBLE_DEVICES": "MIG-4f3e2d1c"}).read()
        assert (0,) == inventory.visible
        assert any("MIG instance MIG-4f3e2d1c" in note for note in inventory.notes)


# --------------------------------------------------------------------------- inventory files


def write(tmp_path: Path, text: str, name: str = "inventory.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


class TestInventoryFiles:
    @pytest.mark.parametrize("path", sorted(p.name for p in INVENTORIES.iterdir() if p.suffix in (".yaml", ".json")))
    def test_every_shipped_inventory_reads(self, path: str) -> None:
        """Each file in tests/data/inventories is a valid inventory."""
        inventory = FakeProbe(INVENTORIES / path, {}).read()
        assert "inventory" == inventory.source
        assert all(0 <= d.free_bytes <= d.total_bytes for d in inventory.devices)

    @pytest.mark.parametrize("total", ["48GiB", "49152MiB", 48 * GIB, "51539607552"])
    def test_sizes_as_bytes_or_with_units(self, tmp_path: Path, total: object) -> None:
        """A size is a number of bytes or a string with a unit."""
        path = write(tmp_path, json.dumps({"devices": [{"name": "NVIDIA L40S", "total": total}]}))
        device = FakeProbe(path, {}).read().devices[0]
        assert (48 * GIB, 48 * GIB, 0) == (device.total_bytes, device.free_bytes, device.used_bytes)

    def test_json_written_by_preflight_reads_back(self) -> None:
        """to_dict() output (bytes plus GiB) reads back into the same devices."""
        original = FakeProbe(INVENTORIES / "rtx4090-foreign.yaml", {}).read()
        again = inventory_from_dict(json.loads(json.dumps(original.to_dict())), environ={})
        assert (original.devices, original.driver_version, original.cuda_driver_version) == (
            again.devices, again.driver_version, again.cuda_driver_version)

    def test_to_dict_gives_bytes_and_gib(self) -> None:
        """Sizes appear as integer bytes and as GiB rounded to 2 decimals; the visible indices are listed."""
        data = FakeProbe(INVENTORIES / "l40s.yaml", {"CUDA_VISIBLE_DEVICES": "0"}).read().to_dict()
        device = data["devices"][0]
        assert (46068 * MIB, 44.99, 45498 * MIB, 44.43, [8, 9], [0], "0") == (
            device["total_bytes"], device["total_gib"], device["free_bytes"], device["free_gib"], device["cc"],
            data["visible"], data["cuda_visible_devices"])

    def test_json_files_read(self) -> None:
        """A JSON inventory (the form preflight --json writes) reads like YAML."""
        inventory = FakeProbe(INVENTORIES / "l4x2.json", {}).read()
        assert (["NVIDIA L4", "NVIDIA L4"], (8, 9)) == ([d.name for d in inventory.devices], inventory.devices[1].cc)

    def test_an_error_means_no_devices(self) -> None:
        """`error:` simulates a machine without a driver."""
        inventory = FakeProbe(INVENTORIES / "no-driver.yaml", {}).read()
        assert ((), True) == (inventory.devices, (inventory.error or "").startswith("no NVIDIA driver"))

    @pytest.mark.parametrize(("text", "key"), [
        ("devices: [{name: L40S}]", "devices[0].total"),
        ("devices: [{name: L40S, total: lots}]", "devices[0].total"),
        ("devices: [{total: 48GiB}]", "devices[0].name"),
        ("devices: [{name: L40S, total: 48GiB, free: 50GiB}]", "devices[0].free"),
        ("devices: [{name: L40S, total: 48GiB, cc: ada}]", "devices[0].cc"),
        ("devices: [{name: L40S, total: 48GiB, processes: [{name: x}]}]", "devices[0].processes[0].pid"),
        ("devices: [{name: L40S, total: 48GiB, mig_enabled: maybe}]", "devices[0].mig_enabled"),
        ("devices: {name: L40S}", "devices"),
        ("devices: [{name: a, total: 1GiB, index: 0}, {name: b, total: 1GiB, index: 0}]", "devices"),
    ])
    def test_a_bad_file_names_the_file_and_the_key(self, tmp_path: Path, text: str, key: str) -> None:
        """Each invalid entry is a UsageError naming the file and the key."""
        path = write(tmp_path, text)
        with pytest.raises(UsageError) as caught:
            FakeProbe(path, {}).read()
        assert f"{path}: {key}:" in str(caught.value)

    @pytest.mark.parametrize("text", ["[1, 2]", "devices: [\n  - {name: x\n"])
    def test_not_an_inventory_at_all(self, tmp_path: Path, text: str) -> None:
        """A file that is not a mapping, or not YAML, is a UsageError naming the file."""
        path = write(tmp_path, text)
        with pytest.raises(UsageError, match=re.escape(str(path))):
            FakeProbe(path, {}).read()

    @pytest.mark.timeout(60)  # a FIFO used to wait for a writer
    @pytest.mark.parametrize("plant", ["fifo", "deep", "dev-zero"])
    def test_a_file_that_is_not_one_is_one_line(self, tmp_path: Path, plant: str) -> None:
        path = tmp_path / "inventory.yaml"
        if plant == "fifo":
            os.mkfifo(path)
        elif plant == "deep":
            path.write_text("[" * 200_000)
        else:
            path.symlink_to("/dev/zero")
        with pytest.raises(UsageError) as caught:
            FakeProbe(path, {}).read()
        assert str(caught.value).startswith(f"--gpu-inventory {path}: ") and "\n" not in str(caught.value)

    def test_a_missing_file(self, tmp_path: Path) -> None:
        """A path that does not exist is a UsageError naming it."""
        with pytest.raises(UsageError, match=re.escape("nope.yaml")):
            FakeProbe(tmp_path / "nope.yaml", {}).read()


# --------------------------------------------------------------------------- detect


def importer_of(module: ModuleType | None) -> Callable[[str], ModuleType]:
    def load(name: str) -> ModuleType:
        if module is None:
            raise ImportError(f"No module named {name!r}")
        return module
    return load


class TestDetect:
    @pytest.mark.parametrize(("module", "smi_on_path", "expected"), [
        (FakeNvml([l40s()]).module, True, NvmlProbe),
        (FakeNvml([l40s()], init_error=DriverNotLoaded).module, True, SmiProbe),
        (None, True, SmiProbe),
        (None, False, type(None)),
        (FakeNvml([l40s()], init_error=RuntimeError).module, False, type(None)),
    ])
    def test_prefers_nvml_then_nvidia_smi(self, module: ModuleType | None, smi_on_path: bool,
                                          expected: type) -> None:
        """NVML when it initialises, else nvidia-smi when on PATH, else None; never an exception."""
        probe = detect({"PATH": "/usr/bin"}, importer=importer_of(module),
                                which=lambda name, path=None: "/usr/bin/nvidia-smi" if smi_on_path else None)
        assert isinstance(probe, expected)
