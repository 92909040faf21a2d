"""The family table: which parsers each model family needs, and the parser names of each vLLM."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from launcher.vllm.agent_parsers import FAMILIES, family_for, parser_module, registry
from tests.conftest import ROOT

FAMILY_CASES = [
    # (model id or path, config.json fields, chat template, family, tool parser, reasoning parser)
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8", None, None, "Qwen3-Coder", "qwen3_coder", None),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct", {"model_type": "qwen3_moe"}, None, "Qwen3-Coder", "qwen3_coder", None),
    ("/models/x", {"model_type": "qwen3_moe"}, "<function=", "Qwen3-Coder", "qwen3_coder", None),
    ("/models/x", {"model_type": "qwen3_moe"}, "<tool_call>", "Qwen3", "hermes", "qwen3"),
    ("Qwen/Qwen3-8B", None, None, "Qwen3", "hermes", "qwen3"),
    ("Qwen/Qwen3-30B-A3B-Thinking-2507", None, None, "Qwen3 Thinking (2507)", "hermes", "qwen3"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", None, None, "Qwen3 Instruct (2507, Next)", "hermes", None),
    ("Qwen/Qwen2.5-7B-Instruct", None, None, "Qwen2.5 / Qwen2", "hermes", None),
    ("/m", {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}, None, "Qwen2.5 / Qwen2", "hermes", None),
    ("Qwen/QwQ-32B", None, None, "QwQ", "hermes", "deepseek_r1"),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", {"model_type": "llama"}, None, "DeepSeek-R1 distills", None,
     "deepseek_r1"),
    ("deepseek-ai/DeepSeek-R1-0528", None, None, "DeepSeek-R1", "deepseek_v3", "deepseek_r1"),
    ("deepseek-ai/DeepSeek-V3-0324", None, None, "DeepSeek V3", "deepseek_v3", None),
    ("deepseek-ai/DeepSeek-V3.1", None, None, "DeepSeek V3.1", "deepseek_v31", "deepseek_v3"),
    ("meta-llama/Llama-3.1-8B-Instruct", {"model_type": "llama"}, None, "Llama 3.1 / 3.2 / 3.3", "llama3_json", None),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", None, None, "Llama 4", "llama4_pythonic", None),
    ("NousResearch/Hermes-3-Llama-3.1-8B", None, None, "Hermes (Nous)", "hermes", None),
    ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", None, None, "Mistral / Mixtral / Devstral", "mistral", None),
    ("mistralai/Magistral-Small-2506", None, None, "Magistral", "mistral", "mistral"),
    ("openai/gpt-oss-120b", None, None, "gpt-oss", "openai", "openai_gptoss"),
    ("/srv/oss", {"model_type": "gpt_oss"}, None, "gpt-oss", "openai", "openai_gptoss"),
    ("zai-org/GLM-4.5-Air", None, None, "GLM-4.5 / 4.6 / 4.7", "glm45", "glm45"),
    ("moonshotai/Kimi-K2-Instruct", {"model_type": "kimi_k2"}, None, "Kimi K2", "kimi_k2", None),
    ("/srv/k2", {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"]}, None, "Kimi K2", "kimi_k2",
     None),
    ("moonshotai/Kimi-K2-Thinking", None, None, "Kimi K2 Thinking", "kimi_k2", "kimi_k2"),
    ("ibm-granite/granite-3.3-8b-instruct", None, None, "Granite 3.x", "granite", "granite"),
    ("ibm-granite/granite-4.0-h-small", None, None, "Granite 4", "granite4", None),
    ("internlm/internlm2_5-7b-chat", None, None, "InternLM 2 / 2.5", "internlm", None),
    ("MiniMaxAI/MiniMax-M2", None, None, "MiniMax-M2", "minimax_m2", "minimax_m2"),
]


@pytest.mark.parametrize(("model", "config", "template", "name", "tool", "reasoning"), FAMILY_CASES,
                         ids=[f"{c[0]}-{c[3]}" for c in FAMILY_CASES])
def test_family_for(model: str, config: dict[str, Any] | None, template: str | None, name: str, tool: str | None,
                    reasoning: str | None) -> None:
    family = family_for(model, config, template)
    assert family is not None
    assert (name, tool, reasoning) == (family.name, family.tool_parser, family.reasoning_parser)


def test_an_unknown_model_has_no_family() -> None:
    assert family_for("someone/unknown-7b", {"model_type": "llama"}) is None


def test_every_parser_the_table_names_is_in_vllm_0_32() -> None:
    """A family row may only name parsers vLLM 0.32 registers (vllm/tool_parsers/__init__.py,
    vllm/reasoning/__init__.py)."""
    known = registry("0.32.0")
    assert known is not None
    unknown = [(f.name, p) for f in FAMILIES for p in f.tool_parsers() if p not in known.tool]
    unknown += [(f.name, f.reasoning_parser) for f in FAMILIES if f.reasoning_parser not in (None, *known.reasoning)]
    assert [] == unknown


def test_the_registry_is_the_shipped_flag_list_s_choices() -> None:
    """The copied tool-parser names are the ones `vllm serve --help=all` of 0.32.0 offers."""
    from launcher.config.flags import shipped_catalog

    catalog = shipped_catalog()
    spec = catalog.lookup("tool-call-parser")
    known = registry(catalog.version)
    assert spec is not None and known is not None
    assert sorted(spec.choices or ()) == sorted(known.tool)


def test_registries_by_version() -> None:
    assert registry("0.32.0+cpu") is registry("0.32.1")
    assert registry("0.11.0") is None
    assert registry("nonsense") is None
    assert "vllm/reasoning/gptoss_reasoning_parser.py" == parser_module("reasoning", "openai_gptoss", "0.32.0")
    assert parser_module("tool", "nope", "0.32.0") is None


def test_the_committed_page_is_up_to_date() -> None:
    done = subprocess.run([sys.executable, "scripts/agent_parsers_docs.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert 0 == done.returncode, done.stderr
