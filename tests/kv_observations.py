"""The real start-ups in tests/data/kv_observations/ and the estimator's error on them, in and out of sample.

Shared by benchmarks/kv_estimator.py and tests/unit/plan/test_capacity_accuracy.py. Only the reserve
terms vLLM's code does not fix (launcher.plan.capacity.ReserveModel) are fitted; leave-one-source-out
refits them without each source in turn and scores that source's start-ups with the result.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from launcher.gpu import catalog
from launcher.plan import capacity, modelinfo
from launcher.units import GIB, MIB
from launcher.vllm.versions import semantics

DATA = Path(__file__).resolve().parent / "data" / "kv_observations"
ZERO = capacity.ReserveModel(0, 0, 0, 0, 0, 0)


def version_of(o: dict[str, Any]) -> str:
    """The logged version; for the V0 logs that state none, the V0 era their format dates them to."""
    if o.get("vllm_version"):
        return str(o["vllm_version"])
    return "0.6.6" if o.get("engine") == "v0" else "0.10.0"


def inputs(o: dict[str, Any], weights_from_log: bool = True) -> capacity.CapacityInputs:
    """What the plan would know: with `weights_from_log`, the checkpoint's size as "Model loading took" shows it
    (the plan reads it from the safetensors files), else config.json arithmetic."""
    config = json.loads((DATA / o["model_config"]).read_text())
    arch = modelinfo.arch_from_config(config, o["model"])
    tp = int(o.get("tensor_parallel_size") or 1)
    pp = int(o.get("pipeline_parallel_size") or 1)
    count = int(o.get("gpu_count") or tp * pp)
    if weights_from_log and o.get("model_loading_gib"):
        weights, source = int(o["model_loading_gib"] * GIB * tp * pp), "log"
    else:
        weights, source = modelinfo.estimate_weight_bytes(arch), "config"
    model = catalog.lookup(o["gpu"])
    if model is None:
        raise SystemExit(f"{o['id']}: GPU {o['gpu']!r} is not in launcher/gpu/catalog.py")
    version = semantics(version_of(o))
    max_len = int(o.get("max_model_len") or arch.max_position_embeddings or 4096)
    utilization = float(o.get("gpu_memory_utilization") or version.default_utilization)
    return capacity.CapacityInputs(
        arch=arch, weights_bytes=weights, weights_source=source, gpu=catalog.GpuSpec(model, count, "table"),
        version=version, utilization=utilization, max_model_len=max_len,
        kv_cache_dtype=str(o.get("kv_cache_dtype") or "auto"), tensor_parallel_size=tp, pipeline_parallel_size=pp,
        enforce_eager=bool(o.get("enforce_eager")), max_num_seqs=o.get("max_num_seqs"),
        max_num_batched_tokens=o.get("max_num_batched_tokens"), enable_chunked_prefill=o.get("enable_chunked_prefill"),
        multimodal=bool(o.get("multimodal")), block_size=int(o.get("block_size") or 16))


@dataclass(frozen=True)
class Case:
    """One observation reduced to what the fitted terms act on (the rest of the estimate is fixed)."""

    ident: str
    source: str
    real: int
    budget_without_fitted: int  # the KV budget before non-torch memory and the CUDA-graph estimate
    per_block: int
    block: int
    null_block: bool
    peers: int
    fabric: bool
    graph_layers: int  # layers whose CUDA graphs vLLM ≥ 0.20 budgets for; 0 otherwise
    regime: str
    fp8_moe: bool  # an FP8 MoE model on vLLM < 0.22

    def predict(self, reserve: capacity.ReserveModel) -> int:
        per_peer = reserve.per_peer_fabric if self.fabric else reserve.per_peer_pcie
        base = reserve.non_torch_base_v0 if self.regime == "v0" else reserve.non_torch_base
        budget = (self.budget_without_fitted - base - per_peer * self.peers
                  - reserve.cudagraph_per_layer * self.graph_layers
                  - (reserve.fp8_moe_workspace if self.fp8_moe else 0))
        if budget <= 0:
            return 0
        blocks = budget // self.per_block - (1 if self.null_block else 0)
        return max(0, blocks) * self.block

    def error(self, reserve: capacity.ReserveModel) -> float:
        return abs(self.predict(reserve) - self.real) / self.real


def observations() -> list[dict[str, Any]]:
    return list(yaml.safe_load((DATA / "observations.yaml").read_text()))


def cases(weights_from_log: bool = True) -> list[Case]:
    """Every observation the estimate is scored on (an observation can be excluded, with its reason)."""
    found = []
    for o in observations():
        if o.get("excluded_from_accuracy"):
            continue
        i = inputs(o, weights_from_log)
        plan = capacity.estimate(i, ZERO)
        tp, pp = i.tensor_parallel_size, i.pipeline_parallel_size
        layers = math.ceil(i.arch.num_layers / pp) if i.version.cudagraphs_in_budget and not i.enforce_eager else 0
        regime = "v0" if i.version.engine == "v0" else ("v1-multi-gpu" if tp * pp > 1 else "v1")
        found.append(Case(o["id"], o["source_url"], int(o["kv_tokens"]), plan.kv_budget_bytes,
                          plan.kv_bytes_per_token * i.block_size, i.block_size, i.version.reserves_null_block,
                          capacity.peers(tp, pp), i.gpu.model.fabric, layers, regime,
                          i.arch.is_moe and i.arch.quant_method in capacity.FP8_WEIGHTS
                          and not i.version.bounds_profiling_splits))
    return found


def source_of(case: Case) -> str:
    """A source is a repository or an issue thread: several logs of one run count once."""
    if not case.source.startswith("https://"):
        return case.source
    parts = case.source.split("/")
    return "/".join(parts[:7]) if "/issues/" in case.source or "/discussions/" in case.source else "/".join(parts[:5])


STEPS = {  # the grid each fitted term is searched on (bytes)
    "non_torch_base": [step * MIB for step in range(0, 1024 + 1, 16)],
    "non_torch_base_v0": [step * MIB for step in range(0, 1024 + 1, 16)],
    "per_peer_fabric": [step * MIB for step in range(0, 1024 + 1, 16)],
    "cudagraph_per_layer": [step * MIB for step in range(0, 40 + 1, 1)],
    "fp8_moe_workspace": [step * MIB for step in range(0, 4096 + 1, 64)],
}


def loss(model: capacity.ReserveModel, training: Sequence[Case]) -> float:
    return statistics.fmean(c.error(model) for c in training)


def fit(training: Sequence[Case], rounds: int = 4) -> capacity.ReserveModel:
    """The reserve terms that minimise the mean relative error on `training`: coordinate descent over
    each term's grid, in a fixed order, from several starts of the two terms that compete for the same
    multi-GPU FP8 MoE cases (deterministic; ties keep the smaller value). A term no training case
    exercises stays 0."""
    best: tuple[float, capacity.ReserveModel] | None = None
    for fp8_start, fabric_start in itertools.product((0, 1, 2, 3), (0, 256, 512)):
        model = replace(ZERO, fp8_moe_workspace=fp8_start * GIB, per_peer_fabric=fabric_start * MIB)
        for _ in range(rounds):
            for field, steps in STEPS.items():
                model = replace(model, **{field: min((loss(replace(model, **{field: v}), training), v)
                                                     for v in steps)[1]})
        score = loss(model, training)
        if best is None or score < best[0] - 1e-12:
            best = (score, model)
    assert best is not None
    return best[1]


def leave_one_source_out(all_cases: Sequence[Case]) -> dict[str, float]:
    """Each case's error when the reserve was fitted without any case of its source."""
    errors: dict[str, float] = {}
    for source in sorted({source_of(c) for c in all_cases}):
        held = [c for c in all_cases if source_of(c) == source]
        model = fit([c for c in all_cases if source_of(c) != source])
        errors.update({c.ident: c.error(model) for c in held})
    return errors


def summary(errors: Iterable[float]) -> tuple[float, float]:
    values = list(errors)
    return statistics.median(values), max(values)


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def constant_reserve(case_inputs: capacity.CapacityInputs, per_gpu: int) -> int:
    """Baseline: utilization × memory − weights − a constant per GPU."""
    i = case_inputs
    per_token, _ = capacity.kv_bytes_per_token(i.arch, i.kv_cache_dtype, i.tensor_parallel_size,
                                               i.pipeline_parallel_size)
    budget = i.gpu.total_bytes * i.utilization - i.weights_bytes / (i.tensor_parallel_size * i.pipeline_parallel_size)
    return max(0, int((budget - per_gpu) / per_token))


