"""While serving: what restarts the engine (exit, failed probes, a death line /health agrees with) and
what does not (a death line alone: a client's text can put one in the log)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

import pytest

from launcher.run import serving, supervisor
from tests.unit.run.test_supervisor import plan_for

DEATH = ("(APIServer pid=1) ERROR 11-29 15:51:24 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
         "EngineCore encountered an issue. See stack trace (above) for the root cause.")


@pytest.fixture
def child() -> Iterator[supervisor.Child]:
    code = f"import time\nprint({DEATH!r}, flush=True)\ntime.sleep(60)"
    spawned = supervisor.spawn(plan_for([sys.executable, "-c", code]), attempt=1, secrets={}, sink=None, echo=False)
    yield spawned
    supervisor.stop_tree(spawned, 0.1)


def watch(child: supervisor.Child, health: list[bool], completion: serving.CompletionCheck | None = None,
          stop_after_s: float = 3.0) -> supervisor.Outcome:
    stop = threading.Event()
    threading.Timer(stop_after_s, stop.set).start()
    answers = iter(health)
    return serving.watch(child, stop, health=lambda: next(answers, health[-1]), interval_s=0.1, failures=3,
                         tick=lambda: None, completion=completion)


def test_a_death_line_with_a_healthy_server_restarts_nothing(child: supervisor.Child) -> None:
    assert "stopped" == watch(child, [True]).kind


def test_a_death_line_that_health_confirms_is_the_engine_dying(child: supervisor.Child) -> None:
    outcome = watch(child, [False])
    assert ("engine_dead", "EngineDeadError") == (outcome.kind, outcome.detail.split(":")[0].rsplit(".", 1)[-1])


def test_a_wedged_engine_behind_a_healthy_health_endpoint(child: supervisor.Child) -> None:
    """/health says 200, but 1-token completions time out: after `failures` of them, the engine is dead."""
    sent: list[float] = []

    def hangs() -> bool:
        sent.append(time.monotonic())
        time.sleep(0.2)  # the probe's HTTP timeout
        return False

    outcome = watch(child, [True], serving.CompletionCheck(hangs, 0.3, time.monotonic), stop_after_s=10)
    assert "engine_dead" == outcome.kind and "wedged" in outcome.detail
    assert len(sent) == 3


def test_completions_that_answer_keep_it_serving(child: supervisor.Child) -> None:
    sent: list[float] = []
    check = serving.CompletionCheck(lambda: sent.append(1.0) is None, 0.3, time.monotonic)
    assert "stopped" == watch(child, [True], check, stop_after_s=2).kind
    assert 2 <= len(sent) <= 7  # the loop wakes at least every 0.5 s
