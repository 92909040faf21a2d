"""The NVML probe against a real driver: invariants any real GPU satisfies. Skipped without NVML."""

from __future__ import annotations

import json
import re
from types import ModuleType

import pytest

from launcher.gpu.detect import detect
from launcher.gpu.inventory import GpuInventory
from launcher.gpu.inventory_file import inventory_from_dict
from launcher.gpu.match import gpu_spec
from launcher.gpu.nvml import NvmlProbe

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def nvml() -> ModuleType:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        pytest.skip(f"no usable NVML here: {exc}")
    pynvml.nvmlShutdown()
    return pynvml


@pytest.fixture(scope="module")
def inventory(nvml: ModuleType) -> GpuInventory:
    return NvmlProbe(nvml, environ={}).read()


class TestRealNvml:
    def test_reads_at_least_one_device_without_error(self, inventory: GpuInventory) -> None:
        """A machine with a working driver yields devices and no error."""
        assert (None, True) == (inventory.error, len(inventory.devices) >= 1)

    def test_memory_adds_up(self, inventory: GpuInventory) -> None:
        """Per device: 0 ≤ free ≤ total, used ≤ total, and reserved (v2) within total."""
        for d in inventory.devices:
            assert 0 <= d.free_bytes <= d.total_bytes
            assert 0 <= d.used_bytes <= d.total_bytes
            assert d.reserved_bytes is None or 0 <= d.reserved_bytes <= d.total_bytes - d.free_bytes

    def test_identity_fields(self, inventory: GpuInventory) -> None:
        """Each device has a name, a GPU- UUID, a compute capability of at least 3.0 and a PCI bus id."""
        for d in inventory.devices:
            assert d.name
            assert (d.uuid or "").startswith("GPU-")
            assert d.cc is not None
            assert d.cc >= (3, 0)
            assert d.pci_bus_id is not None

    def test_versions(self, inventory: GpuInventory) -> None:
        """The driver and the CUDA version it supports are known ("12.8")."""
        assert re.fullmatch(r"\d+\.\d+", inventory.cuda_driver_version or "")
        assert inventory.driver_version

    def test_processes_are_well_formed(self, inventory: GpuInventory) -> None:
        """Listed processes have positive PIDs and, when known, used memory within the device."""
        for d in inventory.devices:
            for p in d.processes:
                assert p.pid > 0
                assert p.used_bytes is None or 0 <= p.used_bytes <= d.total_bytes

    def test_round_trips_through_json(self, inventory: GpuInventory) -> None:
        """The real inventory survives to_dict → JSON → from_dict."""
        again = inventory_from_dict(json.loads(json.dumps(inventory.to_dict())), environ={})
        assert inventory.devices == again.devices

    def test_detect_and_spec(self, inventory: GpuInventory) -> None:
        """detect() picks NVML, and the inventory gives a GpuSpec with a CUDA total below NVML's."""
        assert isinstance(detect({"PATH": ""}), NvmlProbe)
        spec = gpu_spec(inventory, 1)
        assert spec is not None
        assert 0 < spec.total_bytes <= inventory.devices[0].total_bytes
