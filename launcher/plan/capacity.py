"""How many KV-cache tokens a profile gets on a GPU, before launching anything.

Pure arithmetic (docs/capacity.md): per-token KV bytes exactly as vLLM sizes its cache;
weights from safetensors or config arithmetic; and the non-KV reserve term by term as
vLLM's profiling computes it (the profiling pass's activation peak, read from vLLM's code),
plus the few terms its code does not fix, fitted on real start-ups (ReserveModel). Every
estimate carries its measured out-of-sample error. The numbers a live log reports always
win over these.
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
from launcher.vllm.versions import DEFAULT_BLOCK_SIZE, VersionSemantics

# KV dtypes whose size per element is not a whole byte count; estimates are flagged as approximate.
_SUBBYTE_KV = {"int4_per_token_head": 0.5, "nvfp4": 0.5625, "nvfp4_4over6": 0.5625, "nvfp4_ds_mla": 0.5625,
               "turboquant_k8v4": 0.75, "turboquant_4bit_nc": 0.5, "turboquant_k3v4_nc": 0.4375,
               "turboquant_3bit_nc": 0.375, "octave_k3v4": 0.4375, "octave_k3v3": 0.375,
               "octave_k3v3_compact": 0.375, "ultraquant_4bit": 0.5}

# ---- The non-KV reserve, term by term, as vLLM's own profiling computes it (docs/capacity.md).
# vLLM measures, per GPU: weights + the peak of one profiling pass + non-torch memory (+ from 0.20 its
# CUDA-graph estimate), and gives the rest of utilization × total to the KV cache
# (vllm/v1/worker/gpu_worker.py determine_available_memory, 0.9.2–0.32.0; V0:
# vllm/worker/worker.py determine_num_available_blocks, 0.5–0.7).
#
# The profiling pass (vllm/v1/worker/gpu_model_runner.py profile_run, 0.9.2–0.32.0): one dummy forward
# of max_num_batched_tokens tokens, then the sampler over min(max_num_seqs, max_num_batched_tokens)
# requests, each over the whole vocabulary. Its peak is the larger of the two (the forward's tensors
# are freed before the sampler runs; its output hidden states stay).
#
# Sampler bytes per (request × vocabulary entry), from vllm/v1/sample (sampler.py, ops/topk_topp_sampler.py).
# Both paths start from the model-dtype logits (2) and their fp32 copy (4). The dummy run sets top-k and
# top-p; PyTorch's path then sorts: values and int64 indices in and out of the radix sort (4 + 4 + 8 + 8),
# softmax probabilities (4) and two boolean masks (2). FlashInfer samples from the logits in place.
# A published 0.10.2 H100 breakdown with the sort (1,024 × 151,936 entries → 5.58 GiB peak activation, 38 B
# each) and RTX 4090 and A100 ones without it (256 × 151,936 → 0.17 and 0.23 GiB, about 6 B) bracket the two.
# The plan always counts the sort: V0 sorted, and V1 does except 0.8–0.11.0 with FlashInfer installed
# (VLLM_USE_FLASHINFER_SAMPLER unset meant on there; from 0.11.1 FlashInfer is opt-in, and 0.32 warms both
# paths). Where it did not sort, the KV estimate is low by the sort's share (max_num_seqs × vocabulary × 30 B):
# whether FlashInfer is installed is not known to the plan.
SAMPLER_BYTES_SORT = 36


@dataclass(frozen=True, slots=True)
class ReserveModel:
    """The terms vLLM's code does not fix, per GPU, as fitted on real start-ups.

    The defaults are the fit of `benchmarks/kv_estimator.py --fit` over tests/data/kv_observations
    (32 start-ups from 25 sources are scored; tests/unit/plan/test_capacity_accuracy.py checks that the
    defaults are that fit). Each term is decided by start-ups from at least three sources.
    """

    # Memory outside torch's allocator. V1 measures from a snapshot taken after the CUDA context exists,
    # and its logged "non-torch memory" is 0.02-0.07 GiB on one GPU: the fit finds 0 (17 start-ups, 14
    # sources). V0 counts every non-torch allocation since the process started, the CUDA context
    # included (vllm/worker/worker.py determine_num_available_blocks): 6 start-ups, 5 sources.
    non_torch_base: int = 0
    non_torch_base_v0: int = 304 * MIB
    # NCCL's buffers, per other rank a GPU talks to. GPUs on NVLink/NVSwitch get many channels
    # and vLLM's custom all-reduce buffers (9 multi-GPU start-ups, 7 sources); over PCIe NCCL opens a few
    # channels and the fit over 4 sources finds no cost, so it is not a term.
    per_peer_fabric: int = 144 * MIB
    per_peer_pcie: int = 0
    # vLLM ≥ 0.20 takes its CUDA-graph estimate out of the budget (0.1-0.7 GiB in the logs that print it);
    # over the start-ups of those versions with graphs (3 sources) the fit finds it below the noise: 0.
    cudagraph_per_layer: int = 0
    # MoE layers with FP8 weights (vLLM's Fp8MoEMethod, its own kernels and workspaces) lose more than their
    # caches explain before 0.22, which bounds the allocator's splits during profiling because "a later
    # small allocation can be carved out of a freed multi-GiB block and pin the whole segment"
    # (gpu_worker.py, 0.22+). Three sources: two Qwen3-235B-A22B-FP8 start-ups (4 and 8 H100s) and the
    # Qwen3-Coder L40S guide.
    fp8_moe_workspace: int = 2560 * MIB


RESERVE = ReserveModel()
FP8_WEIGHTS = frozenset({"fp8", "fbgemm_fp8", "w8a8_fp8", "modelopt"})
# Measured uncertainty of the estimate, by regime: the 80th percentile of the leave-one-source-out error,
# rounded up (`benchmarks/kv_estimator.py`; tests/unit/plan/test_capacity_accuracy.py checks them).
ERROR_RANGE = {"v0": 0.06, "v1": 0.06, "v1-multi-gpu": 0.06}


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
    enable_chunked_prefill: bool | None = None  # None: vLLM's default for the version and context
    multimodal: bool = False
    block_size: int = DEFAULT_BLOCK_SIZE
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
    error_range: float = 0.0  # relative uncertainty of kv_tokens, measured out of sample for this regime
    basis: str = "estimated"  # or "measured on this box (…)" when a real start-up calibrated it
    warnings: tuple[str, ...] = field(default_factory=tuple)
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def full_sessions(self) -> int:
        return int(self.sessions)

    @property
    def kv_tokens_low(self) -> int:
        return int(self.kv_tokens * (1 - self.error_range))

    @property
    def kv_tokens_high(self) -> int:
        return int(self.kv_tokens * (1 + self.error_range))

    @property
    def sessions_low(self) -> float:
        return self.kv_tokens_low / self.max_model_len if self.max_model_len else 0.0

    @property
    def sessions_high(self) -> float:
        return self.kv_tokens_high / self.max_model_len if self.max_model_len else 0.0


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


def v0_batched_tokens(max_model_len: int, chunked_prefill: bool | None, multimodal: bool) -> int:
    """V0's profiling batch (vllm/config.py SchedulerConfig and engine/arg_utils.py, 0.6.3): chunked
    prefill, on by default above 32K of context for text models, profiles 512 tokens; without it,
    a full-length sequence (at least 2,048 tokens; 5,120 for multimodal models)."""
    if chunked_prefill is None:
        chunked_prefill = max_model_len > 32768 and not multimodal
    tokens = 512 if chunked_prefill else max(max_model_len, 2048)
    return max(tokens, 5120) if multimodal else tokens


def forward_peak_bytes(arch: ModelArch, tokens: int, tensor_parallel_size: int) -> int:
    """Peak of one dummy forward pass over `tokens` tokens, per GPU: the largest layer's live tensors.

    Each phase holds three hidden-size tensors (the layer's input, the residual and the normed
    input: the fused add-RMSNorm returns two new ones); attention adds q/k/v and its output, the MLP
    gate_up (2 × intermediate) and the activation (1 ×). A real V0 pair checks the slope: Llama-3.1-8B
    profiled at 20,000 and 29,000 tokens on an RTX 3090 (vLLM issue 10517) peaked 0.92 GiB apart;
    (3 × 4,096 + 3 × 14,336) × 2 B × 9,000 tokens = 0.93 GiB. A fused MoE layer
    holds, per routed token, one cache for gate_up and the down projection's output (they reuse it:
    max(2N, H)) and one for the activation (N) (vllm/model_executor/layers/fused_moe/fused_moe.py,
    fused_experts_impl, 0.11), plus the shared expert's MLP.
    """
    tp = tensor_parallel_size
    hidden = arch.hidden_size
    attention = hidden + (arch.num_heads + 2 * arch.num_kv_heads) * arch.head_dim // tp
    if arch.is_moe:
        n = arch.moe_intermediate_size // tp
        mlp = arch.experts_per_token * (max(2 * n, hidden) + n) + 3 * arch.shared_expert_intermediate_size // tp
        if arch.dense_layers:
            mlp = max(mlp, 3 * arch.intermediate_size // tp)
    else:
        mlp = 3 * arch.intermediate_size // tp
    return int(tokens * (3 * hidden + max(attention, mlp)) * arch.dtype_bytes)


def sampler_peak_bytes(arch: ModelArch, requests: int, tokens: int) -> int:
    """The sampler warm-up of the profiling pass, with the forward's output hidden states still alive."""
    return int(requests * arch.vocab_size * SAMPLER_BYTES_SORT + tokens * arch.hidden_size * arch.dtype_bytes)


def activation_bytes(arch: ModelArch, batched_tokens: int, max_num_seqs: int, tensor_parallel_size: int) -> int:
    """Peak torch memory of vLLM's profiling pass: the larger of the forward and the sampler warm-up
    (over min(max_num_seqs, batched tokens) requests: gpu_model_runner._dummy_run)."""
    requests = min(max_num_seqs, batched_tokens)
    return max(forward_peak_bytes(arch, batched_tokens, tensor_parallel_size),
               sampler_peak_bytes(arch, requests, batched_tokens))


def peers(tensor_parallel_size: int, pipeline_parallel_size: int) -> int:
    """The ranks one GPU exchanges tensors with: the rest of its TP group, and a neighbouring stage."""
    return (tensor_parallel_size - 1) + (1 if pipeline_parallel_size > 1 else 0)


def non_torch_bytes(tensor_parallel_size: int, pipeline_parallel_size: int, fabric: bool, v0: bool = False,
                    reserve: ReserveModel = RESERVE) -> int:
    """Memory outside torch's allocator: a base per GPU, and NCCL buffers per peer."""
    per_peer = reserve.per_peer_fabric if fabric else reserve.per_peer_pcie
    base = reserve.non_torch_base_v0 if v0 else reserve.non_torch_base
    return base + per_peer * peers(tensor_parallel_size, pipeline_parallel_size)


def error_range(version: VersionSemantics, tensor_parallel_size: int, pipeline_parallel_size: int) -> float:
    """The relative uncertainty of an estimate in this regime (measured out of sample)."""
    if version.engine == "v0":
        return ERROR_RANGE["v0"]
    return ERROR_RANGE["v1-multi-gpu" if tensor_parallel_size * pipeline_parallel_size > 1 else "v1"]


def estimate(inputs: CapacityInputs, reserve: ReserveModel = RESERVE) -> CapacityPlan:
    """The KV budget and token capacity per the version's budget rule."""
    arch, version, gpu = inputs.arch, inputs.version, inputs.gpu
    tp, pp = inputs.tensor_parallel_size, inputs.pipeline_parallel_size
    warnings: list[str] = []
    assumptions: list[str] = []
    seqs_default, batched_default = version.default_batching(gpu.total_bytes / GIB, gpu.model.name)
    max_num_seqs = inputs.max_num_seqs or seqs_default
    batched = inputs.max_num_batched_tokens or batched_default
    if version.engine == "v0" and inputs.max_num_batched_tokens is None:
        batched = v0_batched_tokens(inputs.max_model_len, inputs.enable_chunked_prefill, inputs.multimodal)
    per_token, exact = kv_bytes_per_token(arch, inputs.kv_cache_dtype, tp, pp, inputs.max_model_len, batched)
    if not exact:
        assumptions.append("KV bytes per token are approximate (sliding-window layers or a sub-byte KV dtype)")
    weights_per_gpu = inputs.weights_bytes // (tp * pp)
    budget = int(gpu.total_bytes * inputs.utilization)
    activation = activation_bytes(arch, batched, max_num_seqs, tp)
    non_torch = non_torch_bytes(tp, pp, gpu.model.fabric, version.engine == "v0", reserve)
    if arch.is_moe and arch.quant_method in FP8_WEIGHTS and not version.bounds_profiling_splits:
        activation += reserve.fp8_moe_workspace
        assumptions.append(f"FP8 MoE workspace {reserve.fp8_moe_workspace / GIB:.2f} GiB per GPU (vLLM < 0.22)")
    graphs = 0
    if version.cudagraphs_in_budget and not inputs.enforce_eager:
        graphs = reserve.cudagraph_per_layer * math.ceil(arch.num_layers / pp)
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
        error_range=error_range(version, tp, pp), warnings=tuple(warnings), assumptions=tuple(assumptions),
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
    return estimate(capacity_inputs(profile, plan, gpu, version, files, weights_gib))


def capacity_inputs(profile: Profile, plan: Plan, gpu: GpuSpec, version: VersionSemantics,
                    files: modelinfo.ModelFiles, weights_gib: float | None) -> CapacityInputs:
    """What the estimate needs, from the profile, its argv plan, the GPU, the version and the model's files."""
    arch = modelinfo.arch_from_config(files.config, profile.model)
    if weights_gib is not None:
        weights, source = int(weights_gib * GIB), "--weights-gib"
    elif files.weights_bytes is not None:
        weights, source = files.weights_bytes, str(files.weights_source)
    else:
        weights, source = modelinfo.estimate_weight_bytes(arch), "config.json arithmetic (an estimate)"
    fl = plan.flags
    max_len = plan.max_model_len or arch.max_position_embeddings or 2048
    return CapacityInputs(
        arch=arch, weights_bytes=weights, weights_source=source, gpu=gpu, version=version,
        utilization=version.utilization(plan.utilization), max_model_len=max_len,
        kv_cache_dtype=plan.kv_cache_dtype,
        tensor_parallel_size=plan.tensor_parallel_size, pipeline_parallel_size=plan.pipeline_parallel_size,
        enforce_eager=fl.get("enforce-eager") is True,
        max_num_seqs=fl.get("max-num-seqs") if isinstance(fl.get("max-num-seqs"), int) else None,  # type: ignore[arg-type]
        max_num_batched_tokens=fl.get("max-num-batched-tokens")  # type: ignore[arg-type]
        if isinstance(fl.get("max-num-batched-tokens"), int) else None,
        block_size=int(fl.get("block-size", DEFAULT_BLOCK_SIZE)),  # type: ignore[arg-type]
        explicit_kv_bytes=explicit_kv_bytes(profile, fl),
        enable_chunked_prefill=chunked if isinstance(chunked := fl.get("enable-chunked-prefill"), bool) else None,
        multimodal=any(k in files.config for k in ("vision_config", "audio_config")),
    )
