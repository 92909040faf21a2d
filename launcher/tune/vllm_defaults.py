"""What vLLM itself runs with when a profile leaves the scheduler flags unset: the centre of the default grid.

vLLM picks max-num-seqs and max-num-batched-tokens by GPU memory and name, so the same profile runs with
different limits on an L40S and an H100; tuning around a guessed number would tune around the wrong point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from launcher.config.profile import FlagValue
from launcher.gpu.catalog import GpuSpec
from launcher.plan.report import PlanReport
from launcher.units import GIB
from launcher.vllm.versions import VersionSemantics


@dataclass(frozen=True, slots=True)
class BatchDefaults:
    max_num_seqs: int
    max_num_batched_tokens: int


# vLLM 0.32.0, vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, the OPENAI_API_SERVER usage context
# (`vllm serve`): (least device memory in GiB, a name that excludes the row, defaults); the first match wins.
# A100s are excluded from the large row on purpose there: larger batches cut their throughput (vLLM PR #17885).
GPU_ROWS: tuple[tuple[int, str | None, BatchDefaults], ...] = (
    (160, None, BatchDefaults(1024, 16384)),  # B200, B300
    (70, "a100", BatchDefaults(1024, 8192)),  # H100, H200
)
OTHER_GPU = BatchDefaults(256, 2048)  # every other GPU, and a device vLLM cannot query
CPU_PER_RANK = BatchDefaults(128, 2048)  # the CPU backend: times tensor × pipeline parallel size


def batch_defaults(gpu: GpuSpec | None, *, cpu: bool, world_size: int) -> BatchDefaults:
    """The row of vLLM's table for this device (memory as CUDA reports it, as vLLM reads it from torch)."""
    if cpu:
        return BatchDefaults(CPU_PER_RANK.max_num_seqs * world_size, CPU_PER_RANK.max_num_batched_tokens * world_size)
    if gpu is None:
        return OTHER_GPU
    for least_gib, excluded, row in GPU_ROWS:
        if gpu.total_bytes >= least_gib * GIB and (excluded is None or excluded not in gpu.model.name.lower()):
            return row
    return OTHER_GPU


def chunked_prefill(flags: Mapping[str, FlagValue], version: VersionSemantics) -> bool:
    """Whether chunked prefill is on: as written, else the engine's default (on for generative models from V1,
    `_set_default_chunked_prefill_and_prefix_caching_args`; the V0 engine left it off for most contexts)."""
    value = flags.get("enable-chunked-prefill")
    return value if isinstance(value, bool) else version.engine == "v1"


def prefix_caching(flags: Mapping[str, FlagValue], version: VersionSemantics) -> bool:
    """Whether prefix caching is on: as written, else the engine's default (on from V1, as chunked prefill)."""
    value = flags.get("enable-prefix-caching")
    return value if isinstance(value, bool) else version.engine == "v1"


@dataclass(frozen=True, slots=True)
class Effective:
    """The scheduler and cache settings one plan's vLLM runs with."""

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str
    prefix_caching: bool
    chunked_prefill: bool
    utilization: float

    def as_flags(self) -> dict[str, FlagValue]:
        return {"max-num-seqs": self.max_num_seqs, "max-num-batched-tokens": self.max_num_batched_tokens,
                "kv-cache-dtype": self.kv_cache_dtype, "enable-prefix-caching": self.prefix_caching,
                "enable-chunked-prefill": self.chunked_prefill, "gpu-memory-utilization": self.utilization}


def effective(report: PlanReport) -> Effective:
    """The values of the flags the default grid varies as this plan's vLLM would run them: the plan's own
    where set (after preflight's changes), else vLLM's default, computed as
    `_set_default_max_num_seqs_and_batched_tokens_args` does."""
    flags = report.plan.flags
    row = batch_defaults(report.gpu, cpu=report.profile.launcher.device == "cpu",
                         world_size=report.plan.tensor_parallel_size * report.plan.pipeline_parallel_size)
    doubled = 2 if flags.get("performance-mode") == "throughput" else 1  # vLLM doubles both in that mode
    seqs = flags.get("max-num-seqs")
    max_num_seqs = seqs if isinstance(seqs, int) and not isinstance(seqs, bool) else row.max_num_seqs * doubled
    batched = flags.get("max-num-batched-tokens")
    if isinstance(batched, int) and not isinstance(batched, bool):
        max_num_batched_tokens = batched
    else:
        max_num_batched_tokens = row.max_num_batched_tokens * doubled
        context = report.capacity.max_model_len if report.capacity else report.plan.max_model_len
        if context:
            if not chunked_prefill(flags, report.version):
                max_num_batched_tokens = max(context, max_num_batched_tokens)
            max_num_batched_tokens = min(max_num_seqs * context, max_num_batched_tokens)
    return Effective(max_num_seqs, max_num_batched_tokens, report.plan.kv_cache_dtype,
                     prefix_caching(flags, report.version), chunked_prefill(flags, report.version),
                     report.version.utilization(report.plan.utilization))
