"""Calibration: one real start-up predicts another of the same setup, within one block plus the log's rounding."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from launcher.cli import main
from launcher.gpu.catalog import GpuSpec
from launcher.plan import calibration, capacity
from launcher.units import GIB
from launcher.vllm.diagnose import diagnose_lines
from tests.kv_observations import DATA, inputs, observations

OBS = {o["id"]: o for o in observations()}
# What CUDA saw on an A100-80GB, as a real 0.26 log of that GPU prints it: "Free memory on device (78.84/79.25 GiB)".
A100_CUDA_TOTAL = int(79.25 * GIB)


def record_from(o: dict[str, Any]) -> calibration.Measured:
    numbers = diagnose_lines(o["log_lines"].splitlines()).numbers
    made = calibration.measured(numbers, record_key="k", vllm_version=str(o.get("vllm_version") or "0.6.6"),
                                utilization=float(o["gpu_memory_utilization"]), max_model_len=int(o["max_model_len"]),
                                source="start-up")
    assert made is not None, o["id"]
    return made


def bound(per_token: int, block: int, logged_gib_values: float) -> float:
    """One block, plus 0.005 GiB (two decimals) of each logged GiB figure the prediction rests on."""
    return block + logged_gib_values * 0.005 * GIB / per_token


def test_a_real_start_up_predicts_another_at_a_lower_utilization() -> None:
    """Qwen2-7B on an A100-80GB, vLLM 0.10.1.1, the same run at 0.5 and at 0.25 (one source, two logs)."""
    at_half, at_quarter = OBS["a100-80gb-qwen2-7b-util05-v01011"], OBS["a100-80gb-qwen2-7b-util025-v01011"]
    target = inputs(at_quarter)
    target = replace(target, gpu=GpuSpec(replace(target.gpu.model, cuda_visible=A100_CUDA_TOTAL / (
        target.gpu.model.nvml_mib * 1024**2)), 1, "probe"))
    estimate = capacity.estimate(target)
    predicted = calibration.predict(target, record_from(at_half), estimate)
    per_token, _ = capacity.kv_bytes_per_token(target.arch)
    # the record's 24.83 GiB, and the total's two decimals scaled by the utilization step (0.25)
    assert abs(predicted.kv_tokens - at_quarter["kv_tokens"]) <= bound(per_token, 16, 1 + 0.25)
    assert predicted.basis.startswith("measured on this box (1 start-up, vLLM 0.10.1.1)")
    assert abs(estimate.kv_tokens - at_quarter["kv_tokens"]) > abs(predicted.kv_tokens - at_quarter["kv_tokens"])


def test_a_real_v0_start_up_predicts_a_longer_context() -> None:
    """Llama-3.1-8B on an RTX 3090, V0, profiled at max-model-len 20,000 then 29,000 (vLLM issue 10517)."""
    short, long = OBS["rtx3090-llama31-8b-v0-len20k"], OBS["rtx3090-llama31-8b-v0-len29k"]
    target = inputs(long)
    predicted = calibration.predict(target, record_from(short), capacity.estimate(target))
    per_token, _ = capacity.kv_bytes_per_token(target.arch)
    assert abs(predicted.kv_tokens - long["kv_tokens"]) <= bound(per_token, 16, 1)


def test_plan_from_an_existing_log(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_installed_vllm: None) -> None:
    """`plan --from-log FILE` answers from the log's measured KV memory, and says so."""
    log = tmp_path / "vllm.log"
    log.write_text(OBS["a100-80gb-qwen2-7b-util05-v01011"]["log_lines"])
    config = DATA / "models" / "Qwen--Qwen2-7B-Instruct.json"
    assert 0 == main(["plan", "--model-config", str(config), "--gpu", "a100-80gb", "--vllm-version", "0.10.1.1",
                      "--set", "vllm.gpu-memory-utilization=0.25", "--set", "vllm.max-model-len=16384",
                      "--from-log", str(log), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert f"measured from {log}" == data["capacity_basis"]
    low, high = data["kv_tokens_range"]
    assert abs(data["kv_tokens"] - 93_872) / 93_872 < 0.01  # the catalog's A100 total, not this box's
    assert high - low < 0.01 * data["kv_tokens"]


def test_a_log_without_kv_figures_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             no_installed_vllm: None) -> None:
    log = tmp_path / "early.log"
    log.write_text("INFO 11-29 15:32:41 [api_server.py:1] vLLM API server version 0.32.0\n")
    assert 2 == main(["plan", "configs/qwen3.yaml", "--gpu", "l40s", "--from-log", str(log)])
    assert "holds no 'Available KV cache memory'" in capsys.readouterr().err


def test_records_of_this_box_are_used_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str], no_installed_vllm: None) -> None:
    """Two start-ups that measured the same are one record of 2; plan uses it for the same setup."""
    from launcher.plan.report import PlanRequest, run_plan

    monkeypatch.setenv("VLLM_LAUNCH_STATE_DIR", str(tmp_path))
    report = run_plan(PlanRequest("configs/qwen3.yaml", gpu="l40s"))
    assert "estimated" == report.capacity.basis  # type: ignore[union-attr]
    key = calibration.key("l40s", 1, report.version.version, report.profile.model, report.plan.flags)
    record = calibration.Measured(key, report.version.version, 0.92, 65536, 180_000, int(8.24 * GIB))
    calibration.save(tmp_path / "qwen3", record)
    calibration.save(tmp_path / "qwen3", record)
    assert 2 == calibration.load(tmp_path / "qwen3")[key].starts
    again = run_plan(PlanRequest("configs/qwen3.yaml", gpu="l40s"))
    assert again.capacity is not None
    assert f"measured on this box (2 start-ups, vLLM {report.version.version})" == again.capacity.basis
    assert abs(again.capacity.kv_tokens - 180_000) <= 16 + 0.005 * GIB / again.capacity.kv_bytes_per_token
    other = run_plan(PlanRequest("configs/qwen3.yaml", gpu="l40s", sets=("vllm.max-num-seqs=64",)))
    assert "estimated" == other.capacity.basis  # type: ignore[union-attr]  # another reserve: no match


def test_a_record_keeps_vllms_breakdown_and_its_driver() -> None:
    """vLLM 0.10.2 prints its whole breakdown at start: the record keeps it, with the driver it ran under."""
    o = OBS["h100-qwen3-30b-a3b-2507-v0102"]
    numbers = diagnose_lines(o["log_lines"].splitlines()).numbers
    record = calibration.measured(numbers, record_key="k", vllm_version="0.10.2", utilization=0.9,
                                  max_model_len=6144, source="start-up", driver="570.124.06")
    assert record is not None
    assert {"weights_gib": 56.93, "activation_gib": 5.58, "non_torch_gib": 0.07, "cudagraph_gib": 0.69} == {
        k: record.breakdown[k] for k in ("weights_gib", "activation_gib", "non_torch_gib", "cudagraph_gib")}
    assert record is calibration.matching([record], "k", "570.124.06")
    assert record is calibration.matching([record], "k")  # `plan --gpu` knows no driver
    assert calibration.matching([record], "k", "550.54.15") is None  # another driver: measure again


@pytest.mark.parametrize("bad", [
    {"utilization": "abc"},
    {"utilization": 7.0},
    {"kv_tokens": "180000"},
    {"available_kv_bytes": True},
    {"vllm_version": "--trust-remote-code"},
    {"total_bytes": -1},
    {"breakdown": ["x"]},
    {"unknown_field": 1},
])
def test_a_tampered_record_is_skipped_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], no_installed_vllm: None,
                                                     bad: dict[str, Any]) -> None:
    """calibration.json lives in the state directory, which vLLM can write: a record of the wrong types is
    skipped (plan falls back to the estimate) instead of a traceback or a prediction from garbage."""
    from launcher.plan.report import PlanRequest, run_plan

    monkeypatch.setenv("VLLM_LAUNCH_STATE_DIR", str(tmp_path))
    report = run_plan(PlanRequest("configs/qwen3.yaml", gpu="l40s"))
    key = calibration.key("l40s", 1, report.version.version, report.profile.model, report.plan.flags)
    calibration.save(tmp_path / "qwen3", calibration.Measured(key, report.version.version, 0.92, 65536, 180_000,
                                                               int(8.24 * GIB)))
    path = tmp_path / "qwen3" / calibration.FILE
    records = json.loads(path.read_text())
    records[key].update(bad)
    records["not a record"] = "abc"
    path.write_text(json.dumps(records))
    with capture_logs() as logs:
        assert {} == calibration.load(tmp_path / "qwen3")
    assert 2 == len([e for e in logs if e["event"] == "calibration.record_ignored"])
    assert 0 == main(["plan", "configs/qwen3.yaml", "--gpu", "l40s"])
    assert "measured on this box" not in capsys.readouterr().out
