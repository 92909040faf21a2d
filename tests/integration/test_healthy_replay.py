"""Every healthy start-up of the real-log corpus, replayed through `vllm-launch up`, serves on the first launch.

The fake vLLM prints each log as vLLM printed it (its ERROR lines, optional features' tracebacks, retried
downloads, NCCL noise, request-time errors, EngineDeadErrors of a requested shutdown) and then serves. A
line the launcher reads as a failure may accuse the start-up; only the process can convict it, and the
replayed process does not fail: `up` must reach READY with one launch, no failed attempt and no restart.
Logs are counted per source in the summary at the end of the run.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from tests.corpus import REAL, RealLog, corpus
from tests.integration.harness import Launcher
from tests.integration.test_up import profile

HEALTHY = [log for log in corpus() if log.expected["class"] == "ok" or log.expected.get("replay") == "serves"]
SERVED: dict[str, str] = {}  # file → source, of every log that served on its first launch


def _has(log: RealLog, *words: str) -> bool:
    text = log.path.read_text(errors="replace")
    return any(word in text for word in words)


def test_the_corpus_has_healthy_logs_with_scary_lines() -> None:
    errors = [log for log in HEALTHY if _has(log, "ERROR", "Traceback", "Error:")]
    scary = [log for log in HEALTHY if _has(log, "ERROR", "Traceback", "Error", "WARNING", "Warning")]
    assert len(HEALTHY) >= 60 and len(scary) >= 60 and len(errors) >= 18, (len(HEALTHY), len(scary), len(errors))


@pytest.mark.parametrize("log", HEALTHY, ids=[log.file for log in HEALTHY])
def test_a_healthy_start_up_serves_on_the_first_launch(launch: Callable[..., Launcher], port: int,
                                                        log: RealLog) -> None:
    fast = "  health: {interval: 0.2s, failures: 3, timeout: 1s}\n  restart: {backoff: [0.2s, 1s]}\n"
    lau = launch(profile(port, launcher=fast),
                 scenarios=[{"log": str(REAL / log.file), "after": "serve", "time_scale": 0.0}])
    lau.wait_event("ready", timeout=60)
    assert 1 == len(lau.argvs()), "one launch"
    assert lau.event("attempt.failed") is None and lau.event("restart.engine_dead") is None
    lau.signal(signal.SIGTERM)
    assert 0 == lau.wait(20)
    SERVED[log.file] = log.source

