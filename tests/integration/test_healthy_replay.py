"""Every healthy start-up of the real-log corpus, replayed through `vllm-launch up`, serves on the first launch.

The fake vLLM prints each log as vLLM printed it (its ERROR lines, optional features' tracebacks, retried
downloads, NCCL noise, request-time errors, EngineDeadErrors of a requested shutdown) and then serves. A
line the launcher reads as a failure may accuse the start-up; only the process can convict it, and the
replayed process does not fail: `up` must reach READY with one launch, no failed attempt and no restart.
The daemons of a group run side by side (each mostly waits on its probes); every log is checked on its
own, and the summary at the end of the run counts them per source.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from tests.corpus import REAL, RealLog
from tests.helpers.ports import free_port
from tests.helpers.profiles import tiny_profile as profile
from tests.helpers.replay import HEALTHY, SERVED
from tests.integration.harness import Launcher

GROUP = 4  # daemons at a time
GROUPS = [HEALTHY[i:i + GROUP] for i in range(0, len(HEALTHY), GROUP)]
FAST = "  health: {interval: 0.2s, failures: 3, timeout: 1s}\n  restart: {backoff: [0.2s, 1s]}\n"


def _has(log: RealLog, *words: str) -> bool:
    text = log.path.read_text(errors="replace")
    return any(word in text for word in words)


def test_the_corpus_has_healthy_logs_with_scary_lines() -> None:
    errors = [log for log in HEALTHY if _has(log, "ERROR", "Traceback", "Error:")]
    scary = [log for log in HEALTHY if _has(log, "ERROR", "Traceback", "Error", "WARNING", "Warning")]
    assert len(HEALTHY) >= 60 and len(scary) >= 60 and len(errors) >= 30, (len(HEALTHY), len(scary), len(errors))


@pytest.mark.parametrize("logs", GROUPS, ids=[group[0].file for group in GROUPS])
def test_healthy_start_ups_serve_on_the_first_launch(launch: Callable[..., Launcher], logs: list[RealLog]) -> None:
    launched = [(log, launch(profile(free_port(), launcher=FAST),
                             scenarios=[{"log": str(REAL / log.file), "after": "serve", "time_scale": 0.0}]))
                for log in logs]
    problems = []
    for log, lau in launched:
        try:
            lau.wait_event("ready", timeout=90)
            assert 1 == len(lau.argvs()), "one launch"
            assert lau.event("attempt.failed") is None and lau.event("restart.engine_dead") is None
        except AssertionError as exc:
            problems.append(f"{log.file}: {exc}")
    for _, lau in launched:
        lau.signal(signal.SIGTERM)
    for log, lau in launched:
        code = lau.wait(30)
        if code != 0:
            problems.append(f"{log.file}: exit {code}")
        elif not any(p.startswith(log.file) for p in problems):
            SERVED[log.file] = log.source
    assert not problems, "\n".join(problems)
