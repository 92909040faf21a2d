"""The capacity plan: KV bytes as vLLM sizes them, weights, budgets by version, and the Qwen3-Coder L40S guide's question."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from launcher.cli import main
from launcher.gpu.catalog import GPU_TABLE, GpuSpec, parse_gpu_spec
from launcher.plan import capacity, modelinfo
from launcher.units import GIB
from launcher.vllm.versions import semantics

QWEN3 = modelinfo.arch_from_config(modelinfo.shipped_config("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8") or {})
LLAMA = modelinfo.arch_from_config(modelinfo.shipped_config("meta-llama/Llama-3.1-8B-Instruct") or {})


class TestKvBytes:
    @pytest.mark.parametrize(("arch", "dtype", "tp", "expected"), [
        (QWEN3, "auto", 1, 98_304),  # 2 × 48 layers × 4 KV heads × 128 × 2 B
        (QWEN3, "fp8", 1, 49_152),
        (QWEN3, "auto", 2, 49_152),  # TP shards the 4 KV heads
        (QWEN3, "auto", 8, 24_576),  # more ranks than KV heads: each keeps one
        (LLAMA, "auto", 1, 131_072),
        (LLAMA, "fp8_e4m3", 2, 32_768),
    ])
    def test_full_attention(self, arch: modelinfo.ModelArch, dtype: str, tp: int, expected: int) -> None:
        """Per-GPU bytes per token are 2 × layers × max(1, kv_heads/TP) × head_dim × dtype bytes."""
        assert (expected, True) == capacity.kv_bytes_per_token(arch, dtype, tp)

    def test_mla_is_one_latent_not_sharded(self) -> None:
        """DeepSeek-style MLA stores kv_lora_rank + rope dims per layer, the same on every TP rank."""
        arch = modelinfo.arch_from_config({"hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
                                           "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                                           "v_head_dim": 128, "vocab_size": 129280})
        assert (70_272, True) == capacity.kv_bytes_per_token(arch, "auto", 8)
        assert (35_136, True) == capacity.kv_bytes_per_token(arch, "fp8", 8)
        assert 40_016 == capacity.kv_bytes_per_token(arch, "fp8_ds_mla")[0]

    def test_sliding_window_layers_are_bounded_and_flagged(self) -> None:
        """Sliding-window layers hold at most window + batch tokens of a request: approximate."""
        config = {"hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
                  "head_dim": 128, "sliding_window": 1024,
                  "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]}
        arch = modelinfo.arch_from_config(config)
        full, _ = capacity.kv_bytes_per_token(arch, "auto", 1)
        bounded, exact = capacity.kv_bytes_per_token(arch, "auto", 1, max_model_len=32768, max_num_batched_tokens=2048)
        assert not exact
        assert full // 2 < bounded < full


class TestWeights:
    def test_config_arithmetic_matches_known_sizes(self) -> None:
        """Qwen3-Coder-30B-A3B-FP8 is ≈ 31 GB (the L40S guide); Llama-3.1-8B bf16 ≈ 14.96 GiB (vLLM logs 14.99)."""
        assert 31.0e9 < modelinfo.estimate_weight_bytes(QWEN3) < 31.4e9
        assert 14.9 < modelinfo.estimate_weight_bytes(LLAMA) / GIB < 15.0

    def test_four_bit_checkpoints_are_about_a_quarter(self) -> None:
        config = {**json.loads(json.dumps(modelinfo.shipped_config("meta-llama/Llama-3.1-8B-Instruct"))),
                  "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}
        quantized = modelinfo.estimate_weight_bytes(modelinfo.arch_from_config(config))
        assert 4.5 < quantized / GIB < 6.0

    def test_safetensors_headers_give_exact_bytes(self, tmp_path: Path) -> None:
        """Tensor bytes come from the files minus their JSON headers."""
        for name, payload in (("a.safetensors", 1000), ("b.safetensors", 24)):
            header = json.dumps({"t": {"dtype": "BF16", "shape": [payload // 2], "data_offsets": [0, payload]}}).encode()
            (tmp_path / name).write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * payload)
        (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8, "num_hidden_layers": 1,
                                                          "num_attention_heads": 1}))
        found = modelinfo.find_model(str(tmp_path))
        assert (1024, str(tmp_path / "config.json")) == (found.weights_bytes, found.config_source)

    def test_missing_config_names_the_fix(self, tmp_path: Path) -> None:
        with pytest.raises(Exception, match="--model-config"):
            modelinfo.find_model("nobody/nothing", environ={"HF_HOME": str(tmp_path)})


def plan_for(gpu: str, version: str = "0.33.0", reserve: capacity.ReserveModel = capacity.RESERVE,
             **kwargs: Any) -> capacity.CapacityPlan:
    defaults: dict[str, Any] = {"utilization": 0.92, "max_model_len": 65536, "kv_cache_dtype": "fp8"}
    defaults.update(kwargs)
    return capacity.estimate(capacity.CapacityInputs(
        arch=QWEN3, weights_bytes=modelinfo.estimate_weight_bytes(QWEN3), weights_source="config",
        gpu=parse_gpu_spec(gpu), version=semantics(version), **defaults), reserve)


class TestEstimate:
    def test_guide_question_on_l40s(self) -> None:
        """Qwen3-Coder FP8 on an L40S at 0.92 (the L40S guide's question). On the vLLM of the guide's time the
        FP8 MoE workspace stays pinned: ~175K tokens, 2 full 65,536-token sessions, as the guide's log said.
        From 0.22 vLLM releases it: 3 sessions."""
        then, now = plan_for("l40s", "0.10.2"), plan_for("l40s", "0.33.0")
        assert abs(then.kv_tokens - 175_000) <= then.error_range * then.kv_tokens
        assert (2, 3) == (then.full_sessions, now.full_sessions)
        assert ("fits", 0.06) == (now.verdict, now.error_range)

    def test_cuda_graphs_count_from_020(self) -> None:
        """vLLM ≥ 0.20 takes the CUDA-graph estimate out of the budget; enforce-eager gives it back (the
        mechanism, with a non-zero term: the fitted one is below the data's noise)."""
        graphs = replace(capacity.RESERVE, cudagraph_per_layer=16 * 1024**2)
        old, new = plan_for("l40s", "0.19.0", graphs), plan_for("l40s", "0.20.0", graphs)
        eager = plan_for("l40s", "0.20.0", graphs, enforce_eager=True)
        assert 0 == old.cudagraph_bytes < new.cudagraph_bytes
        assert new.kv_tokens < eager.kv_tokens

    @pytest.mark.parametrize(("gpu", "verdict"), [("rtx4090", "weights_do_not_fit"), ("l4", "weights_do_not_fit"),
                                                  ("h100", "fits")])
    def test_verdicts(self, gpu: str, verdict: str) -> None:
        assert verdict == plan_for(gpu).verdict

    def test_context_too_long(self) -> None:
        plan = plan_for("l40s", max_model_len=262144, kv_cache_dtype="auto")
        assert "context_too_long" == plan.verdict
        assert "at most max-model-len" in plan.warnings[0]

    def test_explicit_kv_bytes_win(self) -> None:
        """On the CPU backend (VLLM_CPU_KVCACHE_SPACE) or with --kv-cache-memory-bytes, KV size is given."""
        tiny = modelinfo.arch_from_config({"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                                           "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 2048})
        plan = capacity.estimate(capacity.CapacityInputs(
            arch=tiny, weights_bytes=2_000_000, weights_source="safetensors", gpu=GpuSpec(GPU_TABLE["l4"], 1, "t"),
            version=semantics("0.32.0"), utilization=0.5, max_model_len=2048, explicit_kv_bytes=GIB))
        assert (1024, 1_048_576 - 16) == (plan.kv_bytes_per_token, plan.kv_tokens)  # 0.29+ keeps one null block

    @pytest.mark.parametrize(("version", "seqs", "batched"), [("0.8.5", 1024, 8192), ("0.11.0", 1024, 8192),
                                                               ("0.6.6", 256, 2048)])
    def test_default_batching_by_version(self, version: str, seqs: int, batched: int) -> None:
        assert (seqs, batched) == semantics(version).default_batching(79.2, "h100")

    def test_a100_keeps_the_small_defaults(self) -> None:
        assert (256, 2048) == semantics("0.11.0").default_batching(79.2, "a100-80gb")


class TestPlanCommand:
    def test_plan_text_answers_the_guide(self, capsys: pytest.CaptureFixture[str], no_installed_vllm: None) -> None:
        """`plan configs/qwen3.yaml --gpu l40s` prints the sessions with the measured range, and the exact command
        without --api-key."""
        assert 0 == main(["plan", "configs/qwen3.yaml", "--gpu", "l40s"])
        out = capsys.readouterr().out
        assert "3 full sessions of 65,536 tokens" in out
        assert "229,632 (±6%: " in out
        assert "--api-key" not in out
        assert "vllm serve Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8 --served-model-name qwen3-coder-30b" in out

    def test_plan_json_has_the_documented_keys(self, capsys: pytest.CaptureFixture[str],
                                                no_installed_vllm: None) -> None:
        assert 0 == main(["plan", "configs/qwen3.yaml", "--gpu", "l40s", "--json"])
        data = json.loads(capsys.readouterr().out)
        for key in ("kv_bytes_per_token", "weights_bytes", "kv_budget_bytes", "kv_tokens", "sessions", "max_model_len",
                    "verdict", "argv", "env_keys", "ladder", "warnings"):
            assert key in data
        assert (49_152, 65_536, "fits") == (data["kv_bytes_per_token"], data["max_model_len"], data["verdict"])
        assert 31.0e9 < data["weights_bytes"] < 31.4e9
        assert "VLLM_API_KEY" in data["env_keys"]
        assert [0.92, 0.88] == data["ladder"]["gpu_memory_utilization"]

    def test_plan_without_profile_from_model_config(self, capsys: pytest.CaptureFixture[str],
                                                    no_installed_vllm: None) -> None:
        assert 0 == main(["plan", "--model-config", "launcher/data/models/Llama-3.1-8B-Instruct.json",
                          "--gpu", "a100-80gb x2", "--set", "vllm.tensor-parallel-size=2",
                          "--set", "vllm.max-model-len=8192", "--json"])
        data = json.loads(capsys.readouterr().out)
        assert (65_536, 2, "fits") == (data["kv_bytes_per_token"], data["gpu_count"], data["verdict"])

    @pytest.mark.parametrize("data", [b'{"_name_or_path": "r\xe9sum\xe9"}', b"[" * 5000, b"\x00\xff" * 300])
    def test_a_model_config_that_cannot_be_read_is_one_line(self, tmp_path: Path, data: bytes,
                                                            capsys: pytest.CaptureFixture[str],
                                                            no_installed_vllm: None) -> None:
        """--model-config goes through the profile's guarded reader: any bytes are one line and exit 2."""
        path = tmp_path / "config.json"
        path.write_bytes(data)
        assert 2 == main(["plan", "--model-config", str(path), "--gpu", "h100"])
        err = capsys.readouterr().err
        assert f"--model-config {path}: cannot read it" in err and len(err.strip().splitlines()) == 1

    def test_weights_gib_overrides(self, capsys: pytest.CaptureFixture[str], no_installed_vllm: None) -> None:
        assert 0 == main(["plan", "configs/qwen3.yaml", "--gpu", "h100", "--weights-gib", "30", "--json"])
        assert 30 * GIB == json.loads(capsys.readouterr().out)["weights_bytes"]

    @pytest.mark.parametrize("spec", ["rtx4090", "a100-80gb x2", "mem=79.2GiB,cc=8.0,count=2"])
    def test_gpu_specs(self, spec: str) -> None:
        parsed = parse_gpu_spec(spec)
        assert parsed.count >= 1 and parsed.model.cc >= (8, 0)

    def test_unknown_gpu_is_a_usage_error(self, capsys: pytest.CaptureFixture[str], no_installed_vllm: None) -> None:
        assert 2 == main(["plan", "configs/qwen3.yaml", "--gpu", "gtx1080"])
        assert "unknown GPU" in capsys.readouterr().err


def test_hybrid_models_count_attention_layers_only() -> None:
    """Mamba/linear-attention layers hold no per-token KV: only attention layers count, flagged approximate."""
    arch = modelinfo.arch_from_config({"hidden_size": 4096, "num_hidden_layers": 8, "num_attention_heads": 32,
                                       "num_key_value_heads": 8, "head_dim": 128,
                                       "layers_block_type": ["mamba"] * 7 + ["attention"]})
    assert (2 * 1 * 8 * 128 * 2, False) == capacity.kv_bytes_per_token(arch)
