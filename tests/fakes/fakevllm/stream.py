"""A streamed chat completion as vLLM 0.32 sends it (`"stream": true`): server-sent events in the exact
shapes of vllm/entrypoints/openai/chat_completion/serving.py.

After the prefill: a chunk with the assistant's role and empty content, then one chunk per output token
(the last with finish_reason "length": the fake always generates max_tokens, as with ignore_eos), with
`stream_options.include_usage` a chunk without choices carrying the usage, then `data: [DONE]`. An engine
that dies mid-stream ends it as vLLM does: an error chunk (EngineDeadError: InternalServerError, 500),
then `data: [DONE]`.

A chat with `tools` (and tool_choice not "none") is answered as the scenario's `tool_reply` says, still one
token per step and max_tokens tokens in the usage: `parsed` streams vLLM 0.32's `delta.tool_calls` pieces (the
call's id, type and function name, then its arguments in pieces, content null beside them; a token whose piece
is empty sends no chunk, as vLLM sends none for a token the parser holds back) and finishes `tool_calls`;
`hermes_text`, `qwen3_coder_text` and `prose` stream that text as content and finish `stop`.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from fakevllm.scheduler import Pause, Scheduler
from fakevllm.tokens import chat_prompt, tokens

ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."
WORD = "ok"  # every output token is this word (one token to the fake tokenizer)


def max_tokens(body: dict[str, Any], default: int = 16) -> int:
    """max_completion_tokens (what OpenAI clients send now), else max_tokens, else `default`."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    return default


def event(payload: object) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def tool_name(body: dict[str, Any]) -> str:
    """The first tool's name: the one the fake's model calls."""
    tools = body.get("tools")
    first = tools[0] if isinstance(tools, list) and tools and isinstance(tools[0], dict) else {}
    function = first.get("function")
    return str(function.get("name", "tool")) if isinstance(function, dict) else "tool"


def tool_arguments(body: dict[str, Any]) -> str:
    """The call's arguments: "x" for each required parameter of the first tool, as a JSON object."""
    tools = body.get("tools")
    function = tools[0].get("function") if isinstance(tools, list) and tools and isinstance(tools[0], dict) else None
    parameters = function.get("parameters") if isinstance(function, dict) else None
    required = parameters.get("required") if isinstance(parameters, dict) else None
    return json.dumps({str(name): "x" for name in required} if isinstance(required, list) else {})


def tool_text(reply: str, name: str, arguments: str = "{}") -> str:
    """What a model wrote in content for `reply`: a call in hermes' or Qwen3-Coder's markup, left there by a
    parser that cannot read it, or prose."""
    if reply == "hermes_text":
        return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'
    if reply == "qwen3_coder_text":
        return f"<tool_call>\n<function={name}>\n</function>\n</tool_call>"
    return "I can help with that."


def split(text: str, parts: int) -> list[str]:
    """`text` in `parts` consecutive pieces (some empty when it is short)."""
    size = -(-len(text) // max(parts, 1))
    return [text[i * size:(i + 1) * size] for i in range(parts)]


class ChatStream:
    """The events of one streamed chat, produced as the scheduler lets the request run. `tool_reply`: the
    scenario's, for a chat whose tools the model may call (None: the "ok" tokens)."""

    def __init__(self, scheduler: Scheduler, model: str, body: dict[str, Any], tool_reply: str | None = None) -> None:
        self.scheduler = scheduler
        self.model = model
        self.prompt_tokens = len(tokens(chat_prompt(body.get("messages"), tools=body.get("tools"))))
        self.max_tokens = max_tokens(body)
        self.deltas = self.tool_deltas(tool_reply, body) if tool_reply is not None else None
        self.finish = "tool_calls" if tool_reply == "parsed" else "stop"  # with tools
        options = body.get("stream_options")
        self.include_usage = isinstance(options, dict) and options.get("include_usage") is True
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        return event({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                      "model": self.model, "choices": choices, **extra})

    def events(self, pause: Pause, stop: threading.Event | None = None) -> Iterator[str]:
        number = self.scheduler.admit(stop)
        if number is None:
            yield from self.died()
            return
        try:
            if not self.scheduler.prefill(self.prompt_tokens, pause):
                yield from self.died()
                return
            yield self.chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                               "finish_reason": None}], prompt_token_ids=None, prompt_text=None)
            for n in range(self.max_tokens):
                if n and pause(self.scheduler.token_time()):
                    yield from self.died()
                    return
                self.scheduler.count_token()
                if self.deltas is not None:
                    yield from self.tool_chunk(n)
                    continue
                text = WORD if n == 0 else f" {WORD}"
                if n < self.max_tokens - 1:
                    yield self.chunk([{"index": 0, "delta": {"content": text}, "logprobs": None,
                                       "finish_reason": None}])
                else:
                    yield self.chunk([{"index": 0, "delta": {"content": text}, "logprobs": None,
                                       "finish_reason": "length", "stop_reason": None, "token_ids": None}])
        finally:
            self.scheduler.release(number)
        if self.include_usage:
            yield self.chunk([], usage={"prompt_tokens": self.prompt_tokens,
                                        "total_tokens": self.prompt_tokens + self.max_tokens,
                                        "completion_tokens": self.max_tokens})
        yield "data: [DONE]\n\n"

    def tool_deltas(self, reply: str, body: dict[str, Any]) -> list[dict[str, Any] | None]:
        """One delta per output token (None: a token the parser turns into no chunk, as vLLM skips it).
        parsed: vLLM 0.32's DeltaToolCall pieces as the hermes parser streams them, the id, type and name first,
        then the arguments in pieces; otherwise the markup or prose as content."""
        name, arguments = tool_name(body), tool_arguments(body)
        if reply != "parsed":
            return [{"content": piece} if piece else None
                    for piece in split(tool_text(reply, name, arguments), self.max_tokens)]
        head = {"id": f"chatcmpl-tool-{uuid.uuid4().hex}", "type": "function", "index": 0, "function": {"name": name}}
        if self.max_tokens == 1:
            return [{"tool_calls": [head, {"index": 0, "function": {"arguments": arguments}}]}]
        pieces = split(arguments, self.max_tokens - 1)
        return [{"tool_calls": [head]}, *({"content": None, "tool_calls": [
            {"index": 0, "function": {"arguments": piece}}]} if piece else None for piece in pieces)]

    def tool_chunk(self, n: int) -> Iterator[str]:
        assert self.deltas is not None
        delta = self.deltas[n]
        if n == self.max_tokens - 1:  # the finish chunk: tool_calls when the parser read a call
            yield self.chunk([{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": self.finish,
                               "stop_reason": None, "token_ids": None}])
        elif delta is not None:
            yield self.chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])

    def died(self) -> Iterator[str]:
        yield event({"error": {"message": ENGINE_DEAD, "type": "InternalServerError", "param": None, "code": 500}})
        yield "data: [DONE]\n\n"
