"""How many KV-cache tokens a profile gets on a GPU, before launching anything.

Pure arithmetic (docs/capacity.md): per-token KV bytes exactly as vLLM
sizes its cache; weights from safetensors or config arithmetic; a non-KV reserve
(activation peak of the profiling batch, sampler, non-torch memory, CUDA graphs)
from a small model calibrated on published vLLM logs (benchmarks/kv_estimator.py
prints its error). The numbers a live log reports always win over these.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from launcher.config.profile import FP8_KV_DTYPES, FlagValue, Profile
from launcher.gpu.catalog import GpuSpec
from launcher.plan import modelinfo
from launcher.plan.modelinfo import ModelArch
from launcher.units import GIB, MIB
from launcher.vllm.command import Plan
from launcher.vllm.versions import VersionSemantics

# KV dtypes whose size per element is not a whole byte count; estimates are flagged as approximate.
_SUBBYTE_KV = {"int4_per_token_head": 0.5, "nvfp4": 0.5625, "nvfp4_4over6": 0.5625, "nvfp4_ds_mla": 0.5625,
               "turboquant_k8v4": 0.75, "turboquant_4bit_nc": 0.5, "turboquant_k3v4_nc": 0.4375,
               "turboquant_3bit_nc": 0.375, "octave_k3v4": 0.4375, "octave_k3v3": 0.375,
               "octave_k3v3_compact": 0.375, "ultraquant_4bit": 0.5}

# Reserve model (calibrated against tests/data/kv_observations; see benchmarks/kv_estimator.py).
NON_TORCH_TP1 = GIB // 10  # cuBLAS workspace, CUDA context growth (logs show 0.02-0.07 GiB)
NON_TORCH_MULTI = int(0.6 * GIB)  # plus NCCL and custom all-reduce buffers
# The V1 sampler warm-up (max_num_seqs requests over the whole vocabulary: fp32 logits, softmax,
# an int64 sort for top-p/top-k) peaks near 32 bytes per (sequence × vocabulary entry); V0's near 4.
SAMPLER_BYTES_V1 = 32
SAMPLER_BYTES_V0 = 4
MOE_WORKSPACE_TOKENS = 4  # fused-MoE caches hold this many expert activations per routed token
CUDAGRAPH_PER_LAYER = 16 * MIB  # graph memory estimate per layer (vLLM ≥ 0.20 subtracts it from the budget)
# FP8 MoE checkpoints need more non-KV memory per GPU than their activations explain: both published
# Qwen3-235B-A22B-FP8 logs (H100, TP4 and TP8) show ~2.35 GiB more per GPU, whatever the TP size.
FP8_MOE_WORKSPACE = int(2.35 * GIB)


@dataclass(frozen=True, slots=True)
class CapacityInputs:
    """Everything the estimate depends on, already resolved (flags, GPU, version)."""

    arch: ModelArch
    weights_bytes: int
    weights_source: str
    gpu: GpuSpec
    version: VersionSemantics
    utilization: float
    max_model_len: int
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    enforce_eager: bool = False
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int = 16
    explicit_kv_bytes: int | None = None  # --kv-cache-memory-bytes, or VLLM_CPU_KVCACHE_SPACE on CPU


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    """The answer to "how many full-context sessions fit?", with its arithmetic."""

    kv_bytes_per_token: int  # per GPU, at the plan's KV dtype
    kv_bytes_exact: bool
    weights_bytes: int  # whole model
    weights_per_gpu_bytes: int
    budget_bytes: int  # utilization × what CUDA sees, per GPU
    activation_bytes: int
    non_torch_bytes: int
    cudagraph_bytes: int
    kv_budget_bytes: int  # per GPU
    kv_tokens: int
    max_model_len: int
    sessions: float
    verdict: str  # fits, context_too_long, weights_do_not_fit
    warnings: tuple[str, ...] = field(default_factory=tuple)
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def full_sessions(self) -> int:
        return int(self.sessions)


def kv_dtype_bytes(kv_cache_dtype: str, arch: ModelArch) -> float:
    if kv_cache_dtype == "auto":
        return float(arch.dtype_bytes)
    if kv_cache_dtype in FP8_KV_DTYPES or kv_cache_dtype == "int8_per_token_head":
        return 1.0
    if kv_cache_dtype in ("bfloat16", "float16"):
        return 2.0
    return _SUBBYTE_KV.get(kv_cache_dtype, 1.0)


def kv_bytes_per_token(arch: ModelArch, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1,
                       pipeline_parallel_size: int = 1, max_model_len: int | None = None,
                       max_num_batched_tokens: int = 2048) -> tuple[int, bool]:
    """Per-GPU KV bytes per token of context, and whether that is exact.

    Hybrid models count only their attention layers (Mamba/linear layers keep a constant state
    per request, left out: approximate).

    Full attention: 2 × layers × max(1, kv_heads / TP) × head_dim × dtype bytes.
    MLA: one latent of kv_lora_rank + rope dims per layer, not sharded by TP.
    Sliding-window layers hold at most window − 1 + batched tokens per request: their
    share is scaled to a full max-model-len request (approximate, flagged).
    """
    dtype_bytes = kv_dtype_bytes(kv_cache_dtype, arch)
    exact = kv_cache_dtype == "auto" or dtype_bytes in (1.0, 2.0)
    layers = math.ceil((arch.num_layers - arch.stateful_layers) / pipeline_parallel_size)
    if arch.stateful_layers:
        exact = False
    if arch.is_mla:
        per_layer = 656.0 if kv_cache_dtype == "fp8_ds_mla" else (arch.kv_lora_rank + arch.qk_rope_head_dim) * dtype_bytes
        return int(layers * per_layer), exact
    heads = max(1, arch.num_kv_heads // tensor_parallel_size)
    per_layer = 2 * heads * arch.head_dim * dtype_bytes
    sliding = math.ceil(arch.sliding_layers / pipeline_parallel_size)
    if not sliding or not arch.sliding_window or not max_model_len:
        return int(layers * per_layer), exact
    held = min(arch.sliding_window - 1 + max_num_batched_tokens, max_model_len) / max_model_len
    return int((layers - sliding) * per_layer + sliding * per_layer * held), False


def activation_bytes(arch: ModelArch, batched_tokens: int, max_num_seqs: int, tensor_parallel_size: int,
                     sampler_bytes: int = SAMPLER_BYTES_V1) -> int:
    """Peak torch memory of vLLM's profiling run: one batch of activations plus the sampler warm-up."""
    tp = tensor_parallel_size
    hidden = arch.hidden_size
    if arch.is_moe:
        mlp = batched_tokens * arch.experts_per_token * 2 * arch.moe_intermediate_size * MOE_WORKSPACE_TOKENS // tp
        mlp += batched_tokens * 2 * arch.intermediate_size // tp if arch.dense_layers else 0
    else:
        mlp = batched_tokens * 3 * arch.intermediate_size // tp
    qkv = batched_tokens * (arch.num_heads + 2 * arch.num_kv_heads) * arch.head_dim // tp
    residual = batched_tokens * 4 * hidden
    sampler = max_num_seqs * arch.vocab_size * sampler_bytes
    return int((mlp + qkv + residual) * arch.dtype_bytes + sampler)


def estimate(inputs: CapacityInputs) -> CapacityPlan:
    """The KV budget and token capacity per the version's budget rule."""
    arch, version, gpu = inputs.arch, inputs.version, inputs.gpu
    tp, pp = inputs.tensor_parallel_size, inputs.pipeline_parallel_size
    warnings: list[str] = []
    assumptions: list[str] = []
    seqs_default, batched_default = version.default_batching(gpu.total_bytes / GIB, gpu.model.name)
    max_num_seqs = inputs.max_num_seqs or seqs_default
    batched = inputs.max_num_batched_tokens or batched_default
    if version.engine == "v0" and inputs.max_num_batched_tokens is None and inputs.max_model_len <= 32768:
        batched = max(inputs.max_model_len, 2048)  # V0 profiles a full-length sequence without chunked prefill
    per_token, exact = kv_bytes_per_token(arch, inputs.kv_cache_dtype, tp, pp, inputs.max_model_len, batched)
    if not exact:
        assumptions.append("KV bytes per token are approximate (sliding-window layers or a sub-byte KV dtype)")
    weights_per_gpu = inputs.weights_bytes // (tp * pp)
    budget = int(gpu.total_bytes * inputs.utilization)
    activation = activation_bytes(arch, batched, max_num_seqs, tp,
                                  SAMPLER_BYTES_V1 if version.engine == "v1" else SAMPLER_BYTES_V0)
    if arch.is_moe and arch.quant_method in ("fp8", "fbgemm_fp8", "w8a8_fp8"):
        activation += FP8_MOE_WORKSPACE
        assumptions.append("FP8 MoE workspace of 2.35 GiB per GPU (calibrated on published Qwen3-235B-A22B-FP8 logs)")
    non_torch = NON_TORCH_TP1 if tp * pp == 1 else NON_TORCH_MULTI
    graphs = 0
    if version.cudagraphs_in_budget and not inputs.enforce_eager:
        graphs = CUDAGRAPH_PER_LAYER * math.ceil(arch.num_layers / pp)
    if inputs.explicit_kv_bytes is not None:
        kv_budget = inputs.explicit_kv_bytes
        assumptions.append("KV memory is set explicitly; utilization does not size it")
    else:
        kv_budget = int(budget - weights_per_gpu - activation - non_torch - graphs)
    assumptions.append(f"weights from {inputs.weights_source}")
    assumptions.append(f"profiling batch {batched} tokens, {max_num_seqs} sequences (vLLM {version.version} defaults "
                       "unless the profile sets them)")
    if kv_budget > 0:
        blocks = kv_budget // (per_token * inputs.block_size)
        if version.reserves_null_block:
            blocks = max(0, blocks - 1)
        kv_tokens = int(blocks * inputs.block_size)
    else:
        kv_tokens = 0
    sessions = kv_tokens / inputs.max_model_len if inputs.max_model_len else 0.0
    if weights_per_gpu >= budget or kv_budget <= 0:
        verdict = "weights_do_not_fit"
        if weights_per_gpu < budget:
            warnings.append(f"weights ({weights_per_gpu / GIB:.1f} GiB per GPU) and the non-KV reserve "
                            f"({(activation + non_torch + graphs) / GIB:.1f} GiB) leave no room for the KV cache in "
                            f"{inputs.utilization} × {gpu.total_bytes / GIB:.1f} GiB: vLLM would fail with "
                            "\"No available memory for the cache blocks\"")
        else:
            warnings.append(f"weights ({weights_per_gpu / GIB:.1f} GiB per GPU) exceed the budget "
                            f"{inputs.utilization} × {gpu.total_bytes / GIB:.1f} GiB = {budget / GIB:.1f} GiB; "
                            "use more GPUs (tensor-parallel-size), quantized weights or a larger GPU")
    elif kv_tokens < inputs.max_model_len:
        verdict = "context_too_long"
        fit = kv_tokens // inputs.block_size * inputs.block_size
        warnings.append(f"one {inputs.max_model_len:,}-token request needs {inputs.max_model_len * per_token / GIB:.1f} "
                        f"GiB of KV cache, only {kv_budget / GIB:.1f} GiB fit: at most max-model-len {fit:,}")
    else:
        verdict = "fits"
    return CapacityPlan(
        kv_bytes_per_token=per_token, kv_bytes_exact=exact, weights_bytes=inputs.weights_bytes,
        weights_per_gpu_bytes=weights_per_gpu, budget_bytes=budget, activation_bytes=activation,
        non_torch_bytes=non_torch, cudagraph_bytes=graphs, kv_budget_bytes=kv_budget, kv_tokens=kv_tokens,
        max_model_len=inputs.max_model_len, sessions=round(sessions, 2), verdict=verdict,
        warnings=tuple(warnings), assumptions=tuple(assumptions),
    )


def explicit_kv_bytes(profile: Profile, flags_: Mapping[str, FlagValue]) -> int | None:
    from launcher.units import parse_size

    if "kv-cache-memory-bytes" in flags_:
        try:
            return parse_size(flags_["kv-cache-memory-bytes"])
        except ValueError:
            return None
    space = profile.env.get("VLLM_CPU_KVCACHE_SPACE") or os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    if profile.launcher.device == "cpu" and space and space.isdigit():
        return int(space) * GIB
    return None


def capacity_for(profile: Profile, plan: Plan, gpu: GpuSpec, version: VersionSemantics,
                 files: modelinfo.ModelFiles, weights_gib: float | None) -> CapacityPlan:
    arch = modelinfo.arch_from_config(files.config, profile.model)
    if weights_gib is not None:
        weights, source = int(weights_gib * GIB), "--weights-gib"
    elif files.weights_bytes is not None:
        weights, source = files.weights_bytes, str(files.weights_source)
    else:
        weights, source = modelinfo.estimate_weight_bytes(arch), "config.json arithmetic (an estimate)"
    fl = plan.flags
    max_len = plan.max_model_len or arch.max_position_embeddings or 2048
    return estimate(CapacityInputs(
        arch=arch, weights_bytes=weights, weights_source=source, gpu=gpu, version=version,
        utilization=plan.utilization or version.default_utilization, max_model_len=max_len,
        kv_cache_dtype=plan.kv_cache_dtype,
        tensor_parallel_size=plan.tensor_parallel_size, pipeline_parallel_size=plan.pipeline_parallel_size,
        enforce_eager=fl.get("enforce-eager") is True,
        max_num_seqs=fl.get("max-num-seqs") if isinstance(fl.get("max-num-seqs"), int) else None,  # type: ignore[arg-type]
        max_num_batched_tokens=fl.get("max-num-batched-tokens")  # type: ignore[arg-type]
        if isinstance(fl.get("max-num-batched-tokens"), int) else None,
        block_size=int(fl.get("block-size", 16)),  # type: ignore[arg-type]
        explicit_kv_bytes=explicit_kv_bytes(profile, fl),
    ))
