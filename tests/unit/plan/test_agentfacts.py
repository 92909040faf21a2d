"""The agent facts: the chat template vLLM would use, read from the model's files, and whether it renders tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.plan.agentfacts import agent_facts, renders_tools
from tests.helpers.profiles import load_profile

TOOLS_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}{{ tools | tojson }}{% endif %}"
PLAIN_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"


@pytest.mark.parametrize(("template", "expected"), [
    (TOOLS_TEMPLATE, True),
    (PLAIN_TEMPLATE, False),
    ("{%- for tool in tools %}{{ tool.function.name }}{%- endfor %}", True),
    ("{# this template has no tools #}{{ messages[0].content }}", False),  # a comment is not a reference
    ("{{ 'use tools wisely' }}{{ messages }}", False),  # nor a string
    ("{% generation %}{{ tools }}{% endgeneration %}", True),  # an extension jinja2 alone cannot parse: by text
])
def test_renders_tools(template: str, expected: bool) -> None:
    assert expected == renders_tools(template)


def model_dir(tmp_path: Path, tokenizer_config: dict[str, Any] | None = None, jinja: str | None = None) -> Path:
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "qwen3_moe"}))
    if tokenizer_config is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    if jinja is not None:
        (directory / "chat_template.jinja").write_text(jinja)
    return directory


def test_the_template_of_tokenizer_config(tmp_path: Path) -> None:
    directory = model_dir(tmp_path, {"chat_template": PLAIN_TEMPLATE})
    facts = agent_facts(load_profile(model=str(directory)), config=None, environ={}, vllm_version="0.32.0")
    assert facts.template is not None
    assert (str(directory / "tokenizer_config.json"), False) == (facts.template.source, facts.template.renders_tools)


def test_a_named_list_uses_tool_use_when_there_is_one(tmp_path: Path) -> None:
    """With tools in the request transformers picks the template named tool_use, else default."""
    directory = model_dir(tmp_path, {"chat_template": [{"name": "default", "template": PLAIN_TEMPLATE},
                                                       {"name": "tool_use", "template": TOOLS_TEMPLATE}]})
    facts = agent_facts(load_profile(model=str(directory)), config=None, environ={}, vllm_version="0.32.0")
    assert facts.template is not None
    assert ("tool_use", True) == (facts.template.source.rsplit(" ", 1)[-1].strip("()"), facts.template.renders_tools)


def test_chat_template_jinja_wins_over_tokenizer_config(tmp_path: Path) -> None:
    directory = model_dir(tmp_path, {"chat_template": PLAIN_TEMPLATE}, jinja=TOOLS_TEMPLATE)
    facts = agent_facts(load_profile(model=str(directory)), config=None, environ={}, vllm_version="0.32.0")
    assert facts.template is not None
    assert (str(directory / "chat_template.jinja"), True) == (facts.template.source, facts.template.renders_tools)


def test_the_chat_template_flag_wins(tmp_path: Path) -> None:
    directory = model_dir(tmp_path, {"chat_template": TOOLS_TEMPLATE})
    flag_file = tmp_path / "plain.jinja"
    flag_file.write_text(PLAIN_TEMPLATE)
    facts = agent_facts(load_profile(model=str(directory), vllm={"chat-template": str(flag_file)}), config=None, environ={},
                        vllm_version="0.32.0")
    assert facts.template is not None
    assert (f"--chat-template {flag_file}", False) == (facts.template.source, facts.template.renders_tools)


def test_an_inline_chat_template_flag(tmp_path: Path) -> None:
    facts = agent_facts(load_profile(model="org/m", vllm={"chat-template": TOOLS_TEMPLATE}), config=None, environ={},
                        vllm_version="0.32.0")
    assert facts.template is not None
    assert ("--chat-template (inline)", True) == (facts.template.source, facts.template.renders_tools)


def test_a_cached_hub_model(tmp_path: Path) -> None:
    snapshot = tmp_path / "hub" / "models--org--m" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "tokenizer_config.json").write_text(json.dumps({"chat_template": TOOLS_TEMPLATE}))
    facts = agent_facts(load_profile(model="org/m"), config=None, environ={"HF_HUB_CACHE": str(tmp_path / "hub")},
                        vllm_version="0.32.0")
    assert facts.template is not None
    assert facts.template.renders_tools


def test_no_files_no_template() -> None:
    """A model that is neither local nor cached: its template is unknown, nothing is said about it."""
    facts = agent_facts(load_profile(model="org/not-here"), config={"model_type": "llama"},
                        environ={"HF_HUB_CACHE": "/nonexistent"}, vllm_version="0.32.0", tool_choices=("hermes",))
    assert (None, {"model_type": "llama"}, ("hermes",)) == (facts.template, facts.config, facts.tool_choices)


def test_an_unreadable_tokenizer_config_is_a_note(tmp_path: Path) -> None:
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "tokenizer_config.json").write_text("{not json")
    facts = agent_facts(load_profile(model=str(directory)), config=None, environ={}, vllm_version="0.32.0")
    assert facts.template is None
    assert facts.template_note is not None and "tokenizer_config.json" in facts.template_note


def test_without_jinja2_the_text_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher does not depend on jinja2: without it the word `tools` in the template decides."""
    import sys

    monkeypatch.setitem(sys.modules, "jinja2", None)  # import jinja2 now raises ImportError
    assert (True, False) == (renders_tools(TOOLS_TEMPLATE), renders_tools(PLAIN_TEMPLATE))
