"""No signature backtracks on a hostile line: each needle, repeated or followed by filler up to the pump's 64 KiB
cut, is classified in a bounded time (a guard against catastrophic regexes: a slow line stalls the log pump,
and vLLM blocks on a full pipe; clients control what request logging prints)."""

from __future__ import annotations

import time

import pytest

from launcher.vllm.classify import classify
from launcher.vllm.diagnose import Diagnoser
from launcher.vllm.signatures import SIGNATURES

LINE = 64 * 1024
PREFIXES = ("", "ERROR 05-12 10:00:00 [core.py:1] ", "(EngineCore_DP0 pid=1) ERROR 05-12 10:00:00 [core.py:1] ")
# Real classification takes microseconds; a backtracking pattern takes seconds to hours on these lines. The
# bound is a thousand times the real cost, so a busy machine cannot trip it.
BOUND_S = 2.0


def hostile(needle: str) -> list[str]:
    fillers = (needle, needle + " ", "a", "_1", "(", "0.")
    return [(prefix + needle + filler * (LINE // max(1, len(filler))))[:LINE] for prefix in PREFIXES
            for filler in fillers]


@pytest.mark.parametrize("needle", sorted({sig.needle for sig in SIGNATURES}))
def test_no_signature_backtracks_on_a_hostile_line(needle: str) -> None:
    for line in hostile(needle):
        started = time.process_time()
        classify(line)
        assert time.process_time() - started < BOUND_S, (needle, line[:80])


def test_a_process_prefix_of_any_length_costs_nothing_to_the_fold() -> None:
    diagnoser = Diagnoser()
    name = "_1" * 30000 + "x"
    started = time.process_time()
    diagnoser.feed(f"({name} pid=1) ERROR 05-12 10:00:00 [core.py:1] torch.OutOfMemoryError: CUDA out of memory.")
    diagnoser.feed(f"({name} pid=2) INFO 05-12 10:00:01 [core.py:2] Model loading took 1.0 GiB and 2.0 seconds")
    assert time.process_time() - started < BOUND_S
