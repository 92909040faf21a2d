"""Drive the workload: size the prompts, warm up, then every user's conversation in its own thread, timed.

Ctrl-C stops the run and keeps what was measured: the users stop after their request in flight (which is
not counted), and the duration ends at the interrupt. With --duration a request in flight at the end may
finish within DRAIN_S; a stream still going then is cut and counted as failed (`deadline`). A user thread
that dies of an error voids the run (RunFailed): its numbers would be missing, not zero. A server that
refuses the tools' `tool_choice: auto` ends the run at its first answer (ToolsRefused, with the fix).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher.bench import scrape
from launcher.bench.agent_tools import tools_for
from launcher.bench.client import TOOLS_REFUSED, Server, ServerError
from launcher.bench.stats import RequestResult
from launcher.bench.workload import Conversation, Settings, TextMaker, turns_that_fit, user_rng, words
from launcher.errors import Outcome

Progress = Callable[[list[RequestResult]], None]


@dataclass(frozen=True, slots=True)
class Prepared:
    model: str
    context: int
    system: str
    first_input_tokens: int  # the first turn's prompt (system + one user turn), as the server counts it
    turn_overhead: int  # template tokens one more user/assistant exchange adds
    turns_per_conversation: int
    texts: tuple[tuple[str, ...], ...]  # per user: the user turns, made before the clock starts
    tools: tuple[dict[str, Any], ...] | None = None  # what every request's `tools` carries (None: no tools)

    def opening(self) -> list[dict[str, Any]]:
        return [{"role": "system", "content": self.system}] if self.system else []


@dataclass
class Run:
    results: list[RequestResult]
    counters: scrape.ServerCounters
    duration_s: float
    interrupted: bool


# --duration: each user's pool holds this many conversations' worth of turns (then it cycles, and a repeated
# conversation can hit the prefix cache); --turns: exactly one text per turn, never repeated.
POOL_CONVERSATIONS = 4
DRAIN_S = 60.0  # --duration: how long past the end a request in flight may still stream


class RunFailed(ServerError):
    """A user thread died of an error: the run measured less than it says, so it reports nothing."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Outcome.FAILED)


class ToolsRefused(ServerError):
    """The server refuses `tool_choice: auto` (no --enable-auto-tool-choice): every agent request would fail."""

    def __init__(self) -> None:
        super().__init__("the server refuses tool_choice auto (vLLM: --enable-auto-tool-choice and "
                         "--tool-call-parser are not set), so every request of a coding agent fails: serve with "
                         "vllm.enable-auto-tool-choice: true and vllm.tool-call-parser (docs/agent-parsers.md), or "
                         "pass --tools none", Outcome.CONFIG)


def tool_tokens(server: Server, model: str, settings: Settings) -> int:
    """What the tools add to every prompt, as the server's template renders them (0 with --tools none, and for
    a template that ignores tools)."""
    tools = tools_for(settings.tools)
    if tools is None:
        return 0
    one = [{"role": "user", "content": "time"}]
    return max(0, server.count_tokens(model, messages=one, tools=tools) - server.count_tokens(model, messages=one))


def prepare(server: Server, model: str, settings: Settings, context: int, maker: TextMaker | None = None) -> Prepared:
    """Every prompt of the run, sized with the server's tokenizer before the clock starts (no /tokenize in
    the measured part). A `maker` from an earlier run against the same server keeps its word costs."""
    maker = maker or TextMaker(lambda text: server.count_tokens(model, text=text))
    tools = tools_for(settings.tools)
    system = maker.make(settings.shared_prefix, user_rng(settings.seed, -1))
    sample = maker.make(settings.turn_tokens, user_rng(settings.seed, -2))
    opening: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    one = [*opening, {"role": "user", "content": sample}]
    first = server.count_tokens(model, messages=one, tools=tools)  # the tools as the template renders them
    reply = maker.make(8, user_rng(settings.seed, -3))
    two = [*one, {"role": "assistant", "content": reply}, {"role": "user", "content": sample}]
    overhead = max(0, server.count_tokens(model, messages=two, tools=tools) - first - 8 - settings.turn_tokens)
    fit = turns_that_fit(first, settings, overhead, context)
    per_user = max(fit * POOL_CONVERSATIONS, 32) if settings.duration_s else settings.turns
    texts = tuple(tuple(maker.make(settings.turn_tokens, rng) for _ in range(max(per_user, 1)))
                  for rng in (user_rng(settings.seed, u) for u in range(settings.users)))
    return Prepared(model, context, system, first, overhead, fit, texts, None if tools is None else tuple(tools))


def run(server: Server, prepared: Prepared, settings: Settings, *, on_result: Progress = lambda _: None,
        interrupt: threading.Event | None = None) -> Run:
    stop = interrupt or threading.Event()
    for index in range(settings.warmup):  # not counted: the first requests of a fresh server compile and warm
        text = words(user_rng(settings.seed, 10_000 + index), max(1, settings.turn_tokens // 2))
        warm, _ = server.chat(prepared.model, [{"role": "user", "content": text}], max_tokens=settings.max_tokens,
                              ignore_eos=settings.ignore_eos, temperature=settings.temperature, tools=prepared.tools)
        if warm.error == TOOLS_REFUSED:
            raise ToolsRefused
    results: list[RequestResult] = []
    lock = threading.Lock()
    sampler = scrape.Sampler(server.metrics_text)
    sampler.start()
    started = time.perf_counter()
    deadline = started + settings.duration_s if settings.duration_s else None

    def record(result: RequestResult) -> None:
        with lock:
            results.append(result)
            snapshot = list(results)
        on_result(snapshot)

    died: list[str] = []
    refused: list[ToolsRefused] = []

    def user(index: int) -> None:
        try:
            _user(server, prepared, settings, index, stop, deadline, record)
        except ToolsRefused as exc:  # not a death: the server cannot serve this workload at all
            refused.append(exc)
            stop.set()
        except BaseException as exc:  # any death of a user voids the run, reported below
            died.append(f"user {index} stopped on {type(exc).__name__}: {str(exc)[:200]}")
            stop.set()  # the others stop too: the run is void

    threads = [threading.Thread(target=user, name=f"bench-user-{u}", daemon=True, args=(u,))
               for u in range(settings.users)]
    for thread in threads:
        thread.start()
    interrupted = False
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.2)
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
    duration = time.perf_counter() - started
    counters = sampler.finish()
    if refused:
        raise refused[0]
    if died:
        raise RunFailed(f"the run is void: {died[0]}" + (f" (and {len(died) - 1} more)" if len(died) > 1 else ""))
    with lock:
        return Run(list(results), counters, duration, interrupted or stop.is_set())


def _user(server: Server, prepared: Prepared, settings: Settings, user: int, stop: threading.Event,
          deadline: float | None, record: Callable[[RequestResult], None]) -> None:
    """One user: conversations that grow turn by turn and start over when the history reaches --context,
    until --turns turns are done (or --duration is over)."""
    pool = prepared.texts[user]
    done = 0
    while not stop.is_set() and prepared.turns_per_conversation:
        chat = Conversation(user, prepared.opening())
        while not stop.is_set():
            if deadline is None and done >= settings.turns:
                return
            if deadline is not None and time.perf_counter() >= deadline:
                return
            estimate = chat.next_input_tokens(settings.turn_tokens, prepared.turn_overhead) or \
                prepared.first_input_tokens
            if estimate + settings.max_tokens > prepared.context:
                break  # the history reached --context: a new conversation starts
            if settings.conversation_turns is not None and chat.turns_done >= settings.conversation_turns:
                break
            added = chat.add_turn(pool[done % len(pool)])  # a user turn, or the results of the calls just made
            result, answer = server.chat(prepared.model, chat.messages, max_tokens=settings.max_tokens,
                                         ignore_eos=settings.ignore_eos, temperature=settings.temperature,
                                         deadline=None if deadline is None else deadline + DRAIN_S,
                                         tools=prepared.tools)
            if result.error == TOOLS_REFUSED:
                raise ToolsRefused
            if stop.is_set():
                return  # interrupted in flight: not counted
            record(result)
            done += 1
            if not result.ok:
                del chat.messages[-added:]
                if result.error == "connection":
                    time.sleep(0.5)  # a server that went away: do not spin
                continue
            chat.messages.append(answer.message())
            chat.turns_done += 1
            chat.last_prompt_tokens, chat.last_output_tokens = result.input_tokens, result.output_tokens
