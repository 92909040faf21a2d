"""Preflight: the checks, the changes they make, the host facts, and `vllm-launch preflight`."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher import cli
from launcher.gpu.catalog import GPU_TABLE, GpuModel, GpuSpec, parse_gpu_spec
from launcher.gpu.inventory import GpuDevice, GpuInventory
from launcher.gpu.inventory_file import FakeProbe
from launcher.gpu.match import gpu_spec, inventory_from_spec, match_gpu
from launcher.plan.capacity import CapacityPlan
from launcher.plan.hostfacts import HostFacts, host_facts, torch_cuda
from launcher.plan.ownership import LocalProcess
from launcher.plan.preflight import evaluate, fitting_utilization, lower_rung_that_fits
from launcher.plan.problems import PreflightResult
from launcher.plan.render import preflight_text
from launcher.plan.report import run_preflight
from launcher.vllm.versions import semantics
from tests.conftest import CONFIGS, DATA, ROOT
from tests.helpers.preflight import V32, inventory, problem
from tests.helpers.profiles import GUIDE_MODEL as MODEL
from tests.helpers.profiles import guide_profile as profile

GIB = 1024**3
MIB = 1024**2
INVENTORIES = DATA / "inventories"
L40S_CUDA_TOTAL = int(46068 * MIB * 0.987)

# What preflight reports of the processes on this machine (another test run's vLLM, ours left over): facts of
# the box the suite runs on, not of the case under test.
MACHINE_PROCESSES = ("leftover_processes", "vllm_processes_not_ours")


def cap(weights: int = 30 * GIB, budget: int = int(0.92 * L40S_CUDA_TOTAL), per_token: int = 49152,
        max_len: int = 65536, reserve: int = 2 * GIB, explicit: bool = False) -> CapacityPlan:
    """A capacity plan with consistent arithmetic (the defaults: Qwen3-Coder FP8 on an L40S at 0.92)."""
    kv_budget = budget - weights - reserve
    tokens = max(0, kv_budget) // (per_token * 16) * 16
    verdict = "weights_do_not_fit" if kv_budget <= 0 else "context_too_long" if tokens < max_len else "fits"
    return CapacityPlan(
        kv_bytes_per_token=per_token, kv_bytes_exact=True, weights_bytes=weights, weights_per_gpu_bytes=weights,
        budget_bytes=budget, activation_bytes=reserve - GIB, non_torch_bytes=GIB // 4, cudagraph_bytes=3 * GIB // 4,
        kv_budget_bytes=kv_budget, kv_tokens=tokens, max_model_len=max_len, sessions=round(tokens / max_len, 2),
        verdict=verdict, assumptions=("KV memory is set explicitly; utilization does not size it",) if explicit else (),
    )


LEFTOVER = LocalProcess(4343, "VLLM::EngineCore", "in our own process tree")


def found(result: PreflightResult) -> list[tuple[str, str]]:
    return sorted((p.code, p.severity) for p in result.problems)


# --------------------------------------------------------------------------- the checks, as a table

CASES: list[tuple[str, str, dict[str, Any], dict[str, Any], list[tuple[str, str]]]] = [
    # (id, inventory, profile(...) arguments, evaluate arguments, expected (code, severity))
    ("idle L40S", "l40s.yaml", {}, {"capacity": cap()}, []),
    ("no driver", "no-driver.yaml", {}, {}, [("no_driver", "error")]),
    ("zero GPUs", "zero-gpus.yaml", {}, {}, [("no_gpu", "error")]),
    ("TP 4 on two H100", "h100x2.yaml", {"flags": {"tensor-parallel-size": 4}}, {}, [("not_enough_gpus", "error")]),
    ("TP 2 on two H100", "h100x2.yaml", {"flags": {"tensor-parallel-size": 2}}, {}, []),
    ("TP 2 × PP 2 on two H100", "h100x2.yaml", {"flags": {"tensor-parallel-size": 2, "pipeline-parallel-size": 2}},
     {}, [("not_enough_gpus", "error")]),
    ("fp8 KV on A100, dropped", "a100-80gb.yaml", {}, {}, [("fp8_kv_unsupported", "warning")]),
    ("fp8 KV on A100, not allowed", "a100-80gb.yaml", {"ladder": {"drop_fp8_kv_if_unsupported": False}}, {},
     [("fp8_kv_unsupported", "error")]),
    ("fp8_e5m2 KV on A100", "a100-80gb.yaml", {"flags": {"kv-cache-dtype": "fp8_e5m2"}}, {},
     [("fp8_kv_unsupported", "warning")]),
    ("auto KV on A100", "a100-80gb.yaml", {"flags": {"kv-cache-dtype": "auto"}}, {}, []),
    ("fp8 KV, CC unknown but a T4 by name", "t4-no-cc.yaml", {}, {}, [("fp8_kv_unsupported", "warning")]),
    ("4090 with a foreign process", "rtx4090-foreign.yaml", {}, {},
     [("foreign_processes", "warning"), ("free_memory_low", "error")]),
    ("busy L40S, rung 0.88 fits", "l40s-busy.yaml", {}, {},
     [("foreign_processes", "warning"), ("free_memory_low", "warning")]),
    ("busy L40S, no lower rung", "l40s-busy.yaml", {"ladder": {"gpu_memory_utilization": [0.92]}}, {},
     [("foreign_processes", "warning"), ("free_memory_low", "error")]),
    ("busy L40S, vLLM 0.8 does not check", "l40s-busy.yaml", {}, {"version": semantics("0.8.5")},
     [("foreign_processes", "warning"), ("free_memory_low", "warning")]),
    ("our leftovers", "l40s.yaml", {}, {"host": HostFacts(leftovers=(LEFTOVER,))}, [("leftover_processes", "warning")]),
    ("weights do not fit", "l40s.yaml", {}, {"capacity": cap(weights=45 * GIB)}, [("weights_do_not_fit", "error")]),
    ("no room for KV", "l40s.yaml", {}, {"capacity": cap(weights=40 * GIB)}, [("no_kv_room", "warning")]),
    ("context too long", "l40s.yaml", {}, {"capacity": cap(weights=38 * GIB)}, [("context_too_long", "warning")]),
    ("fp8 dropped makes the context too long", "a100-80gb.yaml", {},
     {"capacity": cap(budget=int(0.92 * 81019 * MIB), weights=66 * GIB, reserve=2 * GIB)},
     [("context_too_long", "warning"), ("fp8_kv_unsupported", "warning")]),
    ("small /dev/shm, TP 2", "h100x2.yaml", {"flags": {"tensor-parallel-size": 2}},
     {"host": HostFacts(shm_bytes=64 * MIB)}, [("shm_too_small", "error")]),
    ("small /dev/shm, TP 1", "l40s.yaml", {}, {"host": HostFacts(shm_bytes=64 * MIB)}, []),
    ("no disk for the download", "l40s.yaml", {},
     {"host": HostFacts(cache_dir="/hf", cache_free_bytes=10 * GIB, model_downloaded=False, model_bytes=31 * GIB)},
     [("disk_space_low", "error")]),
    ("no disk, size from the capacity plan", "l40s.yaml", {},
     {"host": HostFacts(cache_free_bytes=10 * GIB, model_downloaded=False), "capacity": cap()},
     [("disk_space_low", "error")]),
    ("partial download fits", "l40s.yaml", {},
     {"host": HostFacts(cache_free_bytes=10 * GIB, model_downloaded=False, model_bytes=31 * GIB,
                        model_present_bytes=25 * GIB)}, []),
    ("already downloaded", "l40s.yaml", {},
     {"host": HostFacts(cache_free_bytes=1 * GIB, model_downloaded=True, model_bytes=31 * GIB)}, []),
    ("size unknown", "l40s.yaml", {}, {"host": HostFacts(cache_free_bytes=1 * GIB, model_downloaded=False)}, []),
    ("MIG on", "a100-mig.yaml", {"flags": {"kv-cache-dtype": "auto"}}, {}, [("mig_enabled", "warning")]),
    ("ECC, exclusive process, thermal slowdown", "h100-unhealthy.yaml", {}, {},
     [("compute_mode", "warning"), ("ecc_errors", "warning"), ("gpu_throttled", "warning")]),
    ("CUDA driver a major version behind torch", "l40s-old-driver.yaml", {}, {"host": HostFacts(torch_cuda="12.8")},
     [("cuda_driver_too_old", "error")]),
    ("CUDA driver a minor version behind torch", "l40s.yaml", {}, {"host": HostFacts(torch_cuda="12.9")},
     [("cuda_driver_too_old", "warning")]),
    ("CUDA driver newer than torch", "l40s-old-driver.yaml", {}, {"host": HostFacts(torch_cuda="11.8")}, []),
    ("torch CUDA unknown", "l40s-old-driver.yaml", {}, {}, []),
]


class TestChecks:
    @pytest.mark.parametrize(("inventory_file", "profile_args", "kwargs", "expected"),
                             [c[1:] for c in CASES], ids=[c[0] for c in CASES])
    def test_problems(self, inventory_file: str, profile_args: dict[str, Any], kwargs: dict[str, Any],
                      expected: list[tuple[str, str]]) -> None:
        """Each situation yields exactly these problems (code, severity)."""
        args = {"host": HostFacts.none(), "capacity": None, "version": V32, **kwargs}
        assert expected == found(evaluate(profile(**profile_args), inventory(inventory_file), **args))

    @pytest.mark.parametrize(("inventory_file", "profile_args", "capacity", "overrides", "changes"), [
        ("a100-80gb.yaml", {}, cap(budget=int(0.92 * 81019 * MIB)), {"kv-cache-dtype": "auto"},
         ["kv-cache-dtype fp8 → auto: GPU 0 (CC 8.0) has no FP8 KV cache; KV capacity halves: ~891,072 → "
          "~445,536 tokens"]),
        ("a100-80gb.yaml", {}, None, {"kv-cache-dtype": "auto"},
         ["kv-cache-dtype fp8 → auto: GPU 0 (CC 8.0) has no FP8 KV cache; KV capacity halves (KV bytes per token "
          "double)"]),
        ("l40s-busy.yaml", {}, None, {"gpu-memory-utilization": 0.88},
         ["starting at rung 0.88: 40.5 GiB free on GPU 0 fits gpu-memory-utilization ≤ 0.90, not 0.92"]),
        ("l40s-busy.yaml", {"ladder": {"gpu_memory_utilization": [0.92, 0.9, 0.88]}}, None,
         {"gpu-memory-utilization": 0.9}, ["starting at rung 0.9: 40.5 GiB free on GPU 0 fits gpu-memory-utilization "
                                           "≤ 0.90, not 0.92"]),
        ("rtx4090-foreign.yaml", {}, None, {}, []),
        ("a100-80gb.yaml", {"ladder": {"drop_fp8_kv_if_unsupported": False}}, None, {}, []),
        ("l40s.yaml", {}, cap(), {}, []),
    ])
    def test_overrides_and_changes(self, inventory_file: str, profile_args: dict[str, Any],
                                   capacity: CapacityPlan | None, overrides: dict[str, Any],
                                   changes: list[str]) -> None:
        """Preflight changes flags only where the ladder allows it, and says why in a change line."""
        result = evaluate(profile(**profile_args), inventory(inventory_file), host=HostFacts.none(),
                          capacity=capacity, version=V32)
        assert (overrides, changes) == (dict(result.overrides), list(result.changes))

    def test_a_restarted_runpod_pod_is_told_what_to_do(self) -> None:
        """Zero GPUs says that a restarted pod can come back without GPUs, and to restart or migrate it."""
        fix = problem(evaluate(profile(), inventory("zero-gpus.yaml"), host=HostFacts.none(), version=V32),
                      "no_gpu").fix
        assert "a restarted pod can come back with zero GPUs" in fix
        assert "restart the pod, or migrate it" in fix

    def test_too_few_gpus_names_cuda_visible_devices(self) -> None:
        """Fewer visible GPUs than TP × PP names CUDA_VISIBLE_DEVICES and how to widen it."""
        result = evaluate(profile({"tensor-parallel-size": 2}), inventory("h100x2.yaml", {"CUDA_VISIBLE_DEVICES": "1"}),
                          host=HostFacts.none(), version=V32)
        found_problem = problem(result, "not_enough_gpus")
        assert ("tensor-parallel-size 2 needs 2 GPUs, 1 visible (2 on the machine, CUDA_VISIBLE_DEVICES '1')",
                "set CUDA_VISIBLE_DEVICES to 2 devices (e.g. 0,1) or unset it") == (found_problem.message,
                                                                                    found_problem.fix)

    def test_memory_held_by_a_foreign_process(self) -> None:
        """The error names the process (pid, name, GiB), the utilization that fits, and that it is not ours."""
        result = evaluate(profile(), inventory("rtx4090-foreign.yaml"), host=HostFacts.none(), version=V32)
        low = problem(result, "free_memory_low")
        assert "(pid 4242 python3 6.00 GiB)" in low.message
        assert low.fix.startswith("set gpu-memory-utilization to 0.71 or lower")
        assert "not ours" in low.fix
        assert "at most gpu-memory-utilization 0.71 fits" in problem(result, "foreign_processes").message

    def test_memory_held_while_our_leftovers_run(self) -> None:
        """With leftovers of ours, the fix says they are ours and stopped before launch."""
        result = evaluate(profile(), inventory("rtx4090-foreign.yaml"), host=HostFacts(leftovers=(LEFTOVER,)),
                          version=V32)
        assert "our leftover vLLM processes (pid 4343 VLLM::EngineCore)" in problem(result, "free_memory_low").fix

    def test_an_nvml_pid_that_is_one_of_our_leftovers_is_not_foreign(self) -> None:
        """A GPU process whose PID is a leftover of ours is labelled ours and not reported as foreign."""
        ours = LocalProcess(4242, "VLLM::EngineCore", "recorded in state")
        result = evaluate(profile(), inventory("rtx4090-foreign.yaml"), host=HostFacts(leftovers=(ours,)), version=V32)
        assert [("free_memory_low", "error"), ("leftover_processes", "warning")] == found(result)
        assert "pid 4242 python3 6.00 GiB (ours)" in problem(result, "free_memory_low").message

    def test_leftovers_will_be_stopped(self) -> None:
        """Leftovers are a warning that says they will be stopped before launch."""
        result = evaluate(profile(), inventory("l40s.yaml"), host=HostFacts(leftovers=(LEFTOVER,)), version=V32)
        assert ("1 leftover vLLM process of ours (pid 4343 VLLM::EngineCore) will be stopped before launch"
                == problem(result, "leftover_processes").message)

    def test_weights_error_shows_the_arithmetic(self) -> None:
        """Weights above the budget show weights, utilization × total and the budget."""
        result = evaluate(profile(), inventory("l40s.yaml"), host=HostFacts.none(), capacity=cap(weights=45 * GIB),
                          version=V32)
        assert ("the weights need 45.0 GiB per GPU, more than gpu-memory-utilization 0.92 × 44.4 GiB = 40.9 GiB"
                == problem(result, "weights_do_not_fit").message)

    def test_weights_are_checked_at_the_lower_rung(self) -> None:
        """After a rung change the weights are compared with the lower budget."""
        result = evaluate(profile(), inventory("l40s-busy.yaml"), host=HostFacts.none(),
                          capacity=cap(weights=int(39.5 * GIB)), version=V32)
        assert "gpu-memory-utilization 0.88 ×" in problem(result, "weights_do_not_fit").message

    def test_small_shm_says_how_to_fix_it(self) -> None:
        """The /dev/shm fix names --ipc=host and --shm-size."""
        result = evaluate(profile({"tensor-parallel-size": 2}), inventory("h100x2.yaml"),
                          host=HostFacts(shm_bytes=64 * MIB), version=V32)
        fix = problem(result, "shm_too_small").fix
        assert "--ipc=host" in fix
        assert "--shm-size" in fix

    def test_prohibited_compute_mode_blocks(self) -> None:
        """Compute mode PROHIBITED allows no CUDA context at all: an error."""
        base = inventory("l40s.yaml")
        prohibited = GpuInventory(**{**_fields(base), "devices": (_device(base.devices[0], compute_mode="prohibited"),)})
        result = evaluate(profile(), prohibited, host=HostFacts.none(), version=V32)
        assert [("compute_mode", "error")] == found(result)

    def test_an_unknown_compute_capability_is_a_warning(self) -> None:
        """A GPU that reports no CC and is not in the table cannot be checked for FP8 KV: a warning."""
        base = inventory("t4-no-cc.yaml")
        odd = GpuInventory(**{**_fields(base), "devices": (_device(base.devices[0], name="NVIDIA Mystery"),)})
        result = evaluate(profile(), odd, host=HostFacts.none(), version=V32)
        assert ([("cc_unknown", "warning")], {}) == (found(result), dict(result.overrides))

    def test_throttling_names_the_reason_and_temperature(self) -> None:
        """The throttling warning names the slowdown reasons (not the power cap) and the temperature."""
        result = evaluate(profile(), inventory("h100-unhealthy.yaml"), host=HostFacts.none(), version=V32)
        assert ("GPU 0 (NVIDIA H100 80GB HBM3) is slowed down at 91 °C: hw_thermal_slowdown"
                == problem(result, "gpu_throttled").message)


def _fields(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in type(obj).__slots__}


def _device(device: GpuDevice, **changes: Any) -> GpuDevice:
    return GpuDevice(**{**_fields(device), **changes})


class TestCpuDevice:
    @pytest.mark.parametrize(("capacity", "available", "expected"), [
        (cap(weights=2 * GIB, budget=5 * GIB, explicit=True, reserve=0), 8 * GIB, []),
        (cap(weights=6 * GIB, budget=9 * GIB, explicit=True, reserve=0), 8 * GIB, [("host_memory_low", "error")]),
        (cap(weights=2 * GIB, budget=20 * GIB), 8 * GIB, [("host_memory_low", "error")]),
        (None, 1 * GIB, []),
    ])
    def test_host_memory_replaces_the_gpu_checks(self, capacity: CapacityPlan | None, available: int,
                                                 expected: list[tuple[str, str]]) -> None:
        """On the CPU backend only RAM is checked: weights + KV space (or utilization × RAM) vs available."""
        cpu = profile({"kv-cache-dtype": None}, launcher={"device": "cpu"})
        result = evaluate(cpu, inventory("no-driver.yaml"), host=HostFacts(memory_available_bytes=available),
                          capacity=capacity, version=V32)
        assert (expected, None) == (found(result), result.gpu)


# --------------------------------------------------------------------------- GPU specs


class TestGpuSpecs:
    @pytest.mark.parametrize(("name", "expected"), [
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx6000-ada"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("Tesla T4", "t4"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A30", None),  # not in the table
        ("Some Future GPU", None),
    ])
    def test_nvml_names_match_the_table(self, name: str, expected: str | None) -> None:
        """NVML's device names map to the --gpu table (for its CUDA-visible share)."""
        model = match_gpu(name)
        assert expected == (model.name if model else None)

    def test_spec_of_an_inventory(self) -> None:
        """gpu_spec uses the table's CUDA share with the device's own total and lists free memory."""
        spec = gpu_spec(inventory("l40s.yaml"), 1)
        assert GpuSpec(GpuModel("l40s", 46068, (8, 9), 0.987), 1, "inventory", (45498 * MIB,)) == spec

    def test_spec_of_an_unknown_gpu_keeps_its_name(self) -> None:
        """A device not in the table keeps its NVML name and total, with the default CUDA share."""
        base = inventory("l40s.yaml")
        odd = GpuInventory(**{**_fields(base), "devices": (_device(base.devices[0], name="NVIDIA Mystery"),)})
        spec = gpu_spec(odd, 1)
        assert (GpuModel("NVIDIA Mystery", 46068, (8, 9)), "inventory") == (spec.model, spec.source) if spec else None

    @pytest.mark.parametrize(("name", "count", "expected"), [
        ("h100x2.yaml", 2, 2), ("h100x2.yaml", 4, 2), ("zero-gpus.yaml", 1, None), ("no-driver.yaml", 1, None),
    ])
    def test_spec_counts_the_visible_devices(self, name: str, count: int, expected: int | None) -> None:
        """The spec covers at most the visible devices; none visible means no spec."""
        spec = gpu_spec(inventory(name), count)
        assert expected == (spec.count if spec else None)

    @pytest.mark.parametrize("text", ["a100-80gb", "l40s x2", "h200", "mem=79.2GiB,cc=8.0,count=2", "rtx-4090"])
    def test_simulated_inventory_gives_back_the_spec(self, text: str) -> None:
        """plan --gpu: the synthetic inventory yields the same GPU model back, all memory free."""
        spec = parse_gpu_spec(text)
        again = gpu_spec(inventory_from_spec(spec), spec.count)
        assert (spec.model, spec.count, (spec.total_bytes,) * spec.count) == (
            (again.model, again.count, again.free_bytes) if again else None)

    @pytest.mark.parametrize(("free_mib", "total_mib", "expected"), [
        (45498, 46068, 0.98),
        (41500, 46068, 0.90),
        (17745, 24564, 0.71),
        (400, 24564, 0.0),
    ])
    def test_fitting_utilization(self, free_mib: int, total_mib: int, expected: float) -> None:
        """(free − 0.5 GiB) / CUDA total, floored to 2 decimals, never negative."""
        device = GpuDevice(0, None, "NVIDIA L40S" if total_mib == 46068 else "NVIDIA GeForce RTX 4090", (8, 9),
                           total_mib * MIB, free_mib * MIB, (total_mib - free_mib) * MIB)
        assert expected == fitting_utilization(device)

    @pytest.mark.parametrize(("current", "fits", "expected"), [
        (0.92, None, 0.88),  # no free-memory figure: the next rung down
        (0.92, 0.80, 0.75),  # the highest rung that fits, skipping those that do not
        (0.88, 0.95, 0.75),  # never the current rung or a higher one, however much is free
        (0.92, 0.70, None),  # no rung is that low
        (0.75, None, None),  # the last rung
    ])
    def test_lower_rung_that_fits(self, current: float, fits: float | None, expected: float | None) -> None:
        """The one rule preflight starts from and the ladder's startup_memory rung goes down by."""
        assert expected == lower_rung_that_fits((0.92, 0.88, 0.75), current, fits)

    def test_every_table_gpu_simulates(self) -> None:
        """Every GPU in the table survives the round trip through a synthetic inventory."""
        assert [] == [n for n, m in GPU_TABLE.items()
                      if (s := gpu_spec(inventory_from_spec(GpuSpec(m, 1, "table")), 1)) is None or s.model != m]


# --------------------------------------------------------------------------- results and text


class TestResult:
    def test_to_dict(self) -> None:
        """The JSON form holds the inventory, problems, overrides, changes and whether it blocks."""
        result = evaluate(profile(), inventory("a100-80gb.yaml"), host=HostFacts.none(), version=V32)
        data = json.loads(json.dumps(result.to_dict()))
        assert (["inventory", "problems", "overrides", "changes", "blocking"], {"kv-cache-dtype": "auto"}, False,
                ["code", "severity", "message", "fix"]) == (
            list(data), data["overrides"], data["blocking"], list(data["problems"][0]))

    @pytest.mark.parametrize(("name", "blocking"), [("l40s.yaml", False), ("zero-gpus.yaml", True),
                                                    ("a100-80gb.yaml", False)])
    def test_blocking_means_an_error(self, name: str, blocking: bool) -> None:
        """Only errors block; warnings do not."""
        assert blocking is evaluate(profile(), inventory(name), host=HostFacts.none(), version=V32).blocking

    def test_render_text_shows_devices_problems_and_changes(self) -> None:
        """The text names each device with its memory and processes, each problem with its fix, and the changes."""
        text = preflight_text(evaluate(profile(), inventory("l40s-busy.yaml"), host=HostFacts.none(),
                                              version=V32))
        for expected in ("NVIDIA L40S", "8.9", "40.53", "44.99", "5151 jupyter-lab 3.75 GiB",
                         "WARNING free_memory_low:", "fix: to start at 0.92", "Changes:",
                         "- starting at rung 0.88", "preflight: OK (0 errors, 2 warnings)"):
            assert expected in text

    def test_render_text_without_devices(self) -> None:
        """Without a driver the text still shows the error, its fix and the verdict."""
        text = preflight_text(evaluate(profile(), inventory("no-driver.yaml"), host=HostFacts.none(),
                                              version=V32))
        assert "ERROR   no_driver:" in text
        assert text.endswith("preflight: BLOCKED (1 error, 0 warnings)")


# --------------------------------------------------------------------------- host facts


def safetensors(path: Path, data_bytes: int) -> None:
    header = b'{"__metadata__":{}}'
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * data_bytes)


def hub_snapshot(hf_home: Path, model: str = "org/tiny") -> Path:
    repo = hf_home / "hub" / f"models--{model.replace('/', '--')}"
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    return snapshot


class TestHostFacts:
    @pytest.mark.parametrize(("text", "expected"), [
        ("__version__ = '2.7.0+cu128'\ncuda: Optional[str] = '12.8'\n", "12.8"),
        ("cuda = '11.8'\n", "11.8"),
        ("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n", None),
    ])
    def test_torch_cuda_is_read_without_importing_torch(self, tmp_path: Path, text: str, expected: str | None) -> None:
        """torch/version.py gives the CUDA version torch was built for; a CPU build gives None."""
        path = tmp_path / "version.py"
        path.write_text(text)
        assert expected == torch_cuda([tmp_path / "missing.py", path])

    def test_a_cached_snapshot_is_downloaded(self, tmp_path: Path) -> None:
        """A hub snapshot with its safetensors counts as downloaded, with its size."""
        safetensors(hub_snapshot(tmp_path / "hf") / "model.safetensors", 1000)
        facts = host_facts(profile(model="org/tiny"), environ={"HF_HOME": str(tmp_path / "hf"), "PATH": ""},
                           process_iter=lambda attrs: [])
        assert (True, 1000, str(tmp_path / "hf" / "hub")) == (facts.model_downloaded, facts.model_bytes,
                                                              facts.cache_dir)
        assert facts.cache_free_bytes is not None

    def test_a_partial_download_knows_its_size_from_the_index(self, tmp_path: Path) -> None:
        """With one of two shards present, the model is not downloaded; its size comes from the index."""
        snapshot = hub_snapshot(tmp_path / "hf")
        safetensors(snapshot / "model-00001-of-00002.safetensors", 1000)
        (snapshot / "model.safetensors.index.json").write_text(json.dumps({
            "metadata": {"total_size": 5000}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                             "b": "model-00002-of-00002.safetensors"}}))
        facts = host_facts(profile(model="org/tiny"), environ={"HF_HOME": str(tmp_path / "hf"), "PATH": ""},
                           process_iter=lambda attrs: [])
        assert (False, 5000, 1027) == (facts.model_downloaded, facts.model_bytes, facts.model_present_bytes)

    def test_the_profiles_hf_home_wins(self, tmp_path: Path) -> None:
        """The cache is the one vLLM will use: the profile's env: HF_HOME over the launcher's."""
        prof = profile(model="org/absent", env={"HF_HOME": str(tmp_path / "profile-hf")})
        facts = host_facts(prof, environ={"HF_HOME": str(tmp_path / "other"), "PATH": ""},
                           process_iter=lambda attrs: [])
        assert (False, str(tmp_path / "profile-hf" / "hub")) == (facts.model_downloaded, facts.cache_dir)

    def test_a_local_model_directory_is_downloaded(self, tmp_path: Path) -> None:
        """A model given as a local directory counts as downloaded."""
        safetensors(tmp_path / "model.safetensors", 10)
        facts = host_facts(profile(model=str(tmp_path)), environ={"PATH": ""}, process_iter=lambda attrs: [])
        assert (True, 10) == (facts.model_downloaded, facts.model_bytes)

    def test_none_has_no_host_facts(self) -> None:
        """HostFacts.none() (simulated GPUs) knows nothing, so no host check runs."""
        assert HostFacts(None, None, None, None, None, 0, None, None, ()) == HostFacts.none()


# --------------------------------------------------------------------------- the command


def local_model(tmp_path: Path) -> Path:
    """A local copy of the Qwen3-Coder config with tiny weights: capacity can be computed, nothing downloads."""
    model = tmp_path / "qwen3-coder"  # named as it is: a bare "qwen3" path is taken for hybrid-thinking Qwen3
    model.mkdir()
    shutil.copy(ROOT / "launcher" / "data" / "models" / f"{MODEL.split('/')[1]}.json",
                model / "config.json")
    safetensors(model / "model.safetensors", 1000)
    return model


class TestRunCommand:
    def test_no_gpu_and_no_inventory_is_a_result_not_a_traceback(self) -> None:
        """Without NVML, nvidia-smi or an inventory, the result holds the "no driver" error."""
        result = run_preflight(None, environ={"PATH": ""}, probe_factory=lambda environ: None)
        assert ([("no_driver", "error")], True) == (found(result), result.blocking)

    def test_without_a_profile_only_device_checks_run(self) -> None:
        """Without a profile: the inventory and device-level problems (here the foreign process)."""
        result = run_preflight(None, inventory_path=str(INVENTORIES / "rtx4090-foreign.yaml"),
                                       environ={"PATH": ""})
        assert [("foreign_processes", "warning")] == [c for c in found(result) if c[0] not in MACHINE_PROCESSES]

    def test_with_a_profile_and_a_probe(self, tmp_path: Path) -> None:
        """The probe from the factory is read, the capacity is computed and the profile's checks run."""
        path = tmp_path / "p.yaml"
        path.write_text(yaml.safe_dump({"model": str(local_model(tmp_path)),
                                        "vllm": {"host": "127.0.0.1", "kv-cache-dtype": "fp8",
                                                 "max-model-len": 65536}}))
        result = run_preflight(str(path), environ={"PATH": "", "HOME": str(tmp_path)},
                                       probe_factory=lambda environ: FakeProbe(INVENTORIES / "a100-80gb.yaml", environ))
        assert [("fp8_kv_unsupported", "warning")] == [c for c in found(result) if c[0] not in MACHINE_PROCESSES]
        assert "~" in result.changes[0]  # the capacity plan was there to quote
        assert ("a100-80gb", "inventory") == ((result.gpu.model.name, result.gpu.source) if result.gpu else None)


class TestCommandLine:
    def test_plan_on_an_a100_drops_fp8_and_halves_capacity(self, no_installed_vllm: None,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
        """`plan configs/qwen3.yaml --gpu a100-80gb --json`: fp8 KV dropped with a warning, capacity halved."""
        assert 0 == cli.main(["plan", str(CONFIGS / "qwen3.yaml"), "--gpu", "a100-80gb", "--json"])
        dropped = json.loads(capsys.readouterr().out)
        assert 78 == cli.main(["plan", str(CONFIGS / "qwen3.yaml"), "--gpu", "a100-80gb", "--json",
                               "--set", "launcher.ladder.drop_fp8_kv_if_unsupported=false"])
        kept = json.loads(capsys.readouterr().out)
        assert ("auto", {"kv-cache-dtype": "auto"}, [("fp8_kv_unsupported", "warning")]) == (
            dropped["kv_cache_dtype"], dropped["overrides"],
            [(p["code"], p["severity"]) for p in dropped["problems"]])
        assert "KV capacity halves" in dropped["changes"][0]
        assert kept["kv_tokens"] // 2 == pytest.approx(dropped["kv_tokens"], abs=16)

    def test_preflight_names_the_foreign_process_and_what_fits(self, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
        """`preflight --gpu-inventory <4090 with a foreign process>` names it and the utilization that fits."""
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        assert 0 == cli.main(["preflight", "--gpu-inventory", str(INVENTORIES / "rtx4090-foreign.yaml")])
        out = capsys.readouterr().out
        assert "pid 4242 python3 6.00 GiB" in out
        assert "at most gpu-memory-utilization 0.71 fits" in out

    def test_preflight_json_with_the_guide_profile_blocks(self, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
        """With configs/qwen3.yaml the 4090's free memory is an error (exit 78) whose fix gives 0.71."""
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        code = cli.main(["preflight", str(CONFIGS / "qwen3.yaml"), "--gpu-inventory",
                         str(INVENTORIES / "rtx4090-foreign.yaml"), "--json"])
        data = json.loads(capsys.readouterr().out)
        low = next(p for p in data["problems"] if p["code"] == "free_memory_low")
        assert (78, "error", True, 4242) == (code, low["severity"], data["blocking"],
                                             data["inventory"]["devices"][0]["processes"][0]["pid"])
        assert "0.71" in low["fix"]
