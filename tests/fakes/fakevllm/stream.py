"""A streamed chat completion as vLLM 0.32 sends it (`"stream": true`): server-sent events in the exact
shapes of vllm/entrypoints/openai/chat_completion/serving.py.

After the prefill: a chunk with the assistant's role and empty content, then one chunk per output token
(the last with finish_reason "length": the fake always generates max_tokens, as with ignore_eos), with
`stream_options.include_usage` a chunk without choices carrying the usage, then `data: [DONE]`. An engine
that dies mid-stream ends it as vLLM does: an error chunk (EngineDeadError: InternalServerError, 500),
then `data: [DONE]`.
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


class ChatStream:
    """The events of one streamed chat, produced as the scheduler lets the request run."""

    def __init__(self, scheduler: Scheduler, model: str, body: dict[str, Any]) -> None:
        self.scheduler = scheduler
        self.model = model
        self.prompt_tokens = len(tokens(chat_prompt(body.get("messages"))))
        self.max_tokens = max_tokens(body)
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

    def died(self) -> Iterator[str]:
        yield event({"error": {"message": ENGINE_DEAD, "type": "InternalServerError", "param": None, "code": 500}})
        yield "data: [DONE]\n\n"
