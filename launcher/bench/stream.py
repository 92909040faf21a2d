"""A streamed chat answer read as it arrives: server-sent events, timed as `vllm bench serve` times them, and the
answer an agent would see: its text, and the tool calls vLLM's parser read out of it.

vLLM 0.32 streams a parsed tool call as `delta.tool_calls` (vllm/entrypoints/generate/base/protocol.py
DeltaToolCall, serialised with exclude_unset): first `{"index": i, "id": "chatcmpl-tool-…", "type":
"function", "function": {"name": …}}`, then `{"index": i, "function": {"arguments": <a piece>}}` until the
arguments are whole, and the finish chunk says `tool_calls`. The pieces of each index are joined. A call the
parser did not read stays in `content`, in its family's markup (`<tool_call>…`): that answer counts as a call
left as text (launcher/run/agentprobe.py's `markup_parser` names the family).
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher.bench.stats import RequestResult
from launcher.run.agentprobe import markup_parser

MAX_STREAM = 8 * 2**20  # the bytes one streamed answer may send, at least (a token's chunk is ~250 B)
STREAM_BYTES_PER_TOKEN = 4096  # and per output token asked for, beyond that
MAX_COUNT = 10**9  # no tokenizer count or usage field is larger
MAX_CALLS = 128  # no answer of max_tokens tokens names more tool calls (each takes tokens); more is a liar


class BadReply(Exception):
    """A streamed answer that breaks the protocol; `kind` is the failed request's error."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def count(value: object) -> int | None:
    """A token count as a server may send it: an int from 0 to MAX_COUNT (a bool is no count); else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT else None


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Answer:
    """What the model answered: its text (`content`) and the tool calls vLLM parsed."""

    text: str = ""
    calls: tuple[ToolCall, ...] = ()

    def message(self) -> dict[str, Any]:
        """The assistant message an agent appends to its history: with `tool_calls` when there were any."""
        if not self.calls:
            return {"role": "assistant", "content": self.text}
        return {"role": "assistant", "content": self.text or None, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in self.calls]}


class _Calls:
    """The `delta.tool_calls` pieces of one answer, joined per index."""

    def __init__(self) -> None:
        self.parts: dict[int, dict[str, Any]] = {}

    def add(self, deltas: object) -> None:
        if not isinstance(deltas, list):
            raise BadReply("bad_stream")
        for delta in deltas:
            index = count(delta.get("index")) if isinstance(delta, dict) else None
            if not isinstance(delta, dict) or index is None:
                raise BadReply("bad_stream")
            function = delta.get("function") or {}
            if not isinstance(function, dict) or delta.get("type") not in (None, "function"):
                raise BadReply("bad_stream")
            call_id, name, arguments = delta.get("id"), function.get("name"), function.get("arguments")
            if not all(isinstance(v, str | None) for v in (call_id, name, arguments)):
                raise BadReply("bad_stream")
            if index not in self.parts and len(self.parts) >= MAX_CALLS:
                raise BadReply("bad_stream")
            part = self.parts.setdefault(index, {"id": None, "name": None, "arguments": []})
            part["id"] = part["id"] or call_id
            part["name"] = part["name"] or name
            if arguments:
                part["arguments"].append(arguments)

    def calls(self) -> tuple[ToolCall, ...]:
        """The calls that name a function (vLLM sends the name first), in index order."""
        return tuple(ToolCall(p["id"] or f"call_{i}", p["name"], "".join(p["arguments"]))
                     for i, p in sorted(self.parts.items()) if p["name"])


def read(response: http.client.HTTPResponse, read_some: Callable[[http.client.HTTPResponse], bytes], start: float,
         max_tokens: int) -> tuple[RequestResult, Answer]:
    """Server-sent events as they arrive: each read takes what the socket holds (never waiting for a full
    buffer), and every message in it is stamped with the time it arrived. At most MAX_STREAM bytes (more
    for a long answer) are read, and at most max_tokens chunks of choices beyond the role and the finish
    chunk: each later chunk carries at least one token, so a stream with more lies (`too_many_tokens`)."""
    budget = max(MAX_STREAM, max_tokens * STREAM_BYTES_PER_TOKEN)
    most_chunks = max_tokens + 2
    chunks = 0
    received = 0
    first = False
    ttft = 0.0
    last = start
    gaps: list[float] = []
    text: list[str] = []
    calls = _Calls()
    usage: tuple[int, int, int | None] | None = None
    pending = b""
    finished = False
    while not finished and (data := read_some(response)):
        now = time.perf_counter()
        received += len(data)
        if received > budget:
            raise BadReply("too_large")
        lines = (pending + data).split(b"\n")
        pending = lines.pop()
        for line in lines:
            message = line.decode("utf-8", errors="replace").strip()
            if not message.startswith("data:"):
                continue  # blank separators, SSE comments (": ping")
            chunk = message.removeprefix("data:").strip()
            if chunk == "[DONE]":
                finished = True
                break
            content, chunk_usage = event(json.loads(chunk), max_tokens, calls)
            if content is not None:
                chunks += 1
                if chunks > most_chunks:
                    raise BadReply("too_many_tokens")
                if not first:
                    first, ttft = True, now - start
                else:
                    gaps.append(now - last)
                text.append(content)
                last = now
            usage = chunk_usage or usage
    if not first:
        return RequestResult(False, error="no_tokens"), Answer()
    if usage is None:
        return RequestResult(False, error="no_usage"), Answer()  # asked for with include_usage: tokens/s needs it
    input_tokens, output_tokens, cached = usage
    answer = Answer("".join(text), calls.calls())
    as_text = None if answer.calls else markup_parser(answer.text)
    return RequestResult(True, ttft_s=ttft, latency_s=last - start, itl_s=tuple(gaps), input_tokens=input_tokens,
                         output_tokens=output_tokens, cached_tokens=cached, tool_calls=len(answer.calls),
                         calls_as_text=as_text), answer


def event(chunk: object, max_tokens: int, calls: _Calls | None = None
          ) -> tuple[str | None, tuple[int, int, int | None] | None]:
    """(the content of a chunk with choices, "" for one that carries only tool calls or a role, else None; the
    usage it carries, else None), checked: a chunk of the wrong shape is `bad_stream`, an impossible usage
    `bad_usage`. Its `delta.tool_calls` go into `calls`."""
    if not isinstance(chunk, dict):
        raise BadReply("bad_stream")
    content: str | None = None
    if choices := chunk.get("choices"):
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise BadReply("bad_stream")
        delta = choices[0].get("delta")
        if not isinstance(delta, dict | None) or not isinstance(piece := (delta or {}).get("content"), str | None):
            raise BadReply("bad_stream")
        if (delta or {}).get("tool_calls") is not None:
            (calls or _Calls()).add((delta or {})["tool_calls"])
        content = piece or ""
    usage = chunk.get("usage")
    if usage is None:
        return content, None
    if not isinstance(usage, dict):
        raise BadReply("bad_stream")
    prompt, completion = count(usage.get("prompt_tokens")), count(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if prompt is None or completion is None or completion > max_tokens:
        raise BadReply("bad_usage")
    if cached is not None and (count(cached) is None or cached > prompt):
        raise BadReply("bad_usage")
    return content, (prompt, completion, cached)
