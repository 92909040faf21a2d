"""A model's architecture (config.json) and weight size, found without the network.

Sources, in order: `--model-config FILE`; the model directory when `model:` is a
local path; the Hugging Face cache; the configs the launcher ships for its example profiles'
models. Weights come from safetensors headers (exact) when the files are local,
else from config arithmetic (flagged as an estimate).
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from launcher import safefile
from launcher.errors import ConfigError
from launcher.statedir import cache_home

INDEX = "model.safetensors.index.json"
MAX_CONFIG_BYTES = 8 * 2**20  # a config.json is a few KiB
MAX_INDEX_BYTES = 64 * 2**20  # one line per tensor: a few MiB for the largest models
MAX_HEADER_BYTES = 100 * 2**20  # the safetensors format's own limit on its JSON header
MAX_WEIGHT_BYTES = 2**50  # a pebibyte: far past any model, far short of a float's overflow
MAX_COUNT = 2**31  # any count in a config.json (layers, heads, vocabulary, positions)
_LFS_POINTER = b"version https://git-lfs.github.com/spec/"
_REVISION = re.compile(r"[0-9A-Za-z_-][0-9A-Za-z._-]{0,127}")  # a commit hash: a name, never a path
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
    """Read the fields that matter; multimodal configs nest the language model in text_config. Every count is
    checked to be a whole number in a range a model can have (a config.json is text anyone can write: 1e308
    layers would overflow the arithmetic), else ConfigError naming the key."""
    if isinstance(config.get("text_config"), Mapping):
        config = {**config, **config["text_config"]}
    missing = [key for key in ("hidden_size", "num_hidden_layers", "num_attention_heads") if config.get(key) is None]
    if missing:
        raise ConfigError(f"{name}: config.json lacks {missing[0]!r} (hidden_size, num_hidden_layers, "
                          "num_attention_heads are needed); pass the model's real config with --model-config")

    def count(key: str, default: int = 0, least: int = 0) -> int:
        return _count(config, key, name, default, least)

    hidden, layers, heads = count("hidden_size", least=1), count("num_hidden_layers", least=1), \
        count("num_attention_heads")
    kv_heads = count("num_key_value_heads") or heads
    head_dim = count("head_dim") or hidden // heads
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    experts = count("num_experts") or count("num_local_experts") or count("n_routed_experts")
    moe_inter = count("moe_intermediate_size") or (count("intermediate_size") if experts else 0)
    window = count("sliding_window") if config.get("use_sliding_window", True) is not False else 0
    sliding_layers = stateful = 0
    kinds = config.get("layer_types") or config.get("layers_block_type")
    if isinstance(kinds, list):
        sliding_layers = sum(1 for t in kinds if "sliding" in str(t))
        stateful = sum(1 for t in kinds if any(w in str(t).lower() for w in ("mamba", "linear", "ssm", "recurrent")))
    elif window:
        pattern = count("sliding_window_pattern")
        sliding_layers = layers - layers // pattern if pattern else layers
    method, bits = _quantization(config.get("quantization_config"), name)
    return ModelArch(
        name=name, model_type=str(config.get("model_type", "")), hidden_size=hidden, num_layers=layers,
        num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, vocab_size=count("vocab_size") or 32000,
        intermediate_size=count("intermediate_size") or 4 * hidden,
        max_position_embeddings=count("max_position_embeddings") or None,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        dtype_bytes=_DTYPE_BYTES.get(dtype.replace("torch.", ""), 2),
        num_experts=experts, experts_per_token=count("num_experts_per_tok"),
        moe_intermediate_size=moe_inter,
        shared_expert_intermediate_size=count("shared_expert_intermediate_size") or count("n_shared_experts") * moe_inter,
        dense_layers=count("first_k_dense_replace"),
        kv_lora_rank=count("kv_lora_rank"), qk_rope_head_dim=count("qk_rope_head_dim"),
        qk_nope_head_dim=count("qk_nope_head_dim"), v_head_dim=count("v_head_dim"), q_lora_rank=count("q_lora_rank"),
        sliding_window=window or None, sliding_layers=sliding_layers, stateful_layers=stateful,
        quant_method=method, weight_bits=bits,
    )


def _count(config: Mapping[str, Any], key: str, name: str, default: int = 0, least: int = 0) -> int:
    """config[key] as a whole number from `least` to MAX_COUNT (an integral float or digits as text pass, as
    int() took them); absent, null, false or 0: `default`."""
    value = config.get(key)
    if not value:
        return default
    number: int | None = None
    whole_float = isinstance(value, float) and math.isfinite(value) and value.is_integer()
    digits = isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 12
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif whole_float or digits:
        number = int(value)
    if number is None or not least <= number <= MAX_COUNT:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "…"
        raise ConfigError(f"{name}: config.json {key} is {shown}, not a whole number from {least} to {MAX_COUNT:,}; "
                          "pass the model's real config with --model-config")
    return number


def _quantization(qc: Any, name: str = "model") -> tuple[str | None, float]:
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
    written = bits
    try:
        bits = float(bits)
    except (TypeError, ValueError):
        bits = math.nan
    if not 0 < bits <= 64:  # also NaN
        raise ConfigError(f"{name}: config.json quantization_config bits is {str(written)[:40]!r}, not a "
                          "number of bits from 1 to 64; pass the model's real config with --model-config")
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
    try:
        ref = safefile.read_text(repo / "refs" / "main", 256, follow=True).strip()
    except safefile.Unreadable:
        ref = ""
    if _REVISION.fullmatch(ref) and (snapshots / ref).is_dir():  # never a path out of the cache
        return snapshots / ref
    dirs = sorted((p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    return dirs[0] if dirs else None


def safetensors_bytes(directory: Path) -> int | None:
    """Tensor bytes of every *.safetensors file in a directory (headers excluded), else the index's total_size;
    None when neither is there. A file that is not what it claims (empty, cut short, a Git LFS pointer, not a
    regular file) or an index of the wrong shape is ConfigError naming it and the fix, never a wrong size."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        index = directory / INDEX
        return read_index(index)[1] if os.path.lexists(index) else None
    return sum(tensor_bytes(path) for path in files)


def tensor_bytes(path: Path) -> int:
    """The tensor data of one safetensors file: its size less the 8-byte length and the JSON header."""
    try:
        head, size = safefile.read_head(path, 64, follow=True)  # the HF cache's files are links to its blobs
    except safefile.Unreadable as exc:
        raise ConfigError(f"{exc}; the model's weights must be regular files: download or copy them again") from None
    if head.startswith(_LFS_POINTER):
        raise ConfigError(f"{path} is a Git LFS pointer, not the weights (the repository was cloned without Git LFS): "
                          f"run `git -C {path.parent} lfs pull`, or download the model with `huggingface-cli "
                          f"download <repo id> --local-dir {path.parent}`")
    if size == 0:
        raise ConfigError(f"{path} is empty (a copy that failed, or a full disk): download or copy it again")
    header_len: int | None = struct.unpack("<Q", head[:8])[0] if len(head) >= 8 else None
    if header_len is None or not 2 <= header_len <= min(size - 8, MAX_HEADER_BYTES) or head[8:9] != b"{":
        raise ConfigError(f"{path} is not a safetensors file ({size:,} bytes; its header length says "
                          f"{'nothing' if header_len is None else f'{header_len:,} bytes'}): download or copy it again")
    return size - 8 - header_len


def read_index(index: Path) -> tuple[set[str], int | None]:
    """(the shard files, total_size) of a model.safetensors.index.json; ConfigError when it is not one."""
    try:
        data = safefile.read_json(index, MAX_INDEX_BYTES, follow=True)
    except safefile.Unreadable as exc:
        raise ConfigError(f"{exc}; download or copy the model's index again") from None
    metadata, weight_map = data.get("metadata", {}), data.get("weight_map", {})
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if not isinstance(metadata, dict) or not isinstance(weight_map, dict) or not all(
            isinstance(v, str) for v in weight_map.values()) or (total is not None and not (
            isinstance(total, int) and not isinstance(total, bool) and 0 <= total <= MAX_WEIGHT_BYTES)):
        raise ConfigError(f"{index}: not a safetensors index (metadata.total_size a size in bytes, weight_map "
                          "tensor names to files); download or copy the model's index again")
    return set(weight_map.values()), total or None


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


def read_config(path: Path, fix: str) -> dict[str, Any]:
    """A config.json as an object, read within bounds (a link is followed: the HF cache is made of them)."""
    try:
        found: dict[str, Any] = safefile.read_json(path, MAX_CONFIG_BYTES, follow=True)
    except safefile.Unreadable as exc:
        raise ConfigError(f"{exc}; {fix}") from None
    return found


def find_model(model: str, config_file: str | None = None, environ: Mapping[str, str] | None = None) -> ModelFiles:
    """The config (and, when local, the exact weight size) of `model`."""
    weights: int | None = None
    weights_source: str | None = None
    directory = model_directory(model, environ)
    if directory is not None:
        weights = safetensors_bytes(directory)
        weights_source = f"safetensors in {directory}" if weights is not None else None
    if config_file:
        config = read_config(Path(config_file), "pass the model's config.json")
        return ModelFiles(config, config_file, weights, weights_source)
    if directory is not None and os.path.lexists(directory / "config.json"):
        config = read_config(directory / "config.json", "download or copy the model's config.json again "
                             "(or pass one with --model-config)")
        return ModelFiles(config, str(directory / "config.json"), weights, weights_source)
    shipped = shipped_config(model)
    if shipped is not None:
        return ModelFiles(shipped, f"shipped config for {model}", None, None)
    raise ConfigError(f"no config.json for {model} (not a local directory, not in the Hugging Face cache "
                      f"{hf_hub_cache(environ)}); download it (huggingface-cli download {model} config.json) "
                      "or pass --model-config FILE")
