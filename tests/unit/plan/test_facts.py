"""The facts plan, preflight and up stand on, gathered one way: the GPUs, the model's files, the capacity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.config.load import load, loads
from launcher.config.profile import Profile
from launcher.errors import UsageError
from launcher.gpu.catalog import parse_gpu_spec
from launcher.gpu.inventory import GpuInventory
from launcher.gpu.match import inventory_from_spec
from launcher.plan import calibration, facts
from launcher.plan.problems import Severity
from launcher.plan.report import PlanRequest, run_plan, run_preflight
from launcher.units import GIB
from launcher.vllm.command import build_plan
from launcher.vllm.versions import semantics

VERSION = semantics("0.33.0")
L40S = inventory_from_spec(parse_gpu_spec("l40s"))


def gathered(prof: Profile, inventory: GpuInventory | None, tmp_path: Path, **kwargs: object) -> facts.Facts:
    return facts.gather(prof, build_plan(prof), inventory, version=VERSION,
                        environ={"HF_HOME": str(tmp_path / "hf")}, **kwargs)  # type: ignore[arg-type]


def test_no_probe_is_one_message_for_plan_and_preflight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        no_installed_vllm: None) -> None:
    """Neither NVML nor nvidia-smi: the inventory holds NO_GPU (preflight files it as no_driver), and plan
    refuses with the same words and the flags that plan for a GPU anyway."""
    monkeypatch.setattr(facts, "detect", lambda environ: None)
    inventory = facts.read_inventory(None, {"PATH": ""})
    assert (facts.NO_GPU, True) == (inventory.error, facts.no_gpu(inventory))
    path = tmp_path / "p.yaml"
    path.write_text("model: org/m\nvllm: {host: 127.0.0.1}\n")
    result = run_preflight(str(path), environ={"PATH": "", "HOME": str(tmp_path)})
    assert [("no_driver", Severity.ERROR, facts.NO_GPU)] == [(p.code, p.severity, p.message) for p in result.problems
                                                            if p.code not in ("leftover_processes", "vllm_processes_not_ours")]
    with pytest.raises(UsageError) as refused:
        run_plan(PlanRequest(str(path)))
    assert str(refused.value).startswith(f"{facts.NO_GPU}: pass --gpu NAME")
    assert "--gpu-inventory FILE" in str(refused.value)


def test_an_inventory_file_is_read_before_any_probe(tmp_path: Path) -> None:
    def no_probe(environ: object) -> None:
        raise AssertionError("probed although an inventory file was given")
    path = Path(__file__).parents[2] / "data" / "inventories" / "a100-80gb.yaml"
    inventory = facts.read_inventory(str(path), {}, no_probe)
    assert ("inventory", False) == (inventory.source, facts.no_gpu(inventory))


def test_a_model_that_cannot_be_found_gives_the_reason_and_no_capacity(tmp_path: Path) -> None:
    found = gathered(loads("model: nobody/nothing\nvllm: {host: 127.0.0.1}\n"), L40S, tmp_path)
    assert (None, None, None) == (found.files, found.estimate, found.capacity)
    assert found.no_estimate is not None and "no config.json for nobody/nothing" in found.no_estimate
    assert found.gpu is not None and "l40s" == found.gpu.model.name  # the GPU is a fact of its own


def test_a_config_the_estimator_cannot_size_is_a_reason_not_a_traceback(tmp_path: Path) -> None:
    """num_attention_heads 0 divides by zero in the estimator: no estimate, and the reason says so."""
    model = tmp_path / "odd"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2,
                                                   "num_attention_heads": 0}))
    found = gathered(loads(f"model: {model}\nvllm: {{host: 127.0.0.1}}\n"), L40S, tmp_path)
    assert found.files is not None and found.capacity is None
    assert found.no_estimate is not None and found.no_estimate.startswith(f"{model}: config.json cannot be sized (")
    (model / "config.json").write_text(json.dumps({"hidden_size": 64}))
    lacking = gathered(loads(f"model: {model}\nvllm: {{host: 127.0.0.1}}\n"), L40S, tmp_path)
    assert lacking.no_estimate == f"{model}: config.json lacks 'num_hidden_layers' (hidden_size, num_hidden_layers, " \
        "num_attention_heads are needed); pass the model's real config with --model-config"


def test_without_a_usable_gpu_there_is_no_estimate_and_no_reason_of_its_own(tmp_path: Path) -> None:
    """The inventory's error says why (preflight reports it); the model's files are still found."""
    found = gathered(load("configs/qwen3.yaml"), GpuInventory(source="none", error=facts.NO_GPU), tmp_path)
    assert (None, None, None) == (found.gpu, found.capacity, found.no_estimate)
    assert found.files is not None


def test_a_calibration_record_replaces_the_estimate(tmp_path: Path) -> None:
    """A start-up of the same setup recorded in the state directory: the capacity is what it measured."""
    prof = load("configs/qwen3.yaml")
    records = tmp_path / "state"
    plain = gathered(prof, L40S, tmp_path, records=records)
    assert plain.estimate is not None and plain.capacity == plain.estimate  # nothing recorded yet
    key = calibration.key("l40s", 1, VERSION.version, prof.model, build_plan(prof).flags)
    calibration.save(records, calibration.Measured(key, VERSION.version, 0.92, 65536, 180_000, int(8.24 * GIB)))
    found = gathered(prof, L40S, tmp_path, records=records)
    assert found.estimate == plain.estimate and found.capacity is not None
    assert (f"measured on this box (1 start-up, vLLM {VERSION.version})", "estimated") == (
        found.capacity.basis, found.estimate.basis)  # type: ignore[union-attr]
    assert abs(found.capacity.kv_tokens - 180_000) <= 16 + 0.005 * GIB / found.capacity.kv_bytes_per_token
    assert gathered(prof, L40S, tmp_path).capacity == plain.estimate  # no records given: the estimate


def test_a_record_of_another_driver_is_not_used(tmp_path: Path) -> None:
    prof = load("configs/qwen3.yaml")
    key = calibration.key("l40s", 1, VERSION.version, prof.model, build_plan(prof).flags)
    calibration.save(tmp_path, calibration.Measured(key, VERSION.version, 0.92, 65536, 180_000, int(8.24 * GIB),
                                                    driver="550.54.15"))
    for driver, basis in (("550.54.15", "measured on this box"), ("570.124.06", "estimated")):
        found = gathered(prof, GpuInventory(source="inventory", devices=L40S.devices, visible=L40S.visible,
                                            driver_version=driver), tmp_path, records=tmp_path)
        assert found.capacity is not None and found.capacity.basis.startswith(basis), driver


def test_the_cpu_backend_is_sized_on_host_memory_and_never_calibrated(tmp_path: Path) -> None:
    prof = load("configs/qwen3.yaml")
    plain = gathered(prof, None, tmp_path)
    assert plain.gpu is not None and "host" == plain.gpu.source
    key = calibration.key("cpu", 1, VERSION.version, prof.model, build_plan(prof).flags)
    calibration.save(tmp_path, calibration.Measured(key, VERSION.version, 0.92, 65536, 180_000, int(8.24 * GIB)))
    found = gathered(prof, None, tmp_path, records=tmp_path)
    assert found.capacity is not None and "estimated" == found.capacity.basis
