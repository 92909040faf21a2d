"""The stream reader on vLLM 0.32's chunk shapes for tool calls: a parsed call arrives as `delta.tool_calls`
pieces joined per index, a call the parser could not read stays in content and is named by its markup.

The chunks are copied from what vLLM 0.32 serialises (ChatCompletionStreamResponse.model_dump_json(
exclude_unset=True) in vllm/entrypoints/openai/chat_completion/serving.py, DeltaToolCall and
DeltaFunctionCall in vllm/entrypoints/generate/base/protocol.py; the hermes parser's deltas in
vllm/tool_parsers/hermes_tool_parser.py: the name first with id and type, then argument pieces; content
set to null beside them)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from launcher.bench.stream import Answer, BadReply, ToolCall, read

ID = "chatcmpl-tool-9f0c4c2b7a2e4a31b1d0c9a8e7f6d5c4"
HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "qwen"}
ROLE = {**HEAD, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                             "finish_reason": None}]}


def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {**HEAD, "choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": finish,
                                 **({"stop_reason": None} if finish else {})}]}


def usage(completion: int) -> dict[str, Any]:
    return {**HEAD, "choices": [], "usage": {"prompt_tokens": 4000, "total_tokens": 4000 + completion,
                                             "completion_tokens": completion}}


# One parsed call of read_file, as the hermes parser streams it.
PARSED = [ROLE,
          delta({"tool_calls": [{"id": ID, "type": "function", "index": 0, "function": {"name": "read_file"}}]}),
          delta({"content": None, "tool_calls": [{"index": 0, "function": {"arguments": '{"path": "'}}]}),
          delta({"content": None, "tool_calls": [{"index": 0, "function": {"arguments": 'src/main.py'}}]}),
          delta({"content": None, "tool_calls": [{"index": 0, "function": {"arguments": '"}'}}]}),
          delta({}, "tool_calls"),
          usage(9)]


class Response:
    """What http.client's response gives the reader: the SSE bytes, a few at a time."""

    def __init__(self, chunks: list[object], piece: int = 37) -> None:
        data = b"".join(b"data: " + (c.encode() if isinstance(c, str) else json.dumps(c).encode()) + b"\n\n"
                        for c in [*chunks, "[DONE]"])
        self.pieces = [data[i:i + piece] for i in range(0, len(data), piece)]

    def read_some(self, _: object) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""


def answer_of(chunks: list[object], max_tokens: int = 64) -> tuple[Any, Answer]:
    response = Response(chunks)
    return read(response, response.read_some, 0.0, max_tokens)  # type: ignore[arg-type]


def test_a_parsed_call_is_joined_from_its_pieces() -> None:
    result, answer = answer_of(PARSED)
    assert result.ok and result.tool_calls == 1 and result.calls_as_text is None
    assert answer.calls == (ToolCall(ID, "read_file", '{"path": "src/main.py"}'),)
    assert answer.text == ""
    assert (result.input_tokens, result.output_tokens) == (4000, 9)
    assert len(result.itl_s) == 5, "tool-call chunks are token chunks: TTFT at the role, an ITL for each later one"


def test_parallel_calls_are_kept_apart_by_index() -> None:
    chunks = [ROLE,
              delta({"tool_calls": [{"id": "chatcmpl-tool-a", "type": "function", "index": 0,
                                     "function": {"name": "glob"}}]}),
              delta({"content": None, "tool_calls": [{"index": 0, "function": {"arguments": '{"pattern": "**/*.py"}'}}]}),
              delta({"tool_calls": [{"id": "chatcmpl-tool-b", "type": "function", "index": 1,
                                     "function": {"name": "grep"}}]}),
              delta({"content": None, "tool_calls": [{"index": 1, "function": {"arguments": '{"pattern": "TODO"}'}}]}),
              delta({}, "tool_calls"), usage(20)]
    result, answer = answer_of(chunks)
    assert result.tool_calls == 2
    assert [(c.id, c.name, c.arguments) for c in answer.calls] == [
        ("chatcmpl-tool-a", "glob", '{"pattern": "**/*.py"}'), ("chatcmpl-tool-b", "grep", '{"pattern": "TODO"}')]


def test_the_whole_arguments_in_the_finish_chunk_count_too() -> None:
    """vLLM sends what the parser had not streamed yet with the finish chunk."""
    chunks = [ROLE,
              delta({"tool_calls": [{"id": ID, "type": "function", "index": 0, "function": {"name": "git_diff"}}]}),
              delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"staged": true}'}}]}, "tool_calls"),
              usage(6)]
    assert answer_of(chunks)[1].calls == (ToolCall(ID, "git_diff", '{"staged": true}'),)


@pytest.mark.parametrize(("text", "family"), [
    ('<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>', "hermes"),
    ("<tool_call>\n<function=read_file>\n<parameter=path>\na.py\n</parameter>\n</function>\n</tool_call>",
     "qwen3_coder"),
])
def test_a_call_left_in_content_is_named_by_its_markup(text: str, family: str) -> None:
    pieces = [text[i:i + 9] for i in range(0, len(text), 9)]
    result, answer = answer_of([ROLE, *(delta({"content": p}) for p in pieces), delta({}, "stop"), usage(30)])
    assert result.ok and result.tool_calls == 0 and result.calls_as_text == family
    assert answer.text == text and answer.calls == ()


def test_prose_is_neither() -> None:
    result, _ = answer_of([ROLE, delta({"content": "I will read the file first."}), delta({}, "stop"), usage(8)])
    assert (result.tool_calls, result.calls_as_text) == (0, None)


@pytest.mark.parametrize("calls", [
    "read_file", [7], [{"function": {"name": "x"}}], [{"index": "0", "function": {"name": "x"}}],
    [{"index": 0, "function": "read_file"}], [{"index": 0, "function": {"arguments": 7}}],
    [{"index": 0, "type": "tool", "function": {"name": "x"}}], [{"index": 0, "id": 5}],
])
def test_tool_calls_of_the_wrong_shape_fail_the_request(calls: object) -> None:
    with pytest.raises(BadReply) as bad:
        answer_of([ROLE, delta({"tool_calls": calls}), usage(3)])
    assert bad.value.kind == "bad_stream"


def test_more_calls_than_an_answer_can_hold_fail_the_request() -> None:
    many = [{"index": i, "id": f"c{i}", "type": "function", "function": {"name": "glob"}} for i in range(200)]
    with pytest.raises(BadReply):
        answer_of([ROLE, delta({"tool_calls": many}), usage(3)])


def test_the_assistant_message_an_agent_appends() -> None:
    assert Answer("hello").message() == {"role": "assistant", "content": "hello"}
    call = ToolCall(ID, "read_file", '{"path": "a.py"}')
    assert Answer("", (call,)).message() == {"role": "assistant", "content": None, "tool_calls": [
        {"id": ID, "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]}
