"""Before READY, what a coding agent needs: a chat through the model's template, and a tool call that comes
back parsed.

The most silent failure of an agent server is a tool-call parser that cannot read what the model writes:
vLLM answers 200, the call arrives as text in `content`, the client shows it as prose, and nothing fails
until the agent tries to edit a file. So one request goes through the chat template with one uniquely
named function and `tool_choice: auto`, as an agent sends it, and its answer is judged (`judge`, pure):

- parsed `tool_calls` whose arguments are valid JSON: pass;
- the function's name, or any parser family's markup, in `content` with no `tool_calls`: the parser cannot
  read this model's calls: a configuration failure naming the parser whose markup it is;
- vLLM refuses the request (auto tool choice not enabled, no usable chat template): a configuration failure;
- no call at all: inconclusive (a model may answer in prose): READY, with a warning;
- with a reasoning parser, thinking markup left in `content`: a configuration failure.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.run.health import Verify
from launcher.vllm import api
from launcher.vllm.config_reasons import ConfigReason

PROBE_FUNCTION = "vllm_launch_tool_check"
PROBE_MAX_TOKENS = 256  # room for a reasoning model's short preamble before the call
EVIDENCE_CHARS = 200  # what state keeps of the offending content

# What each tool-call parser family writes, most specific first (qwen3_coder and glm45 also open with
# <tool_call>, so they come before hermes). Read from vLLM 0.32's parsers (vllm/tool_parsers/*_tool_parser.py).
MARKUP: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("qwen3_coder", re.compile(r"<tool_call>\s*<function=|<function=[\w.-]+>")),
    ("glm45", re.compile(r"<tool_call>[^<]*<arg_key>")),
    ("hermes", re.compile(r"<tool_call>\s*\{")),
    ("mistral", re.compile(r"\[TOOL_CALLS\]")),
    ("deepseek_v3", re.compile(r"<｜tool▁calls?▁begin｜>")),
    ("kimi_k2", re.compile(r"<\|tool_calls_section_begin\|>")),
    ("granite", re.compile(r"<\|tool_call\|>")),
    ("openai", re.compile(r"to=functions\.")),
    ("llama3_json", re.compile(r"<\|python_tag\|>|\{\s*\"name\"\s*:\s*\"[^\"]+\"\s*,\s*\"parameters\"\s*:")),
    ("pythonic", re.compile(r"^\s*\[\s*[A-Za-z_]\w*\(")),
)
THINKING = re.compile(r"</?think>")
# What vLLM's request path logs when a parser cannot read an answer (vllm/tool_parsers/*, 0.6 → 0.32): while
# serving, each one is an agent that got text where it needed a call. The log pump counts them.
PARSER_ERROR = re.compile(r"^(?:Error in extracting tool call from response|Error trying to handle streaming tool "
                          r"call|Failed to extract tool call spec)")


class AgentVerdict(enum.StrEnum):
    PASS = "pass"  # noqa: S105 - a verdict, not a password
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True, slots=True)
class AgentCheck:
    """The probe's verdict and its evidence, as state, `status` and the exporter show it."""

    verdict: AgentVerdict
    detail: str
    reason: ConfigReason | None = None  # a failure's reason, whose row in vllm/config_reasons.py holds the fix
    fix: str | None = None
    parser: str | None = None  # the parser whose markup the model wrote
    evidence: str | None = None  # the first bytes of the offending content or error

    @property
    def failed(self) -> bool:
        return self.verdict is AgentVerdict.FAIL

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": str(self.verdict), "detail": self.detail, "reason": self.reason, "fix": self.fix,
                "parser": self.parser, "evidence": self.evidence}


def request_body(served_model_name: str) -> dict[str, Any]:
    """One agent turn: a uniquely named tool, a user message that asks for it, auto tool choice, greedy."""
    return {
        "model": served_model_name,
        "messages": [{"role": "user", "content": f"Call the function {PROBE_FUNCTION} now, with no arguments."}],
        "tools": [{"type": "function", "function": {
            "name": PROBE_FUNCTION, "description": "Checks that tool calls work. Call it when you are asked to.",
            "parameters": {"type": "object", "properties": {}, "required": []}}}],
        "tool_choice": "auto", "temperature": 0, "max_tokens": PROBE_MAX_TOKENS,
    }


def markup_parser(text: str) -> str | None:
    """The tool-call parser whose family writes this markup, or None."""
    return next((name for name, pattern in MARKUP if pattern.search(text)), None)


def judge(status: int, body: bytes, *, tool_call_parser: str | None, reasoning_parser: str | None) -> AgentCheck:
    """The verdict on one answer to `request_body` (pure)."""
    text = body.decode(errors="replace")
    if status != 200:
        return _refused(status, text)
    try:
        message = json.loads(text)["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return AgentCheck(AgentVerdict.INCONCLUSIVE, f"the chat answer is not a chat completion: {text[:120]!r}")
    if not isinstance(message, Mapping):
        return AgentCheck(AgentVerdict.INCONCLUSIVE, "the chat answer has no message")
    written_content = message.get("content")
    content: str = written_content if isinstance(written_content, str) else ""
    written_calls = message.get("tool_calls")
    calls: list[Any] = written_calls if isinstance(written_calls, list) else []
    if reasoning_parser and THINKING.search(content):
        return AgentCheck(AgentVerdict.FAIL, f"the reasoning parser {reasoning_parser} left the thinking in content",
                          ConfigReason.REASONING_IN_CONTENT, "set vllm.reasoning-parser to the one for this model family "
                          "(docs/failures.md)", None, content[:EVIDENCE_CHARS])
    if calls:
        return _parsed(calls, tool_call_parser)
    written = markup_parser(content)
    if PROBE_FUNCTION in content or written is not None:
        named = f"set vllm.tool-call-parser: {written}" if written else "set vllm.tool-call-parser to the one for " \
                                                                       "this model family"
        detail = (f"the model wrote its tool call as text and the parser {tool_call_parser or '(none)'} did not "
                  f"read it" + (f"; that markup is {written}'s" if written else ""))
        return AgentCheck(AgentVerdict.FAIL, detail, ConfigReason.TOOL_CALLS_AS_TEXT, named, written,
                          content[:EVIDENCE_CHARS])
    if not content.strip():
        return AgentCheck(AgentVerdict.INCONCLUSIVE, "the model answered nothing to a request for a tool call")
    return AgentCheck(AgentVerdict.INCONCLUSIVE, "the model answered in prose, with no tool call; a model may do "
                      "that, so READY, but an agent may not work", evidence=content[:EVIDENCE_CHARS])


def _parsed(calls: list[Any], parser: str | None) -> AgentCheck:
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        arguments = function.get("arguments") if isinstance(function, Mapping) else None
        try:
            json.loads(arguments if isinstance(arguments, str) else "")
        except ValueError:
            return AgentCheck(AgentVerdict.FAIL, f"a parsed tool call's arguments are not JSON ({parser})",
                              ConfigReason.TOOL_CALL_ARGUMENTS, "set vllm.tool-call-parser to the one for this model family",
                              parser, str(arguments)[:EVIDENCE_CHARS])
    name = calls[0].get("function", {}).get("name") if isinstance(calls[0], Mapping) else None
    return AgentCheck(AgentVerdict.PASS, f"tool call parsed ({parser or 'vLLM'}): {name}", parser=parser)


def _refused(status: int, text: str) -> AgentCheck:
    try:
        error = json.loads(text).get("error")
        message = str(error.get("message") if isinstance(error, Mapping) else error or text)
    except (ValueError, AttributeError):
        message = text
    evidence = message[:EVIDENCE_CHARS]
    if "auto" in message and "enable-auto-tool-choice" in message:
        return AgentCheck(AgentVerdict.FAIL, f"vLLM refuses tool_choice auto ({status}): every agent request fails",
                          ConfigReason.AUTO_TOOL_CHOICE_OFF, "set vllm.enable-auto-tool-choice: true and vllm.tool-call-parser "
                          "(docs/failures.md)", evidence=evidence)
    if "chat template" in message.lower():
        return AgentCheck(AgentVerdict.FAIL, f"vLLM has no usable chat template for this model ({status})",
                          ConfigReason.CHAT_TEMPLATE, "set vllm.chat-template to a template file that renders tools",
                          evidence=evidence)
    return AgentCheck(AgentVerdict.INCONCLUSIVE, f"the chat request answered {status}", evidence=evidence)


def wanted(setting: str, flags: Mapping[str, object]) -> bool:
    """launcher.agent_probe: auto is on when the profile enables auto tool choice."""
    if setting == "off":
        return False
    return setting == "required" or flags.get("enable-auto-tool-choice") not in (None, False)


def probe(base_url: str, served_model_name: str, api_key: str | None, *, timeout: float,
          tool_call_parser: str | None, reasoning_parser: str | None,
          verify: Verify | None = None, ca_file: str | None = None) -> AgentCheck:
    """Send the agent turn and judge the answer. A server that is not ours raises NotOurServer (nothing sent)."""
    try:
        status, body = api.request(f"{base_url}/v1/chat/completions", timeout, api_key=api_key,
                                   body=request_body(served_model_name), verify=verify, ca_file=ca_file)
    except api.ERRORS as exc:
        return AgentCheck(AgentVerdict.INCONCLUSIVE, f"the chat request got no answer: {exc}")
    return judge(status, body, tool_call_parser=tool_call_parser, reasoning_parser=reasoning_parser)
