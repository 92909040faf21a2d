"""A model's architecture (config.json) and weight size, found without the network.

Sources, in order: `--model-config FILE`; the model directory when `model:` is a
local path; the Hugging Face cache; the configs the launcher ships for its example profiles'
models. Weights come from safetensors headers (exact) when the files are local,
else from config arithmetic (flagged as an estimate).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from launcher.errors import ConfigError
from launcher.statedir import cache_home

_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 2, "half": 2, "float": 2, "fp16": 2, "bf16": 2}


@dataclass(frozen=True, slots=True)
class ModelArch:
    """The config.json fields that memory arithmetic needs."""

    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    intermediate_size: int
    max_position_embeddings: int | None
    tie_word_embeddings: bool
    dtype_bytes: int
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    dense_layers: int = 0  # leading layers with a dense MLP in a MoE model
    kv_lora_rank: int = 0  # MLA (DeepSeek V2/V3)
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    q_lora_rank: int = 0
    sliding_window: int | None = None
    sliding_layers: int = 0  # layers that use the sliding window (hybrid models)
    # Layers without a growing KV cache (Mamba, linear attention): hybrid models such as Jamba or
    # Qwen3-Next keep a constant state per request there, which the estimate leaves out (flagged).
    stateful_layers: int = 0
    quant_method: str | None = None
    weight_bits: float = 16.0  # of the quantized linear layers

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


def arch_from_config(config: Mapping[str, Any], name: str = "model") -> ModelArch:
    """Read the fields that matter; multimodal configs nest the language model in text_config."""
    if isinstance(config.get("text_config"), Mapping):
        config = {**config, **config["text_config"]}
    try:
        hidden = int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: config.json lacks {exc} (hidden_size, num_hidden_layers, num_attention_heads "
                          "are needed); pass the model's real config with --model-config") from None
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    experts = int(config.get("num_experts") or config.get("num_local_experts") or config.get("n_routed_experts") or 0)
    moe_inter = int(config.get("moe_intermediate_size") or (config.get("intermediate_size") if experts else 0) or 0)
    window = config.get("sliding_window") if config.get("use_sliding_window", True) is not False else None
    sliding_layers = stateful = 0
    kinds = config.get("layer_types") or config.get("layers_block_type")
    if isinstance(kinds, list):
        sliding_layers = sum(1 for t in kinds if "sliding" in str(t))
        stateful = sum(1 for t in kinds if any(w in str(t).lower() for w in ("mamba", "linear", "ssm", "recurrent")))
    elif window:
        pattern = config.get("sliding_window_pattern")
        sliding_layers = layers - layers // int(pattern) if pattern else layers
    method, bits = _quantization(config.get("quantization_config"))
    return ModelArch(
        name=name, model_type=str(config.get("model_type", "")), hidden_size=hidden, num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, vocab_size=int(config.get("vocab_size") or 32000),
        intermediate_size=int(config.get("intermediate_size") or 4 * hidden),
        max_position_embeddings=int(config["max_position_embeddings"]) if config.get("max_position_embeddings") else None,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        dtype_bytes=_DTYPE_BYTES.get(dtype.replace("torch.", ""), 2),
        num_experts=experts, experts_per_token=int(config.get("num_experts_per_tok") or 0),
        moe_intermediate_size=moe_inter,
        shared_expert_intermediate_size=int(config.get("shared_expert_intermediate_size") or 0)
        or int(config.get("n_shared_experts") or 0) * moe_inter,
        dense_layers=int(config.get("first_k_dense_replace") or 0),
        kv_lora_rank=int(config.get("kv_lora_rank") or 0), qk_rope_head_dim=int(config.get("qk_rope_head_dim") or 0),
        qk_nope_head_dim=int(config.get("qk_nope_head_dim") or 0), v_head_dim=int(config.get("v_head_dim") or 0),
        q_lora_rank=int(config.get("q_lora_rank") or 0),
        sliding_window=int(window) if window else None, sliding_layers=sliding_layers, stateful_layers=stateful,
        quant_method=method, weight_bits=bits,
    )


def _quantization(qc: Any) -> tuple[str | None, float]:
    """(method, bits per quantized weight including scales) of a quantization_config."""
    if not isinstance(qc, Mapping):
        return None, 16.0
    method = str(qc.get("quant_method") or qc.get("quant_algo") or "unknown").lower()
    bits = qc.get("bits") or qc.get("w_bit") or qc.get("weight_bits")
    groups = qc.get("config_groups")
    if bits is None and isinstance(groups, Mapping):
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping) and weights.get("num_bits"):
                bits = weights["num_bits"]
                break
    if method in ("fp8", "fbgemm_fp8", "modelopt", "ptpc_fp8", "w8a8_fp8") and bits is None:
        bits = 8
    if method in ("bitsandbytes",) and qc.get("load_in_4bit"):
        bits = 4
    if method in ("mxfp4", "nvfp4", "modelopt_fp4"):
        bits = 4
    if bits is None:
        return method, 16.0
    bits = float(bits)
    # Scales and zero points: fp8 block scales are negligible; 4-bit groups of 128 add ~0.16 bit.
    return method, bits + (0.25 if bits <= 4 else 0.0)


def estimate_weight_bytes(arch: ModelArch) -> int:
    """Weights from config arithmetic: embeddings, attention, MLP or experts, quantization."""
    h, layers = arch.hidden_size, arch.num_layers
    if arch.is_mla:
        nope, rope, v = arch.qk_nope_head_dim, arch.qk_rope_head_dim, arch.v_head_dim or arch.qk_nope_head_dim
        q = (h * arch.q_lora_rank + arch.q_lora_rank * arch.num_heads * (nope + rope)) if arch.q_lora_rank \
            else h * arch.num_heads * (nope + rope)
        attention = q + h * (arch.kv_lora_rank + rope) + arch.kv_lora_rank * arch.num_heads * (nope + v) \
            + arch.num_heads * v * h
    else:
        q_dim, kv_dim = arch.num_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim
        attention = h * q_dim + 2 * h * kv_dim + q_dim * h
    dense_mlp = 3 * h * arch.intermediate_size
    if arch.is_moe:
        moe_mlp = arch.num_experts * 3 * h * arch.moe_intermediate_size + 3 * h * arch.shared_expert_intermediate_size
        router = h * arch.num_experts
        linear = layers * attention + arch.dense_layers * dense_mlp + (layers - arch.dense_layers) * moe_mlp
        unquantized = (layers - arch.dense_layers) * router
    else:
        linear = layers * (attention + dense_mlp)
        unquantized = 0
    embeddings = arch.vocab_size * h * (1 if arch.tie_word_embeddings else 2)
    norms = layers * 2 * h + h
    quantized_bytes = linear * arch.weight_bits / 8 if arch.quant_method else linear * arch.dtype_bytes
    return int(quantized_bytes + (unquantized + embeddings + norms) * arch.dtype_bytes)


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """Where a model's config and weights were found."""

    config: dict[str, Any]
    config_source: str
    weights_bytes: int | None  # exact, from safetensors; None when not local
    weights_source: str | None


def hf_hub_cache(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    if environ.get("HF_HUB_CACHE"):
        return Path(environ["HF_HUB_CACHE"])
    home = environ.get("HF_HOME") or str(cache_home(environ) / "huggingface")
    return Path(home) / "hub"


def repo_cache_dir(model: str, environ: Mapping[str, str] | None = None) -> Path:
    """Where the Hugging Face hub caches a model: <hub cache>/models--Org--Name."""
    return hf_hub_cache(environ) / f"models--{model.replace('/', '--')}"


def snapshot_dir(model: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """The cached snapshot of a hub model (refs/main first), if any."""
    repo = repo_cache_dir(model, environ)
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file():
        candidate = snapshots / ref.read_text().strip()
        if candidate.is_dir():
            return candidate
    dirs = sorted((p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    return dirs[0] if dirs else None


def safetensors_bytes(directory: Path) -> int | None:
    """Tensor bytes of every *.safetensors file in a directory (headers excluded)."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        index = directory / "model.safetensors.index.json"
        if index.is_file():
            total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
            return int(total) if total else None
        return None
    total = 0
    for path in files:
        with path.open("rb") as handle:
            header_len: int = struct.unpack("<Q", handle.read(8))[0]
        total += path.stat().st_size - 8 - header_len
    return total


def shipped_config(model: str) -> dict[str, Any] | None:
    name = model.rstrip("/").split("/")[-1]
    resource = resources.files("launcher").joinpath("data", "models", f"{name}.json")
    if not resource.is_file():
        return None
    data: dict[str, Any] = json.loads(resource.read_text())
    return data


def model_directory(model: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """The model's files on this machine: `model` itself when it is a directory, else its cached hub snapshot."""
    return Path(model) if Path(model).is_dir() else snapshot_dir(model, environ)


def find_model(model: str, config_file: str | None = None, environ: Mapping[str, str] | None = None) -> ModelFiles:
    """The config (and, when local, the exact weight size) of `model`."""
    weights: int | None = None
    weights_source: str | None = None
    directory = model_directory(model, environ)
    if directory is not None:
        weights = safetensors_bytes(directory)
        weights_source = f"safetensors in {directory}" if weights is not None else None
    if config_file:
        try:
            return ModelFiles(json.loads(Path(config_file).read_text()), config_file, weights, weights_source)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--model-config {config_file}: cannot read it as JSON ({exc}); "
                              "pass the model's config.json") from None
    if directory is not None and (directory / "config.json").is_file():
        config = json.loads((directory / "config.json").read_text())
        return ModelFiles(config, str(directory / "config.json"), weights, weights_source)
    shipped = shipped_config(model)
    if shipped is not None:
        return ModelFiles(shipped, f"shipped config for {model}", None, None)
    raise ConfigError(f"no config.json for {model} (not a local directory, not in the Hugging Face cache "
                      f"{hf_hub_cache(environ)}); download it (huggingface-cli download {model} config.json) "
                      "or pass --model-config FILE")
