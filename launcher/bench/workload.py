"""The agent workload: N users, each a multi-turn chat that starts from one shared system prompt and resends
its whole history every turn, growing by `turn_tokens` of new text up to `context`. Every request carries a
coding agent's tool definitions (launcher/bench/agent_tools.py; `tools: none` leaves them out), and an answer
that was a parsed tool call is followed by its result (a `tool` message) where a user turn would come.

Texts are seeded word sequences sized with the server's own tokenizer, so a run is reproducible and every
user's history differs after the shared prefix (what prefix caching can reuse is exactly that prefix and
the user's own earlier turns).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Plain words (a few tokens each in any tokenizer), so prompts are ordinary text.
_WORD_TEXT = """
time person year way day thing man world life hand part child eye woman place work week case point government
company number group problem fact water room mother area money story month lot right study book job word
business issue side kind head house service friend father power hour game line end member law car city
community name president team minute idea kid body information back parent face others level office door
health art war history party result change morning reason research girl guy moment air teacher force
education foot boy age policy process music market sense nation plan college interest death experience effect
class control care field development role effort rate heart drug show leader light voice wife police mind
price report decision son view relationship town road arm difference value building action model season
society tax director position player record paper space ground form event official matter center couple site
project activity star table need court oil situation cost industry figure street image phone data picture
"""
WORDS = tuple(_WORD_TEXT.split())
NO_OUTPUT = "(no output)"  # the result of a call beyond the first in one answer (the first carries the turn's text)


@dataclass(frozen=True, slots=True)
class Settings:
    users: int = 4
    turns: int = 4
    context: int | None = None  # None: the server's max_model_len
    shared_prefix: int = 512
    turn_tokens: int = 128
    max_tokens: int = 64
    duration_s: float | None = None
    warmup: int = 1
    seed: int = 0
    ignore_eos: bool = False
    temperature: float = 0.0
    conversation_turns: int | None = None  # a conversation starts over after this many turns (None: at --context)
    tools: str = "agent"  # --tools: agent (launcher/bench/agent_tools.py's set, in every request) or none


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


class TextMaker:
    """Seeded text of exactly N tokens as the server counts them.

    Tokenizers split text into words before merging (byte-level BPE, SentencePiece's "▁word" pieces), so a
    text of space-separated words costs the sum of its words' costs: each vocabulary word is counted once
    (one /tokenize each), texts are built to the exact sum, and each text is checked with one more call
    (a miss falls back to trimming by bisection)."""

    def __init__(self, count_tokens: Callable[[str], int]) -> None:
        self.count_tokens = count_tokens
        self._costs: dict[str, int] | None = None

    def costs(self) -> dict[str, int]:
        if self._costs is None:
            base = self.count_tokens("time")
            self._costs = {w: max(1, self.count_tokens("time " + w) - base) for w in WORDS}
        return self._costs

    def make(self, tokens: int, rng: random.Random) -> str:
        if tokens <= 0:
            return ""
        costs = self.costs()
        cheapest = min(costs.values())
        singles = [w for w, c in costs.items() if c == cheapest]
        chosen: list[str] = []
        left = tokens - self.count_tokens("")  # a tokenizer may add a prefix of its own
        while left > 0:
            word = rng.choice(WORDS)
            if costs[word] <= left:
                chosen.append(word)
                left -= costs[word]
            elif cheapest <= left:
                chosen.append(rng.choice(singles))
                left -= cheapest
            else:
                break
        text = " ".join(chosen)
        if self.count_tokens(text) == tokens:
            return text
        return _trim(self.count_tokens, chosen + words(rng, 8).split(" "), tokens)


def _trim(count_tokens: Callable[[str], int], pool: list[str], tokens: int) -> str:
    """The most words of `pool` whose text stays within `tokens` (bisection), padded with short words."""
    low, high = 0, len(pool)
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(" ".join(pool[:middle])) <= tokens:
            low = middle
        else:
            high = middle - 1
    text = " ".join(pool[:low])
    for filler in ("a", "the", "and", "of", "to") * 8:
        if count_tokens(f"{text} {filler}") > tokens:
            continue
        text = f"{text} {filler}"
    return text


def turns_that_fit(first_input: int, settings: Settings, overhead: int, context: int) -> int:
    """How many turns one conversation holds before its history reaches --context."""
    turns, size = 0, first_input
    while size + settings.max_tokens <= context and turns < 10_000:
        turns += 1
        size += settings.max_tokens + settings.turn_tokens + overhead
    return turns


@dataclass
class Conversation:
    """One user's chat so far; `next_input_tokens` estimates the next prompt from the server's own counts."""

    user: int
    messages: list[dict[str, Any]]
    turns_done: int = 0
    last_prompt_tokens: int = 0
    last_output_tokens: int = 0

    def add_turn(self, text: str) -> int:
        """The next turn's new text, as an agent sends it: after an answer that was a parsed tool call, the
        call's result (a `tool` message for each call, the first carrying `text`); else a user turn. Returns
        how many messages were appended (a failed request takes them back)."""
        calls = self.messages[-1].get("tool_calls") if self.messages else None
        if not calls:
            self.messages.append({"role": "user", "content": text})
            return 1
        for number, call in enumerate(calls):
            self.messages.append({"role": "tool", "tool_call_id": call["id"],
                                  "content": text if number == 0 else NO_OUTPUT})
        return len(calls)

    def next_input_tokens(self, turn_tokens: int, overhead: int) -> int:
        if not self.turns_done:
            return 0
        return self.last_prompt_tokens + self.last_output_tokens + turn_tokens + overhead


def user_rng(seed: int, user: int, restart: int = 0) -> random.Random:
    return random.Random(f"vllm-launch-bench:{seed}:{user}:{restart}")  # noqa: S311 - reproducible text, no secret
