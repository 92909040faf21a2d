"""`status` does not trust state.json's numbers or its url: the state directory is writable by the service user,
and so by vLLM. Numbers out of any sane range read as absent; /metrics is read only from the host and port the
profile gives its server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.observe import advice, status, watch
from launcher.run import health
from launcher.runstate import State
from tests.helpers.captures import capture, changed
from tests.helpers.standins import serving

HUGE = 10**400  # JSON has no bound on an integer: a float of it overflows
ARGS = ["serve", "/models/m", "--port", "8000", "--host", "127.0.0.1", "--max-model-len", "1024",
        "--shutdown-timeout", "10", "--gpu-memory-utilization", "0.85"]


def test_numbers_out_of_range_read_as_absent_and_advice_never_overflows() -> None:
    """Before, a kv_tokens of 10**400 was an OverflowError traceback in the KV advice."""
    found = State.from_dict({
        "pid": HUGE, "attempt": -3, "time_to_ready_s": float("inf"), "restart_window_s": 1e308,
        "capacity": {"kv_tokens": HUGE, "max_model_len": HUGE, "utilization": 5.0, "sessions": float("nan"),
                     "available_kv_gib": -1.0, "max_concurrency": 1e300},
        "decisions": [{"attempt": HUGE, "class": "engine_dead", "time": 1e308}],
        "counts": {"restarts": {"engine_dead": HUGE, "kv_insufficient": 2}}})
    assert (None, None, None, None) == (found.pid, found.attempt, found.time_to_ready_s, found.restart_window_s)
    assert found.capacity is not None
    assert (None, None, None, None, None, None) == (
        found.capacity.kv_tokens, found.capacity.max_model_len, found.capacity.utilization, found.capacity.sessions,
        found.capacity.available_kv_gib, found.capacity.max_concurrency)
    assert {"restarts": {"kv_insufficient": 2}} == found.counts
    assert [(0, 0.0)] == [(d.attempt, d.time) for d in found.decisions]
    saturated = advice.Figures(kv_usage=0.97, waiting=3.0, running=8.0)
    rules = [a.rule for a in advice.advise(None, saturated, found.capacity, found.decisions, ARGS, {}, 1.7e9,
                                           restart_window_s=found.restart_window_s)]
    assert "kv_cache_saturated" in rules


def test_status_with_huge_numbers_prints_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    full = changed(capture("busy-2"), "vllm:kv_cache_usage_perc", 0.95)  # a full KV cache, requests waiting
    monkeypatch.setattr(health, "metrics_text", lambda url, timeout=2.0: full)
    capacity = {"kv_tokens": HUGE, "max_model_len": 1024, "utilization": 0.5, "sessions": 1.0}
    with serving(tmp_path, ARGS, phase="serving", url="http://127.0.0.1:8000", capacity=capacity) as environ:
        assert 0 == status.status_command("qwen3", environ=environ, sleep=lambda s: None)
    out = capsys.readouterr().out
    assert "qwen3: serving" in out and "the KV cache is the limit" in out


@pytest.mark.parametrize("url", ["http://10.0.0.9:9100", "http://127.0.0.1:8001", "http://evil.example:8000",
                                 "http://127.0.0.1:8000/../../admin", "file:///etc/shadow"])
def test_metrics_are_read_only_from_the_profiles_own_server(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """state.json names another server: it is never asked, and status says why in one line."""
    asked: list[str] = []

    def read(where: str, timeout: float = 2.0) -> str:
        asked.append(where)
        return capture("busy-1")

    monkeypatch.setattr(health, "metrics_text", read)
    with serving(tmp_path, ARGS, phase="serving", url=url) as environ:
        assert 0 == status.status_command("qwen3", environ=environ, sleep=lambda s: None)
        text = capsys.readouterr().out
        assert 0 == status.status_command("qwen3", as_json=True, environ=environ, sleep=lambda s: None)
        report: dict[str, Any] = json.loads(capsys.readouterr().out)
        shown = watch.Watch(tmp_path / "state" / "qwen3", read_metrics=read).refresh()
    assert [] == asked
    assert f"state.json's url {url} is not the profile's http://127.0.0.1:8000" in report["url_ignored"]
    assert {} == report["live"]
    assert 1 == len([line for line in text.splitlines() if "is not the profile's" in line]), text
    assert "is not the profile's" in shown


def test_the_profiles_own_url_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard for the test above: the same state with the profile's url is read, twice, as before."""
    asked: list[str] = []
    monkeypatch.setattr(health, "metrics_text", lambda where, timeout=2.0: asked.append(where) or capture("busy-1"))
    with serving(tmp_path, ARGS, phase="serving", url="http://127.0.0.1:8000") as environ:
        assert 0 == status.status_command("qwen3", as_json=True, environ=environ, sleep=lambda s: None)
    report = json.loads(capsys.readouterr().out)
    assert ["http://127.0.0.1:8000"] * 2 == asked and "url_ignored" not in report and report["live"]


def test_status_says_where_the_start_up_went_and_what_each_attempt_cost() -> None:
    """The served start-up's phases, and each attempt's outcome and cost when the ladder climbed; a tampered
    phase name or attempt is left out, never a traceback."""
    from launcher.observe.status import _status_text

    data = {"profile": "qwen3", "pid": 7, "phase": "serving", "alive": True, "attempt": 2, "time_to_ready_s": 95.0,
            "startup_phases": {"seconds": {"weights": 12.0, "compile": 30.4, "/etc/passwd": 5.0},
                               "compile_cache": "hit", "total_s": 95.0},
            "attempts": [{"number": 1, "rung": "as written", "outcome": "failed", "class": "startup_memory",
                          "seconds": 41.0, "phases": {"weights": 38.0}},
                         {"number": 2, "rung": "gpu-memory-utilization=0.88", "outcome": "ready", "class": "",
                          "seconds": 95.0, "phases": {"weights": 12.0}},
                         {"number": "3\nREADY=1"}, "junk"]}
    text = _status_text(data)
    assert "  start-up   95.0s: weights 12s, compile 30s (cache hit)" in text.splitlines()
    assert "  cost       attempt 1 [as written] failed: startup_memory, 41s (weights 38s)" in text.splitlines()
    assert "  cost       attempt 2 [gpu-memory-utilization=0.88] ready, 95s (weights 12s)" in text.splitlines()
    assert "passwd" not in text and "READY=1" not in text
