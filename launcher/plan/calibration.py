"""What this box measured: the KV capacity of real start-ups, and the plan they give for new settings.

vLLM's own log says how much memory a start-up really left for the KV cache. On the same GPU, vLLM
version, model and reserve-changing flags the non-KV reserve is the same, so another utilization
moves the KV budget by the difference × the GPU's memory, and (V0 only) another max-model-len moves
it by the change of the profiling batch. That beats any estimate: the error is one block per GPU
plus the rounding of the logged GiB figures.

Records come from every start-up `up` reaches READY with (state dir: <profile>/calibration.json),
or from an existing vLLM log (`plan --from-log FILE`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from launcher.plan.capacity import CapacityInputs, CapacityPlan, forward_peak_bytes, kv_bytes_per_token, v0_batched_tokens
from launcher.statedir import read_json, write_json_atomic
from launcher.units import GIB
from launcher.vllm.versions import semantics

log = structlog.get_logger("vllm_launch")

FILE = "calibration.json"
LOGGED_GIB_ROUNDING = 0.005 * GIB  # vLLM prints GiB with two decimals


@dataclass(frozen=True, slots=True)
class Measured:
    """One real start-up's KV capacity, as vLLM logged it, with the settings it ran with."""

    key: str
    vllm_version: str
    utilization: float
    max_model_len: int
    kv_tokens: int
    available_kv_bytes: int  # per GPU
    total_bytes: int | None = None  # what CUDA saw, when the log prints it
    driver: str | None = None
    breakdown: dict[str, float] = field(default_factory=dict)  # vLLM's own figures, GiB, where it printed them
    starts: int = 1
    source: str = "start-up"
    recorded_at: float = 0.0


def key(gpu: str, count: int, vllm_version: str, model: str, flags: Mapping[str, Any]) -> str:
    """GPU model and count, vLLM version, model and the flags that change the reserve."""
    parts = [gpu.lower(), str(count), vllm_version, model]
    parts += [f"{name}={flags.get(name)}" for name in ("dtype", "quantization", "tensor-parallel-size",
                                                       "pipeline-parallel-size", "max-num-seqs",
                                                       "max-num-batched-tokens", "enforce-eager", "kv-cache-dtype")]
    return "|".join(parts)


BREAKDOWN = ("model_loading_gib", "weights_gib", "activation_gib", "non_torch_gib", "cudagraph_gib")


def measured(numbers: Mapping[str, Any], *, record_key: str, vllm_version: str, utilization: float,
             max_model_len: int, source: str, driver: str | None = None) -> Measured | None:
    """A record from a diagnosis' numbers, or None when the log did not print the KV figures."""
    tokens, available = numbers.get("kv_tokens"), numbers.get("available_kv_gib")
    if not isinstance(tokens, int) or not isinstance(available, int | float) or tokens <= 0 or available <= 0:
        return None
    total = numbers.get("total_gib")
    return Measured(record_key, str(numbers.get("vllm_version") or vllm_version),
                    float(numbers.get("utilization") or utilization), int(numbers.get("max_model_len") or max_model_len),
                    tokens, int(available * GIB), int(total * GIB) if isinstance(total, int | float) else None,
                    driver=driver, breakdown={k: float(numbers[k]) for k in BREAKDOWN if isinstance(numbers.get(k), int | float)},
                    source=source, recorded_at=time.time())


def predict(inputs: CapacityInputs, record: Measured, estimate: CapacityPlan) -> CapacityPlan:
    """The capacity for `inputs` from a measured start-up of the same setup."""
    total = record.total_bytes or inputs.gpu.total_bytes
    budget = record.available_kv_bytes + int((inputs.utilization - record.utilization) * total)
    version = semantics(record.vllm_version)
    if version.engine == "v0" and inputs.max_num_batched_tokens is None:
        then = v0_batched_tokens(record.max_model_len, inputs.enable_chunked_prefill, inputs.multimodal)
        now = v0_batched_tokens(inputs.max_model_len, inputs.enable_chunked_prefill, inputs.multimodal)
        tp = inputs.tensor_parallel_size
        budget -= forward_peak_bytes(inputs.arch, now, tp) - forward_peak_bytes(inputs.arch, then, tp)
    per_token, _ = kv_bytes_per_token(inputs.arch, inputs.kv_cache_dtype, inputs.tensor_parallel_size,
                                      inputs.pipeline_parallel_size, inputs.max_model_len)
    block = inputs.block_size
    blocks = max(0, budget // (per_token * block) - (1 if version.reserves_null_block else 0))
    tokens = int(blocks * block)
    # The rounding of the logged GiB (the record's and, where the log printed it, its total) and one block.
    spread = (LOGGED_GIB_ROUNDING * (2 if record.total_bytes else 1)) / per_token + block
    sessions = tokens / inputs.max_model_len if inputs.max_model_len else 0.0
    verdict = "fits" if tokens >= inputs.max_model_len else ("context_too_long" if tokens else "weights_do_not_fit")
    described = (f"measured on this box ({record.starts} start-up{'s' if record.starts > 1 else ''}, "
                 f"vLLM {record.vllm_version})" if record.source == "start-up" else f"measured from {record.source}")
    return replace(estimate, kv_budget_bytes=budget, kv_tokens=tokens, sessions=round(sessions, 2), verdict=verdict,
                   error_range=spread / tokens if tokens else 0.0, basis=described)


def load(directory: Path) -> dict[str, Measured]:
    """The records of this box. The state directory is writable by the service user (and so by vLLM): a
    record of the wrong shape or types is skipped with a warning, never trusted."""
    data = read_json(directory / FILE, lambda exc: log.warning("calibration.unreadable", error=str(exc),
                                                              action="ignored: the estimate is used"))
    records: dict[str, Measured] = {}
    if data is not None:
        for name, item in data.items():
            try:
                record = Measured(**item) if isinstance(item, dict) else None
            except TypeError:
                record = None  # a record of another release of the launcher
            problem = "not a record of this launcher" if record is None else _problem(record)
            if problem or record is None:
                log.warning("calibration.record_ignored", path=str(directory / FILE), record=str(name)[:200],
                            problem=problem)
                continue
            records[str(name)] = record
    return records


def _is_int(value: object, minimum: int = 1) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _problem(record: Measured) -> str | None:
    """What makes a record read back from disk unusable, or None."""
    texts = (record.key, record.vllm_version, record.source)
    if not all(isinstance(t, str) for t in texts) or not isinstance(record.driver, str | None):
        return "key, vllm_version, source and driver must be text"
    try:
        semantics(record.vllm_version)
    except ValueError:
        return f"vllm_version {record.vllm_version[:40]!r} is not a vLLM version"
    if not (_is_number(record.utilization) and 0 < record.utilization <= 1):
        return f"utilization must be a fraction in (0, 1], got {record.utilization!r}"
    counts = (record.max_model_len, record.kv_tokens, record.available_kv_bytes, record.starts)
    if not all(_is_int(c) for c in counts) or not (record.total_bytes is None or _is_int(record.total_bytes)):
        return "max_model_len, kv_tokens, available_kv_bytes, total_bytes and starts must be whole numbers ≥ 1"
    if not _is_number(record.recorded_at) or not isinstance(record.breakdown, dict) or not all(
            isinstance(k, str) and _is_number(v) for k, v in record.breakdown.items()):
        return "recorded_at and the breakdown must be numbers"
    return None


def save(directory: Path, record: Measured) -> None:
    """Keep the latest record per key, counting the start-ups that agree with it."""
    records = load(directory)
    old = records.get(record.key)
    starts = old.starts + 1 if old and old.available_kv_bytes == record.available_kv_bytes else 1
    records[record.key] = replace(record, starts=starts)
    write_json_atomic(directory / FILE, {name: asdict(item) for name, item in records.items()})


def matching(records: Iterable[Measured], record_key: str, driver: str | None = None) -> Measured | None:
    """The record of this setup; with both drivers known, only one measured under the same driver."""
    return next((r for r in records if r.key == record_key and (not driver or not r.driver or r.driver == driver)),
                None)
