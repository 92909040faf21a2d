"""The launcher's metrics: derived from state, scraped over HTTP, written as a textfile; the profile's
`launcher.metrics` checked like every other key."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from launcher.config.load import loads
from launcher.config.profile import MetricsSettings
from launcher.errors import ProfileError
from launcher.run.metrics import Exporter
from launcher.run.state import MAX_DECISIONS, StateStore
from launcher.runstate import Decision
from tests.helpers.state import served_state

BASE = "model: m\nvllm: {port: 8000, host: 127.0.0.1}\nlauncher:\n  metrics: "


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_say_what_the_supervisor_did(tmp_path: Path) -> None:
    store = served_state(tmp_path)
    exporter = Exporter(MetricsSettings(port=None, address="127.0.0.1", textfile=None), "qwen3")
    exporter.observe(store.data)
    got = samples(exporter.render().decode())
    p = ("profile", "qwen3")
    assert got[("vllm_launch_phase", (("phase", "serving"), p))] == 1.0
    assert got[("vllm_launch_phase", (("phase", "starting"), p))] == 0.0
    assert got[("vllm_launch_attempt", (p,))] == 2.0
    assert got[("vllm_launch_restarts_total", (("class", "engine_dead"), p))] == 2.0
    assert got[("vllm_launch_ladder_steps_total", (("class", "no_cache_blocks"), p))] == 1.0
    assert got[("vllm_launch_kv_tokens", (p,))] == 229632.0
    assert got[("vllm_launch_kv_sessions", (p,))] == 3.5
    assert got[("vllm_launch_time_to_ready_seconds", (p,))] == 41.5
    assert got[("vllm_launch_last_failure_info", (("class", "engine_dead"), p))] == 1.0
    assert got[("vllm_launch_info", (p, ("rung", "gpu-memory-utilization=0.88"), ("vllm_version", "0.32.0")))] == 1.0


def test_counts_outlive_the_cap_on_kept_decisions(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    for n in range(MAX_DECISIONS + 10):
        store.record_decision(Decision(n, "engine_dead", "restart", ""), counter="restarts")
    assert len(store.data["decisions"]) == MAX_DECISIONS
    assert store.data["decisions"][-1]["attempt"] == MAX_DECISIONS + 9
    assert store.data["decisions_dropped"] == 10
    assert store.data["counts"] == {"restarts": {"engine_dead": MAX_DECISIONS + 10}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def test_served_metrics_follow_the_state_and_stop_with_the_daemon(tmp_path: Path) -> None:
    port = free_port()
    exporter = Exporter(MetricsSettings(port=port, address="127.0.0.1", textfile=None), "qwen3")
    store = StateStore(tmp_path)
    store.listeners.append(exporter.observe)
    exporter.start()
    try:
        store.update(phase="starting", attempt=1)
        assert samples(scrape(port))[("vllm_launch_phase", (("phase", "starting"), ("profile", "qwen3")))] == 1.0
        store.update(phase="failed")
        assert samples(scrape(port))[("vllm_launch_phase", (("phase", "failed"), ("profile", "qwen3")))] == 1.0
    finally:
        exporter.stop()
    with pytest.raises(urllib.error.URLError):
        scrape(port)


def test_textfile_is_rewritten_on_every_change_and_a_failure_only_warns(tmp_path: Path) -> None:
    textfile = tmp_path / "vllm.prom"
    exporter = Exporter(MetricsSettings(port=None, address="127.0.0.1", textfile=textfile), "qwen3")
    store = served_state(tmp_path)
    exporter.observe(store.data)
    assert samples(textfile.read_text())[("vllm_launch_kv_tokens", (("profile", "qwen3"),))] == 229632.0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("vllm.prom.")], "no temporary file left"
    broken = Exporter(MetricsSettings(port=None, address="127.0.0.1", textfile=tmp_path / "missing" / "x.prom"), "q")
    broken.observe(store.data)
    assert broken.error is not None and "missing/x.prom" in broken.error


@pytest.mark.parametrize(("value", "message"), [
    ("{}", "expected exactly one of port or textfile"),
    ("{port: 9400, textfile: /tmp/x.prom}", "expected exactly one of port or textfile"),
    ("{port: 8000}", "8000 is not a free port of its own"),
    ("{port: 70000}", "70000 is not a free port of its own"),
    ("{textfile: /tmp/x.txt}", "expected a path ending in .prom"),
    ("{port: 9400, bind: 0.0.0.0}", "launcher.metrics.bind"),
])
def test_bad_metrics_settings_name_the_key_and_the_fix(value: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        loads(BASE + value + "\n")


def test_metrics_are_off_unless_asked(tmp_path: Path) -> None:
    settings: Any = loads("model: m\nvllm: {host: 127.0.0.1}\n").launcher.metrics
    assert settings is None
    assert loads(BASE + "{port: 9400}\n").launcher.metrics == MetricsSettings(9400, "127.0.0.1", None)



def test_the_exporter_holds_a_bounded_number_of_connections_and_drops_idle_ones(tmp_path: Path) -> None:
    """Idle half-open connections (a port scan, a stuck scraper) get no thread each and no wait without end:
    at most the cap of handler threads, each idle one closed by the server, and a scrape still answers."""
    import threading
    import time

    from launcher.run import httpbounded

    port = free_port()
    exporter = Exporter(MetricsSettings(port=port, address="127.0.0.1", textfile=None), "qwen3")
    exporter.start()
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(httpbounded.MAX_CONNECTIONS * 2)]
    try:
        time.sleep(0.5)  # time for a thread per connection to start, were there one
        assert threading.active_count() - before <= httpbounded.MAX_CONNECTIONS
        assert "vllm_launch_phase" in scrape(port)
        for sock in idle:
            sock.settimeout(httpbounded.READ_TIMEOUT_S * 4)
            assert sock.recv(1) == b""  # the server closed it: it sent no request in time
    finally:
        for sock in idle:
            sock.close()
        exporter.stop()


def test_each_start_up_phase_is_a_histogram(tmp_path: Path) -> None:
    """vllm_launch_startup_phase_seconds{phase}: the buckets state keeps over every attempt; a name that is no
    phase, or buckets of another length (a tampered state file), are not exported."""
    from launcher.vllm.phases import observe

    store = served_state(tmp_path)
    histogram = observe(observe({}, {"weights": 12.0, "compile": 40.5}), {"weights": 3.0})
    store.update(phase_histogram={**histogram, "bogus": histogram["weights"],
                                  "warmup": {"buckets": [1], "count": 1, "sum": 1.0}})
    exporter = Exporter(MetricsSettings(port=None, address="127.0.0.1", textfile=None), "qwen3")
    exporter.observe(store.data)
    got = samples(exporter.render().decode())
    p = ("profile", "qwen3")
    weights = ("phase", "weights")
    assert got[("vllm_launch_startup_phase_seconds_bucket", (("le", "5"), weights, p))] == 1.0
    assert got[("vllm_launch_startup_phase_seconds_bucket", (("le", "15"), weights, p))] == 2.0
    assert got[("vllm_launch_startup_phase_seconds_bucket", (("le", "+Inf"), weights, p))] == 2.0
    assert got[("vllm_launch_startup_phase_seconds_count", (weights, p))] == 2.0
    assert got[("vllm_launch_startup_phase_seconds_sum", (weights, p))] == 15.0
    assert got[("vllm_launch_startup_phase_seconds_count", (("phase", "compile"), p))] == 1.0
    assert not [k for k in got if ("phase", "bogus") in k[1] or ("phase", "warmup") in k[1]]
