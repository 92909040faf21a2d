"""vLLM's scheduler as a client can time it: --max-num-seqs slots, a prefill budget per step, a load-dependent
token time, and the counters /metrics shows.

A request waits (counted as waiting) for one of max_num_seqs slots, then runs (counted as running) until it
gives the slot back. A streamed chat prefills its prompt in scheduler steps of at most
max_num_batched_tokens prompt tokens, shared evenly by the requests prefilling at that moment; a step lasts
one token time plus prefill_s_per_1k per 1000 prompt tokens the step holds (all requests' together). Its
first token comes at the end of its prefill, each later one a token time after the one before. The token
time is token_s * (1 + batch_slowdown * (running - 1)), read at every step: more concurrent requests make
every one of them slower, and a small max_num_seqs makes the rest queue instead.

Generated tokens: a streamed chat counts each token it sends; a non-streamed completion, which holds its
slot for completion_s, counts tokens_per_s while it holds it (a climbing counter, as vLLM's does).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

Pause = Callable[[float], bool]  # sleeps; True when the request must end (the engine died)


@dataclass(frozen=True)
class Latency:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    completion_s: float = 0.0
    tokens_per_s: float = 200.0
    prefill_s_per_1k: float = 0.0
    token_s: float = 0.0
    batch_slowdown: float = 0.0


class Scheduler:
    def __init__(self, latency: Latency) -> None:
        self.latency = latency
        self.slots = threading.BoundedSemaphore(max(1, latency.max_num_seqs))
        self.lock = threading.Lock()
        self.waiting = 0
        self.timed: dict[int, float] = {}  # non-streamed request number → when it got its slot
        self.streaming: set[int] = set()
        self.prefilling = 0
        self.streamed_tokens = 0
        self.finished_timed_tokens = 0.0
        self.requests = 0

    # slots -------------------------------------------------------------------------------------------------
    def admit(self, stop: threading.Event | None = None, timed: bool = False) -> int | None:
        """Wait for a slot (counted as waiting); the request's number, or None when `stop` was set meanwhile."""
        with self.lock:
            self.waiting += 1
            self.requests += 1
            number = self.requests
        try:
            while not self.slots.acquire(timeout=0.05):
                if stop is not None and stop.is_set():
                    return None
        finally:
            with self.lock:
                self.waiting -= 1
        with self.lock:
            if timed:
                self.timed[number] = time.monotonic()
            else:
                self.streaming.add(number)
        return number

    def release(self, number: int) -> None:
        with self.lock:
            since = self.timed.pop(number, None)
            if since is not None:
                self.finished_timed_tokens += (time.monotonic() - since) * self.latency.tokens_per_s
            self.streaming.discard(number)
        self.slots.release()

    def hold_for_completion(self) -> None:
        """A non-streamed completion: one slot for completion_s, as the fake always did."""
        number = self.admit(timed=True)
        assert number is not None
        try:
            time.sleep(self.latency.completion_s)
        finally:
            self.release(number)

    # timing ------------------------------------------------------------------------------------------------
    def running(self) -> int:
        with self.lock:
            return len(self.timed) + len(self.streaming)

    def token_time(self) -> float:
        """One decode step with the requests running now: token_s * (1 + batch_slowdown * (running - 1))."""
        lat = self.latency
        return lat.token_s * (1 + lat.batch_slowdown * max(0, self.running() - 1))

    def prefill(self, prompt_tokens: int, pause: Pause) -> bool:
        """The prompt through steps of at most max_num_batched_tokens (shared by those prefilling); False when
        `pause` says the request must end."""
        lat = self.latency
        if lat.prefill_s_per_1k <= 0 and lat.token_s <= 0:
            return not pause(0)
        with self.lock:
            self.prefilling += 1
        try:
            left = max(1, prompt_tokens)
            while left > 0:
                with self.lock:
                    sharing = max(1, self.prefilling)
                share = max(1, lat.max_num_batched_tokens // sharing)
                take = min(left, share)
                in_step = min(lat.max_num_batched_tokens, take * sharing)
                if pause(self.token_time() + lat.prefill_s_per_1k * in_step / 1000):
                    return False
                left -= take
        finally:
            with self.lock:
                self.prefilling -= 1
        return True

    def count_token(self) -> None:
        with self.lock:
            self.streamed_tokens += 1

    # what /metrics shows -----------------------------------------------------------------------------------
    def counters(self) -> tuple[int, int, float]:
        """(running, waiting, generation tokens so far)."""
        now = time.monotonic()
        with self.lock:
            timed = self.finished_timed_tokens + sum(now - since for since in self.timed.values()) * \
                self.latency.tokens_per_s
            return len(self.timed) + len(self.streaming), self.waiting, self.streamed_tokens + timed
