"""The fake's tokenizer: one token per whitespace-separated word, one per ChatML special token.

Deterministic and additive (a text of space-separated words costs the sum of its words), so the
benchmark's TextMaker sizes texts exactly with /tokenize, and a chat's prompt_tokens in its usage is
what /tokenize says of the same messages.
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

SPECIAL = r"<\|[^<>|\s]*\|>"  # <|im_start|>, <|im_end|>: one token each, as in Qwen's vocabulary
TOKEN = re.compile(rf"{SPECIAL}|(?:(?!{SPECIAL})\S)+")
VOCAB = 151_936  # Qwen3's vocabulary size: ids look like a real tokenizer's


def chat_prompt(messages: object, add_generation_prompt: bool = True, tools: object = None) -> str:
    """The prompt a chat template makes of the messages (ChatML, as the logs' Qwen models show). Tools come
    first as a system block of their JSON, one line each, between <tools> tags (Qwen's templates render them
    in the system turn); an assistant's tool calls follow its content as <tool_call> JSON, and a `tool`
    result is a user turn in <tool_response> tags, as Qwen's templates write them."""
    parts = []
    if isinstance(tools, list) and tools:
        listed = "\n".join(json.dumps(tool) for tool in tools)
        parts.append(f"<|im_start|>system\n# Tools\n<tools>\n{listed}\n</tools><|im_end|>\n")
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        role = message.get("role", "user")
        if role == "tool":
            role, text = "user", f"<tool_response>\n{text}\n</tool_response>"
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                text += (f'\n<tool_call>\n{{"name": "{function.get("name")}", "arguments": '
                         f"{function.get('arguments')}}}\n</tool_call>")
        parts.append(f"<|im_start|>{role}\n{text}<|im_end|>\n")
    return "".join(parts) + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def tokens(text: str) -> list[str]:
    """`<|im_start|>user\\nhello world<|im_end|>` → ["<|im_start|>", "user", "hello", "world", "<|im_end|>"]."""
    return TOKEN.findall(text)


def token_ids(text: str) -> list[int]:
    return [zlib.crc32(token.encode()) % VOCAB for token in tokens(text)]


def prompt_text(body: dict[str, Any]) -> str:
    """What a /tokenize or chat body asks to be counted: its messages through the template, else its prompt."""
    if "messages" in body:
        return chat_prompt(body.get("messages"), body.get("add_generation_prompt", True) is not False,
                           body.get("tools"))
    prompt = body.get("prompt", "")
    return prompt if isinstance(prompt, str) else " ".join(map(str, prompt)) if isinstance(prompt, list) else ""


def tokenize_answer(body: dict[str, Any], max_model_len: int) -> dict[str, Any]:
    """vLLM 0.32's TokenizeResponse: {"count", "max_model_len", "tokens", "token_strs"}."""
    ids = token_ids(prompt_text(body))
    return {"count": len(ids), "max_model_len": max_model_len, "tokens": ids, "token_strs": None}
