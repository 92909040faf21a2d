"""The agent checks: tool-call and reasoning parsers against the model family, the chat template and vLLM."""

from __future__ import annotations

import json
from typing import Any

import pytest

from launcher import cli
from launcher.plan.agentchecks import agent_problems
from launcher.plan.agentfacts import AgentFacts, ChatTemplate
from launcher.plan.problems import ERROR, WARNING, Severity
from tests.conftest import CONFIGS, DATA
from tests.helpers.profiles import load_profile

CODER = "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
QWEN3 = "Qwen/Qwen3-8B"
R1_DISTILL = "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"
GPT_OSS = "openai/gpt-oss-20b"
TOOLS = {"enable-auto-tool-choice": True}
QWEN3_CONFIG = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"]}


def facts(config: dict[str, Any] | None = None, template: str | None = None, renders: bool = True,
          version: str = "0.32.0", choices: tuple[str, ...] | None = None) -> AgentFacts:
    chat = ChatTemplate("tokenizer_config.json", template, renders) if template is not None else None
    return AgentFacts(config=config, template=chat, vllm_version=version, tool_choices=choices)


def found(model: str, flags: dict[str, Any], agent: AgentFacts | None = None) -> list[tuple[str, Severity, str]]:
    """(code, severity, fix) of every problem."""
    return [(p.code, p.severity, p.fix) for p in agent_problems(load_profile(model=model, vllm=flags), agent or facts())]


CASES = [
    # (id, model, flags, facts, expected (code, severity, text in the fix))
    ("the guide's profile is clean", CODER, {**TOOLS, "tool-call-parser": "qwen3_coder"}, None, []),
    ("qwen3_xml reads the same markup", CODER, {**TOOLS, "tool-call-parser": "qwen3_xml"}, None, []),
    ("hermes on Qwen3-Coder names qwen3_coder", CODER, {**TOOLS, "tool-call-parser": "hermes"}, None,
     [("tool_parser_mismatch", WARNING, "qwen3_coder")]),
    ("qwen3_coder on Llama 3.1 names llama3_json", LLAMA, {**TOOLS, "tool-call-parser": "qwen3_coder"}, None,
     [("tool_parser_mismatch", WARNING, "llama3_json")]),
    ("a Qwen3-Coder at a bare path is told by its template", "/models/coder",
     {**TOOLS, "tool-call-parser": "hermes"}, facts(QWEN3_CONFIG, "{{ tools }} <function=x>"),
     [("tool_parser_mismatch", WARNING, "qwen3_coder")]),
    ("a bare qwen3 config without that template is Qwen3", "/models/q", {**TOOLS, "tool-call-parser": "hermes"},
     facts(QWEN3_CONFIG, "{{ tools }} <tool_call>"), [("reasoning_parser_missing", WARNING, "qwen3")]),
    ("an unknown family says nothing", "someone/unknown-7b", {**TOOLS, "tool-call-parser": "hermes"}, None, []),
    ("a parser without auto tool choice", CODER, {"tool-call-parser": "qwen3_coder"}, None,
     [("auto_tool_choice_off", WARNING, "enable-auto-tool-choice: true")]),
    ("auto tool choice without a parser names the family's", CODER, TOOLS, None,
     [("tool_parser_missing", ERROR, "qwen3_coder")]),
    ("auto tool choice switched off is no parser problem", CODER, {"enable-auto-tool-choice": False}, None, []),
    ("a reasoning parser this vLLM lacks", QWEN3, {"reasoning-parser": "qwen4"}, None,
     [("reasoning_parser_unknown", ERROR, "qwen3")]),
    ("a reasoning parser of a plugin is not checked", QWEN3,
     {"reasoning-parser": "mine", "reasoning-parser-plugin": "/p/mine.py"}, None, []),
    ("a version whose parsers are unknown checks no names", QWEN3, {"reasoning-parser": "qwen4"},
     facts(version="0.11.0"), []),
    ("a tool parser outside the flag list's choices", CODER, {**TOOLS, "tool-call-parser": "qwen3_coder"},
     facts(choices=("hermes", "llama3_json")), [("tool_parser_unknown", ERROR, "hermes, llama3_json")]),
    ("a template that never renders tools", CODER, {**TOOLS, "tool-call-parser": "qwen3_coder"},
     facts(template="{{ messages }}", renders=False), [("chat_template_no_tools", WARNING, "chat-template")]),
    ("the template is not checked without tools", CODER, {}, facts(template="{{ messages }}", renders=False), []),
    ("Qwen3 thinks: no reasoning parser", QWEN3, {}, None, [("reasoning_parser_missing", WARNING, "qwen3")]),
    ("Qwen3 with its reasoning parser", QWEN3, {"reasoning-parser": "qwen3"}, None, []),
    ("a DeepSeek-R1 distill names deepseek_r1", R1_DISTILL, {}, None,
     [("reasoning_parser_missing", WARNING, "deepseek_r1")]),
    ("gpt-oss names openai_gptoss", GPT_OSS, {**TOOLS, "tool-call-parser": "openai"}, None,
     [("reasoning_parser_missing", WARNING, "openai_gptoss")]),
    ("Qwen3-Coder does not think", CODER, {}, None, []),
    ("a tool parser of a plugin is not matched", CODER,
     {**TOOLS, "tool-call-parser": "mine", "tool-parser-plugin": "/p/mine.py"}, None, []),
]


@pytest.mark.parametrize(("model", "flags", "agent", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_agent_checks(model: str, flags: dict[str, Any], agent: AgentFacts | None,
                      expected: list[tuple[str, Severity, str]]) -> None:
    got = found(model, flags, agent)
    assert [(code, severity) for code, severity, _ in expected] == [(code, severity) for code, severity, _ in got]
    for (_, _, text), (_, _, fix) in zip(expected, got, strict=True):
        assert text in fix


def test_the_mismatch_names_the_markup_each_parser_reads() -> None:
    """The message says what the model writes, so the operator sees why the calls would come back as text."""
    (problem,) = agent_problems(load_profile(model=CODER, vllm={**TOOLS, "tool-call-parser": "hermes"}), facts())
    assert "Qwen3-Coder" in problem.message
    assert "<function=" in problem.message


def test_an_unknown_reasoning_parser_lists_the_valid_ones() -> None:
    (problem,) = agent_problems(load_profile(model=QWEN3, vllm={"reasoning-parser": "qwen4"}), facts())
    assert "deepseek_r1" in problem.fix
    assert "openai_gptoss" in problem.fix


class TestCommandLine:
    """`plan` and `preflight` report the agent checks beside their own, and exit 78 only on an error."""

    def test_plan_names_the_parser_for_qwen3_coder(self, no_installed_vllm: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
        assert 0 == cli.main(["plan", str(CONFIGS / "qwen3.yaml"), "--gpu", "l40s",
                              "--set", "vllm.tool-call-parser=hermes"])
        out = capsys.readouterr().out
        assert "WARNING tool_parser_mismatch" in out
        assert "set vllm.tool-call-parser: qwen3_coder" in out

    def test_plan_json_lists_the_problem(self, no_installed_vllm: None, capsys: pytest.CaptureFixture[str]) -> None:
        assert 78 == cli.main(["plan", str(CONFIGS / "qwen3.yaml"), "--gpu", "l40s", "--json",
                               "--set", "vllm.tool-call-parser=null"])
        problems = json.loads(capsys.readouterr().out)["problems"]
        assert [("tool_parser_missing", "error")] == [(p["code"], p["severity"]) for p in problems]

    def test_the_guide_profile_plans_clean(self, no_installed_vllm: None, capsys: pytest.CaptureFixture[str]) -> None:
        assert 0 == cli.main(["plan", str(CONFIGS / "qwen3.yaml"), "--gpu", "l40s", "--json"])
        assert [] == json.loads(capsys.readouterr().out)["problems"]

    def test_preflight_blocks_an_unknown_reasoning_parser(self, no_installed_vllm: None,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
        assert 78 == cli.main(["preflight", str(CONFIGS / "qwen3.yaml"), "--gpu-inventory",
                               str(DATA / "inventories" / "l40s.yaml"), "--set", "vllm.reasoning-parser=qwen4"])
        out = capsys.readouterr().out
        assert "ERROR   reasoning_parser_unknown" in out
        assert "openai_gptoss" in out
