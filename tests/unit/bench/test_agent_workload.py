"""The agent workload sends what agents send: the tool set in every request, tool results after a parsed call,
the tools counted in the prompt sizing, a refusal when they do not fit, and the agent-health figures reported."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest

from launcher.bench import agent_tools, report, runner
from launcher.bench.client import TOOLS_REFUSED, ServerError
from launcher.bench.command import check_settings
from launcher.bench.scrape import ServerCounters
from launcher.bench.stats import RequestResult
from launcher.bench.stream import Answer, ToolCall
from launcher.bench.workload import NO_OUTPUT, Conversation, Settings

TOOL_TOKENS = 3000  # what the stub's template adds for the tools


class Stub:
    """A server whose tokenizer counts words (and TOOL_TOKENS for the tools) and whose model answers with
    `script`: a list of Answers, cycled; it records every request's messages and tools."""

    def __init__(self, script: list[Answer], error: str | None = None) -> None:
        self.script = script
        self.error = error
        self.sent: list[tuple[list[dict[str, Any]], Any]] = []
        self.tokenized_tools: list[Any] = []

    def count_tokens(self, model: str, messages: Any = None, text: str | None = None, tools: Any = None) -> int:
        self.tokenized_tools.append(tools)
        words = text.split() if messages is None else " ".join(str(m.get("content")) for m in messages).split()
        return len(words) + (TOOL_TOKENS if tools else 0)

    def chat(self, model: str, messages: Any, **kwargs: Any) -> tuple[RequestResult, Answer]:
        self.sent.append((copy.deepcopy(list(messages)), kwargs.get("tools")))
        if self.error:
            return RequestResult(False, error=self.error), Answer()
        answer = self.script[(len(self.sent) - 1) % len(self.script)]
        return RequestResult(True, 0.01, 0.02, (0.01,), 100, 2, tool_calls=len(answer.calls)), answer

    def metrics_text(self) -> str:
        return ""


SETTINGS = Settings(users=1, turns=4, shared_prefix=8, turn_tokens=6, max_tokens=4, warmup=0)
CALL = Answer("", (ToolCall("chatcmpl-tool-1", "read_file", '{"path": "a.py"}'),))


def test_the_tool_set_is_a_coding_agents_dozen_with_real_schemas() -> None:
    names = agent_tools.NAMES
    assert 12 <= len(names) <= 16 and len(set(names)) == len(names)
    assert {"read_file", "write_file", "edit_file", "list_directory", "glob", "grep", "run_shell_command",
            "web_fetch", "todo_write", "search_symbols", "git_diff", "apply_patch"} <= set(names)
    for tool in agent_tools.TOOLS:
        function = tool["function"]
        assert tool["type"] == "function" and len(function["description"]) > 150, function["name"]
        schema = function["parameters"]
        assert schema["type"] == "object" and set(schema["required"]) <= set(schema["properties"])
        assert all("type" in p for p in schema["properties"].values())
    assert len(json.dumps(agent_tools.TOOLS)) > 12_000, "several thousand tokens of schema"
    todo = next(t for t in agent_tools.TOOLS if t["function"]["name"] == "todo_write")["function"]["parameters"]
    assert todo["properties"]["todos"]["items"]["properties"]["status"]["enum"][:3] == [
        "pending", "in_progress", "completed"]
    assert agent_tools.tools_for("none") is None and agent_tools.tools_for("agent") == list(agent_tools.TOOLS)


def test_after_a_parsed_call_the_next_turn_is_its_result() -> None:
    chat = Conversation(0, [{"role": "system", "content": "s"}])
    assert chat.add_turn("first") == 1 and chat.messages[-1] == {"role": "user", "content": "first"}
    two = Answer("", (ToolCall("c-1", "glob", "{}"), ToolCall("c-2", "grep", "{}")))
    chat.messages.append(two.message())
    assert chat.add_turn("listing") == 2
    assert chat.messages[-2:] == [{"role": "tool", "tool_call_id": "c-1", "content": "listing"},
                                  {"role": "tool", "tool_call_id": "c-2", "content": NO_OUTPUT}]
    chat.messages.append(Answer("done").message())
    assert chat.add_turn("next") == 1 and chat.messages[-1]["role"] == "user"


def test_every_request_carries_the_tools_and_the_history_has_the_results() -> None:
    stub = Stub([CALL, Answer("ok")])
    prepared = runner.prepare(stub, "m", SETTINGS, 8192)  # type: ignore[arg-type]
    run = runner.run(stub, prepared, SETTINGS)  # type: ignore[arg-type]
    assert [r.tool_calls for r in run.results] == [1, 0, 1, 0]
    assert all(list(tools) == list(agent_tools.TOOLS) for _, tools in stub.sent)
    second = stub.sent[1][0]
    texts = prepared.texts[0]
    assert second[-2] == CALL.message()
    assert second[-1] == {"role": "tool", "tool_call_id": "chatcmpl-tool-1", "content": texts[1]}
    third = stub.sent[2][0]
    assert third[-2] == {"role": "assistant", "content": "ok"} and third[-1] == {"role": "user", "content": texts[2]}


def test_the_prompt_sizing_counts_the_tools() -> None:
    stub = Stub([Answer("ok")])
    prepared = runner.prepare(stub, "m", SETTINGS, 8192)  # type: ignore[arg-type]
    assert prepared.first_input_tokens == 8 + 6 + TOOL_TOKENS
    assert prepared.turn_overhead == 0, "the tools are in both counts: no overhead of their own"
    assert runner.tool_tokens(stub, "m", SETTINGS) == TOOL_TOKENS  # type: ignore[arg-type]
    none = replace(SETTINGS, tools="none")
    assert runner.tool_tokens(stub, "m", none) == 0  # type: ignore[arg-type]
    assert runner.prepare(stub, "m", none, 8192).first_input_tokens == 14  # type: ignore[arg-type]
    run = runner.run(stub, runner.prepare(stub, "m", none, 8192), none)  # type: ignore[arg-type]
    assert run.results and all(tools is None for _, tools in stub.sent[-none.turns:])


def test_a_server_that_refuses_auto_tool_choice_ends_the_run_with_the_fix() -> None:
    for warmup in (0, 1):
        stub = Stub([], error=TOOLS_REFUSED)
        settings = replace(SETTINGS, warmup=warmup)
        with pytest.raises(runner.ToolsRefused) as refused:
            runner.run(stub, runner.prepare(stub, "m", settings, 8192), settings)  # type: ignore[arg-type]
        assert refused.value.exit_code == 78 and "--tools none" in str(refused.value)
        assert "enable-auto-tool-choice" in str(refused.value) and len(stub.sent) == 1


def test_check_settings_refuses_tools_that_do_not_fit_with_the_fix() -> None:
    settings = Settings(shared_prefix=512, turn_tokens=128, max_tokens=64)
    check_settings(settings, 8192, 8192, tool_tokens=4000)
    with pytest.raises(ServerError) as small:
        check_settings(settings, 4096, 8192, tool_tokens=4000)
    message = str(small.value)
    assert small.value.exit_code == 2 and "\n" not in message
    assert "4000 tokens" in message and "pass --tools none or --context 4704" in message
    with pytest.raises(ServerError) as server_limit:
        check_settings(settings, 4096, 4096, tool_tokens=4000)
    assert str(server_limit.value).endswith("pass --tools none"), "no --context the server cannot take"


def results() -> list[RequestResult]:
    return [RequestResult(True, 0.1, 0.2, (), 10, 3, tool_calls=1), RequestResult(True, 0.1, 0.2, (), 10, 3,
            tool_calls=2), RequestResult(True, 0.1, 0.2, (), 10, 3, calls_as_text="hermes"),
            RequestResult(True, 0.1, 0.2, (), 10, 3), RequestResult(False, error="timeout", calls_as_text="hermes")]


def test_the_report_shows_parsed_calls_and_calls_left_as_text_next_to_ttft_and_tpot() -> None:
    run = runner.Run(results(), ServerCounters(None, None, None), 1.0, False)
    doc = report.document(run, target="http://x", model="m", vllm_version="0.32.0", settings=SETTINGS)
    assert doc["tool_calls"] == {"answers": 4, "parsed": 2, "as_text": 1, "as_text_markup": {"hermes": 1}}
    assert doc["settings"]["tools"] == "agent"
    lines = report.text(doc).splitlines()
    row = next(i for i, line in enumerate(lines) if line.strip().startswith("answers with tool calls"))
    assert "TPOT" in lines[row - 1] and "TTFT" in lines[row - 2]
    assert lines[row].endswith("2/4 parsed, 1 as text (hermes)")
    json.loads(report.to_json(doc))
    off = report.document(run, target="http://x", model="m", vllm_version=None,
                          settings=replace(SETTINGS, tools="none"))
    assert "no tools sent" in report.text(off)
