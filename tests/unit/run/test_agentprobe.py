"""The agent probe's verdict on an answer (pure), over real posted answers and each parser family's markup."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.run.agentprobe import PROBE_FUNCTION, AgentVerdict, judge, markup_parser, request_body, wanted

POSTED = json.loads((Path(__file__).parents[2] / "data" / "agent" / "posted.json").read_text())


def answer(message: dict[str, Any]) -> bytes:
    return json.dumps({"object": "chat.completion", "choices": [{"index": 0, "message": message}]}).encode()


@pytest.mark.parametrize("case", POSTED, ids=[f"{c['source'].rsplit('/', 1)[-1]}-{c['verdict']}" for c in POSTED])
def test_real_posted_answers(case: dict[str, Any]) -> None:
    found = judge(200, answer(case["message"]), tool_call_parser=case["tool_call_parser"], reasoning_parser=None)
    assert (str(found.verdict), found.reason, found.parser if found.failed else None) == (
        case["verdict"], case["reason"], case["parser"])


MARKUP = [
    ("qwen3_coder", f"<tool_call>\n<function={PROBE_FUNCTION}>\n</function>\n</tool_call>"),
    ("hermes", f'<tool_call>\n{{"name": "{PROBE_FUNCTION}", "arguments": {{}}}}\n</tool_call>'),
    ("glm45", f"<tool_call>{PROBE_FUNCTION}\n<arg_key>x</arg_key>\n<arg_value>1</arg_value>\n</tool_call>"),
    ("mistral", f'[TOOL_CALLS][{{"name": "{PROBE_FUNCTION}", "arguments": {{}}}}]'),
    ("llama3_json", f'{{"name": "{PROBE_FUNCTION}", "parameters": {{}}}}'),
    ("llama3_json", f'<|python_tag|>{{"name": "{PROBE_FUNCTION}", "parameters": {{}}}}'),
    ("deepseek_v3", f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{PROBE_FUNCTION}"),
    ("kimi_k2", f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{PROBE_FUNCTION}:0"),
    ("pythonic", f"[{PROBE_FUNCTION}()]"),
]


@pytest.mark.parametrize(("parser", "text"), MARKUP, ids=[f"{p}-{i}" for i, (p, _) in enumerate(MARKUP)])
def test_each_familys_markup_names_its_parser(parser: str, text: str) -> None:
    assert markup_parser(text) == parser
    found = judge(200, answer({"role": "assistant", "content": text, "tool_calls": []}), tool_call_parser="other",
                  reasoning_parser=None)
    assert found.failed and found.reason == "tool_calls_as_text" and found.parser == parser
    assert found.fix == f"set vllm.tool-call-parser: {parser}"
    assert found.evidence == text[:200]


def test_the_function_named_in_prose_is_a_call_written_as_text() -> None:
    found = judge(200, answer({"content": f"I will now call {PROBE_FUNCTION}.", "tool_calls": None}),
                  tool_call_parser="hermes", reasoning_parser=None)
    assert found.failed and found.parser is None and "tool-call-parser to the one" in str(found.fix)


def test_arguments_that_are_not_json_fail() -> None:
    call = {"id": "c", "type": "function", "function": {"name": PROBE_FUNCTION, "arguments": '{"input_num": 1024'}}
    found = judge(200, answer({"content": None, "tool_calls": [call]}), tool_call_parser="hermes", reasoning_parser=None)
    assert found.failed and found.reason == "tool_call_arguments"


def test_prose_or_nothing_is_inconclusive() -> None:
    for content in ("I cannot help with that.", "", None):
        found = judge(200, answer({"content": content}), tool_call_parser="hermes", reasoning_parser=None)
        assert found.verdict is AgentVerdict.INCONCLUSIVE, content


def test_thinking_left_in_content_by_a_reasoning_parser_fails() -> None:
    found = judge(200, answer({"content": "<think>hm</think>done", "reasoning_content": None}),
                  tool_call_parser="hermes", reasoning_parser="deepseek_r1")
    assert found.failed and found.reason == "reasoning_in_content"
    kept_out = judge(200, answer({"content": "", "reasoning_content": "hm", "tool_calls": []}),
                     tool_call_parser="hermes", reasoning_parser="qwen3")
    assert not kept_out.failed


def test_vllms_refusals_are_configuration_failures() -> None:
    """vLLM 0.32's own messages (vllm/renderers/online_renderer.py, vllm/renderers/hf.py)."""
    auto = {"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be '
                                 "set", "type": "BadRequestError", "param": None, "code": 400}}
    found = judge(400, json.dumps(auto).encode(), tool_call_parser=None, reasoning_parser=None)
    assert found.failed and found.reason == "auto_tool_choice_off" and "enable-auto-tool-choice" in str(found.fix)
    template = {"error": {"message": "As of transformers v4.44, default chat template is no longer allowed, so you "
                                     "must provide a chat template if the tokenizer does not define one.",
                          "type": "BadRequestError", "param": None, "code": 400}}
    found = judge(400, json.dumps(template).encode(), tool_call_parser="hermes", reasoning_parser=None)
    assert found.failed and found.reason == "chat_template"
    other = judge(500, b"Internal Server Error", tool_call_parser="hermes", reasoning_parser=None)
    assert other.verdict is AgentVerdict.INCONCLUSIVE


def test_the_request_is_an_agent_turn_and_auto_follows_the_flag() -> None:
    body = request_body("m")
    assert body["tool_choice"] == "auto" and body["temperature"] == 0
    assert body["tools"][0]["function"]["name"] == PROBE_FUNCTION and PROBE_FUNCTION in body["messages"][0]["content"]
    assert wanted("auto", {"enable-auto-tool-choice": True}) and not wanted("auto", {})
    assert wanted("required", {}) and not wanted("off", {"enable-auto-tool-choice": True})
