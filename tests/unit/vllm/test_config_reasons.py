"""The configuration reasons and their fixes: every reason a signature or the agent probe gives has a row, and
each row's line says the cause and the fix."""

from __future__ import annotations

import ast
import inspect
from typing import Any

import pytest

from launcher.run import agentprobe
from launcher.vllm.config_reasons import AGENT_REASONS, FIXES, ConfigReason, config_fix, fix_for
from launcher.vllm.diagnosis import Diagnosis
from launcher.vllm.signatures import CONFIG, SIGNATURES
from tests.conftest import ROOT


def _probe_reasons() -> set[str]:
    """Every ConfigReason the agent probe's source names (`ConfigReason.X`)."""
    tree = ast.parse(inspect.getsource(agentprobe))
    return {ConfigReason[node.attr] for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "ConfigReason"}


def test_every_reason_has_a_row() -> None:
    """A new reason without a fix fails here: the ladder's Stop and diagnose's remedy read this row."""
    assert set(ConfigReason) == set(FIXES)


def test_every_config_signature_names_a_reason_with_a_row() -> None:
    reasons = [sig.reason for sig in SIGNATURES if sig.failure == CONFIG]
    assert reasons
    for reason in reasons:
        assert isinstance(reason, ConfigReason), reason
        assert reason in FIXES


def test_every_agent_probe_reason_has_a_row() -> None:
    named = _probe_reasons()
    assert named == AGENT_REASONS
    assert named <= set(FIXES)


def test_diagnose_documents_every_reason_a_log_gives() -> None:
    """docs/commands.md lists diagnose's config reasons (the agent probe's live only in `up`'s state)."""
    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert not [reason for reason in ConfigReason if reason not in AGENT_REASONS and f"`{reason}`" not in text]


def test_only_configuration_failures_name_a_config_reason() -> None:
    assert not [sig for sig in SIGNATURES if sig.failure != CONFIG and isinstance(sig.reason, ConfigReason)]


def diag(reason: str | None, cause: str | None = "the root cause", **numbers: Any) -> Diagnosis:
    return Diagnosis(CONFIG, reason, cause, numbers)


@pytest.mark.parametrize(("d", "text"), [
    (diag("tool_parser", tool_parser="hermes2", valid_tool_parsers=["hermes", "qwen3_coder"]),
     "vLLM has no tool-call-parser 'hermes2'; set vllm.tool-call-parser to one of: hermes, qwen3_coder"),
    (diag("tool_parser"),
     "enable-auto-tool-choice needs a tool-call-parser; set vllm.tool-call-parser (e.g. hermes, qwen3_coder)"),
    (diag("max_model_len_above_model", max_model_len=65536, derived_max_model_len=32768),
     "max-model-len 65536 is above the model's own limit 32768; set vllm.max-model-len to at most that"),
    (diag("port_in_use", holder="pid 42 (nginx)"),
     "the port is held by pid 42 (nginx); stop what listens there or set vllm.port to a free port"),
    (diag("port_in_use"), "the port is already in use; stop what listens there or set vllm.port to a free port"),
    (diag("missing_dependency", "No module named 'timm'", package="timm"),
     "the model needs the Python package timm, which vLLM's environment lacks (No module named 'timm'); install "
     "it where vLLM runs (the venv or image of launcher.vllm_bin): pip install timm"),
    (diag("missing_dependency", "No module named 'vllm'", package="vllm"),
     "the Python that runs vLLM has no vllm package (No module named 'vllm'); point launcher.vllm_bin at the venv or "
     "image vLLM is installed in, or install it there: pip install vllm"),
    (diag("missing_dependency", "RuntimeError: Failed to find C compiler.", package="cc"),
     "Triton compiles its launcher with the host's C compiler on the first kernel launch (RuntimeError: Failed to find "
     "C compiler.); install one where vLLM runs (apt install build-essential, or gcc in the image), or point CC (env:) "
     "at it"),
    (diag("not_enough_gpus", world_size=4, gpus=2),
     "tensor × pipeline parallel size 4 needs more GPUs than the 2 visible; lower tensor-parallel-size or expose "
     "more GPUs (CUDA_VISIBLE_DEVICES)"),
    (diag("not_enough_gpus", "torch.AcceleratorError: HIP error: invalid device ordinal"),
     "a rank found no GPU for it (torch.AcceleratorError: HIP error: invalid device ordinal); lower "
     "tensor-parallel-size or expose more GPUs (CUDA_VISIBLE_DEVICES)"),
    (diag("tool_calls_as_text", "agent probe: the model wrote its tool call as text; set vllm.tool-call-parser: "
          "hermes"), "agent probe: the model wrote its tool call as text; set vllm.tool-call-parser: hermes"),
    (diag("bad_argument"), "vLLM rejects the configuration: the root cause; fix the profile"),
    (diag("no_such_reason"), "vLLM rejects the configuration: the root cause; fix the profile"),
    (diag(None), "vLLM rejects the configuration: the root cause; fix the profile"),
])
def test_a_row_says_the_cause_and_the_fix(d: Diagnosis, text: str) -> None:
    assert text == config_fix(d)


def test_a_plain_string_finds_its_row() -> None:
    """State and the launcher's own records hold the reason as text: the same row answers it."""
    assert FIXES[ConfigReason.GATED_REPO] is fix_for("gated_repo")
    assert "gated_repo" == ConfigReason.GATED_REPO


def test_the_precise_refusals_carry_vllms_numbers_into_their_fix() -> None:
    """vLLM says exactly what is wrong: its numbers reach the fix, instead of the generic 'fix the profile'."""
    from launcher.run.ladder import describe_remedy
    from launcher.vllm.diagnose import diagnose_lines

    rows = [
        ("ValueError: Total number of attention heads (28) must be divisible by tensor parallel size (8).",
         "heads_not_divisible", "tensor-parallel-size 8 does not divide the model's 28 attention heads; set "
         "vllm.tensor-parallel-size to one of 1, 2, 4, 7, 14, 28"),
        ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU "
         "has compute capability 7.5. You can use float16 instead by explicitly setting the `dtype` flag in CLI, for "
         "example: --dtype=half.", "dtype_unsupported", "the Tesla T4 (compute capability 7.5) has less; set vllm.dtype: half"),
        ("ValueError: torch.bfloat16 is not supported for quantization method awq. Supported dtypes: [torch.float16]",
         "dtype_unsupported", "(they take float16); set vllm.dtype to float16"),
        ("ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (32768). This effectively limits the "
         "maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
         "max_num_batched_tokens or decrease max_model_len.", "batch_below_context",
         "set vllm.max-num-batched-tokens to at least 32768"),
    ]
    for line, reason, words in rows:
        d = diagnose_lines([line])
        assert (d.cls, d.reason) == ("config", reason)
        assert words in config_fix(d) and words in describe_remedy(d), config_fix(d)
