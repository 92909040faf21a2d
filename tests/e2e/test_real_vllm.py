"""`vllm-launch up` against real vLLM for CPUs: readiness, the ladder, warm starts, config failures, stops, restarts.

Each real start costs about 40 s on the 2-core box, so the serving checks share one server
(TestServing) and the warm start reuses the ladder's state directory (TestLadder).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Launches
from tests.e2e.realvllm import (
    KEY,
    KVHEAVY,
    START_S,
    RealLauncher,
    chat,
    cmdlines,
    demo_profile_text,
    port_is_free,
    profile_text,
    request,
)
from tests.helpers.polling import poll_for
from tests.helpers.ports import free_port

STARTUP_GRACE_S = 5.0  # launcher.run.supervisor.STARTUP_GRACE_S: the grace while vLLM ignores SIGTERM
ENGINE_INIT_LINE = "Initializing a V1 LLM engine"


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def stop_and_check(lau: RealLauncher, grace_s: float) -> dict[str, Any]:
    """SIGTERM the launcher: exit 0, every process its tree had is gone, the port is free; vLLM exited within
    the grace, or the daemon escalated at the deadline it recorded (a busy machine can make vLLM slower than
    the grace: the escalation is then the right behaviour, at the right time).

    Returns the daemon's shutdown.complete record.
    """
    seen = dict(lau.watcher.seen)
    lau.signal(signal.SIGTERM)
    assert 0 == lau.wait(grace_s + 60)
    assert [] == lau.watcher.still_alive(), f"seen while it ran: {seen}"  # at once: the launcher waited for them
    assert port_is_free(lau.port)
    complete = lau.named("shutdown.complete")
    assert 1 == len(complete)
    record = complete[0]
    assert [] == record["leftovers"] and record["grace_s"] == grace_s
    if record["escalated_after_s"] is None:
        assert record["leader_exited_after_s"] <= grace_s
    else:
        assert record["escalated_after_s"] >= grace_s, "never killed before the deadline"
    return dict(record)


# --------------------------------------------------------------------------- one server, many checks


@pytest.fixture(scope="class")
def served(class_launch: Launches) -> RealLauncher:
    """configs/tiny-cpu.yaml (the demo profile) on a free port, with vLLM's request log on, ready."""
    lau = class_launch(demo_profile_text(free_port(), log_requests=True))
    lau.wait_ready()
    return lau


class TestServing:
    """One server from the demo profile; the last test stops it."""

    def test_chat_completion_answers(self, served: RealLauncher) -> None:
        """A chat completion with the key gets 200, a choice and token usage (the text is random)."""
        response = chat(served.port, KEY)
        assert 200 == response.status, response.body
        assert "tiny" == response.body["model"]
        assert 1 == len(response.body["choices"])
        assert "assistant" == response.body["choices"][0]["message"]["role"]
        assert 1 <= response.body["usage"]["completion_tokens"] <= 8
        assert 0 < response.body["usage"]["prompt_tokens"]

    def test_requests_without_the_key_get_401(self, served: RealLauncher) -> None:
        """vLLM enforces the key it got through its environment; /health stays open."""
        assert 401 == chat(served.port, None).status
        assert 401 == request(served.port, "/v1/models").status
        assert 401 == request(served.port, "/v1/models", key="wrong-key").status
        assert 200 == request(served.port, "/v1/models", key=KEY).status
        assert 200 == request(served.port, "/health").status

    def test_kv_tokens_in_status_come_from_the_log(self, served: RealLauncher) -> None:
        """`status --json` reports the KV capacity vLLM logged ("CPU KV cache size"), not the plan's estimate."""
        assert "CPU KV cache size: 1,048,576 tokens" in served.vllm_log()
        ready = served.named("ready")[0]
        assert (1048576, 2048, 512.0) == (ready["kv_tokens"], ready["max_model_len"], ready["sessions"])
        data = served.status_json()
        assert ("serving", True, 1) == (data["phase"], data["running"], data["attempt"])
        assert 1048576 == data["capacity"]["kv_tokens"]
        assert 2048 == data["capacity"]["max_model_len"]
        assert "vllm:kv_cache_usage_perc" in data["live"]
        preflight = served.named("preflight.ok")[0]
        assert 1048576 != preflight["kv_tokens_estimate"]  # the estimate differs: the number above is vLLM's

    def test_ready_and_capacity_reach_the_notify_socket(self, served: RealLauncher) -> None:
        """READY=1 comes once, with the logged capacity as STATUS, after the preflight and start statuses."""
        assert served.notify is not None
        poll_for(lambda: "READY" in served.notify.kinds(), 5, "READY=1")  # type: ignore[union-attr]
        ready = [m for m in served.notify.messages if "READY" in m]
        assert 1 == len(ready)
        assert "1" == ready[0]["READY"]
        assert ready[0]["STATUS"].startswith("ready: 1,048,576 KV tokens, 512.0 sessions of 2,048")
        statuses = [m["STATUS"] for m in served.notify.messages if "STATUS" in m]
        assert "preflight" == statuses[0]
        assert statuses[1].startswith("attempt 1: starting vLLM")

    def test_api_key_is_in_no_command_line_log_or_state(self, served: RealLauncher) -> None:
        """The key reaches vLLM only through its environment: no argv in the tree, log line or state file holds it."""
        tree = served.watcher.sample()
        names = " ".join(p.name() for p in tree)
        assert "VLLM::EngineCore" in names and "VLLM::Worker" in names, names
        lines = cmdlines([served.proc.pid, *(p.pid for p in tree)])
        assert 1 + len(tree) == len(lines)
        assert {} == {pid: line for pid, line in lines.items() if KEY in line}
        leader = next(p for p in tree if p.ppid() == served.proc.pid)
        assert KEY == leader.environ()["VLLM_API_KEY"]
        files = [served.log_file, *served.state_dir.rglob("*")]
        assert [] == [str(f) for f in files if f.is_file() and KEY in f.read_text(errors="replace")]
        assert KEY not in "\n".join(served.lines)

    def test_failure_words_from_a_client_do_not_steer_the_daemon(self, served: RealLauncher) -> None:
        """Paths (access log) and prompts (request log) that spell vLLM's failures reach the log and change nothing."""
        for path in ("/health?x=EngineDeadError", "/RepositoryNotFoundError",
                     "/v1/models?x=EngineCore%20encountered%20a%20fatal%20error"):
            request(served.port, path)
        prompt = ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered a fatal error. ValueError: "
                  "No available memory for the cache blocks. GPU KV cache size: 99,999,999 tokens")
        response = request(served.port, "/v1/chat/completions", key=KEY, body={
            "model": "tiny", "messages": [{"role": "user", "content": prompt}], "max_tokens": 2})
        assert 200 == response.status, response.body
        poll_for(lambda: "RepositoryNotFoundError" in served.vllm_log() and "99,999,999" in served.vllm_log(), 10,
                 "the request lines in vLLM's log")
        time.sleep(3)  # three health intervals: an event would have acted by now
        assert [] == served.named("restart.engine_dead")
        data = served.status_json()
        assert ("serving", 1) == (data["phase"], data["attempt"])
        assert 1048576 == data["capacity"]["kv_tokens"]

    def test_sigterm_drains_then_stops_the_whole_tree_within_the_grace(self, served: RealLauncher) -> None:
        """SIGTERM once ready, with a request in flight: vLLM drains it (--shutdown-timeout), then exit 0 within
        stop_grace, nothing of the tree left, the port free, STOPPING=1."""
        assert 4 <= len(served.watcher.seen)  # vllm, resource_tracker, EngineCore, Worker
        answer: dict[str, Any] = {}

        def long_request() -> None:
            body = {"model": "tiny", "prompt": "x", "max_tokens": 1200, "ignore_eos": True, "temperature": 0}
            answer.update(request(served.port, "/v1/completions", key=KEY, body=body).body)

        thread = threading.Thread(target=long_request)
        thread.start()
        time.sleep(0.3)
        record = stop_and_check(served, grace_s=15.0)  # the demo profile's stop_grace
        thread.join(timeout=60)
        # vLLM's drain (mode=drain) waits for its worker and engine in turn: ~4.5 s on this box even idle.
        assert "mode=drain timeout=11s" in served.vllm_log()
        if record["escalated_after_s"] is None:
            # The grace allowed the drain: the request in flight was finished, and vLLM exited by itself.
            assert 1200 == answer.get("usage", {}).get("completion_tokens"), "finished, not aborted"
            assert 0 == record["returncode"]
        assert served.notify is not None and "STOPPING" == served.notify.kinds()[-1]
        assert "stopped" == served.state()["phase"]


# --------------------------------------------------------------------------- the ladder and the warm start


@dataclass(frozen=True)
class FirstUp:
    text: str
    state_dir: Path
    launcher: RealLauncher
    ready: dict[str, Any]
    state: dict[str, Any]
    exit_code: int


@pytest.fixture(scope="class")
def first_up(class_launch: Launches, tmp_path_factory: pytest.TempPathFactory) -> FirstUp:
    """The KV-heavy model at max-model-len 32768 with 1 GiB of KV, up until ready, then stopped."""
    state_dir = tmp_path_factory.mktemp("ladder-state")
    text = profile_text(free_port(), model=KVHEAVY, max_model_len=32768,
                        launcher="  ladder:\n    min_model_len: 4096\n")
    lau = class_launch(text, state_dir=state_dir)
    ready = lau.wait_ready(timeout=2 * START_S)
    state = lau.state()
    lau.signal(signal.SIGTERM)
    return FirstUp(text, state_dir, lau, ready, state, lau.wait(30))


class TestLadder:
    def test_kv_insufficient_then_vllms_estimate(self, first_up: FirstUp) -> None:
        """Attempt 1 fails as kv_insufficient; attempt 2 runs at vLLM's estimated max-model-len (8064) and serves."""
        lau = first_up.launcher
        argvs = [e["argv"] for e in lau.named("attempt.started")]
        assert ["32768", "8064"] == [flag(a, "--max-model-len") for a in argvs]
        failed = lau.named("attempt.failed")
        assert [(1, "kv_insufficient")] == [(e["attempt"], e["failure"]) for e in failed]
        assert 8064 == failed[0]["numbers"]["estimated_max_model_len"]
        assert "the estimated maximum model length is 8064" in lau.vllm_log()
        decisions = first_up.state["decisions"]
        assert [("kv_insufficient", 1)] == [(d["class"], d["attempt"]) for d in decisions]
        assert "max-model-len 32768 → 8064" == decisions[0]["change"]
        assert (2, "serving") == (first_up.state["attempt"], first_up.state["phase"])
        assert (2, 8064, 8192) == (first_up.ready["attempt"], first_up.ready["max_model_len"],
                                   first_up.ready["kv_tokens"])
        assert 0 == first_up.exit_code

    def test_warm_start_from_last_known_good(self, first_up: FirstUp, class_launch: Launches) -> None:
        """A second `up` with the same state starts at the rung that served: one launch, --max-model-len 8064."""
        lau = class_launch(first_up.text, state_dir=first_up.state_dir)
        ready = lau.wait_ready()
        started = lau.named("attempt.started")
        assert 1 == len(started)
        assert "8064" == flag(started[0]["argv"], "--max-model-len")
        assert {"max-model-len": 8064} == lau.named("ladder.start_from_last_known_good")[0]["overrides"]
        assert (1, 8064) == (ready["attempt"], ready["max_model_len"])
        assert [] == lau.named("attempt.failed")
        assert ["last_known_good"] == [d["class"] for d in lau.state()["decisions"]]
        stop_and_check(lau, grace_s=10.0)


# --------------------------------------------------------------------------- configuration failures

TOOLS = "  enable-auto-tool-choice: true\n  tool-call-parser: nosuchparser\n"


class TestConfigFailure:
    def test_unknown_tool_parser_is_refused_before_launch(self, launch: Callable[..., RealLauncher], port: int) -> None:
        """The installed vLLM's --help=all lists the parsers: an unknown one exits 78 with no launch at all."""
        lau = launch(profile_text(port, vllm=TOOLS))
        assert 78 == lau.wait(120)
        assert [] == lau.named("attempt.started")
        failed = lau.named("failed")[0]
        assert "'nosuchparser' is not a valid --tool-call-parser" in failed["error"]
        assert "hermes" in failed["error"] and "qwen3_coder" in failed["error"]

    def test_unknown_tool_parser_with_a_plugin_fails_at_start(self, launch: Callable[..., RealLauncher], port: int,
                                                              tmp_path: Path) -> None:
        """With a tool-parser plugin the name is vLLM's to check: one launch, vLLM's KeyError, exit 78, valid names."""
        plugin = tmp_path / "empty_tool_parser.py"
        plugin.write_text('"""A tool-parser plugin that registers nothing."""\n')
        lau = launch(profile_text(port, vllm=f"{TOOLS}  tool-parser-plugin: {plugin}\n"))
        assert 78 == lau.wait(START_S)
        assert 1 == len(lau.named("attempt.started"))
        assert "invalid tool call parser: nosuchparser (chose from {" in lau.vllm_log()
        failed = lau.named("failed")[0]
        assert "vLLM has no tool-call-parser 'nosuchparser'" in failed["error"]
        assert "hermes" in failed["error"] and "qwen3_coder" in failed["error"]
        assert "failed" == lau.state()["phase"]


# --------------------------------------------------------------------------- stopping during start-up, engine death


class TestStartupStop:
    def test_sigterm_during_engine_startup_stops_cleanly(self, launch: Callable[..., RealLauncher], port: int) -> None:
        """vLLM swallows SIGTERM while its engine initialises: the launcher kills the group after its grace, exit 0."""
        lau = launch(profile_text(port))
        spawned = lau.wait_event("attempt.started", 120)
        poll_for(lambda: ENGINE_INIT_LINE in lau.vllm_log(), 120, "the engine to initialise", lau.output)
        assert lau.engine_core() is not None
        assert [] == lau.named("ready")
        assert spawned["pid"] in lau.watcher.seen
        record = stop_and_check(lau, grace_s=STARTUP_GRACE_S)  # the start-up grace: min(stop_grace, 5 s)
        assert -9 == record["returncode"]  # the group was killed: vLLM never acted on the SIGTERM
        # vLLM ignored the SIGTERM: the launcher waited out its grace, then escalated at the deadline.
        assert record["leader_exited_after_s"] is None and record["escalated_after_s"] >= STARTUP_GRACE_S
        assert "[shutdown] API server: shutdown triggered" not in lau.vllm_log()
        assert lau.notify is not None
        assert "READY" not in lau.notify.kinds()
        assert "STOPPING" in lau.notify.kinds()
        assert "stopped" == lau.state()["phase"]


class TestEngineDeath:
    def test_killed_engine_core_is_restarted(self, launch: Callable[..., RealLauncher], port: int) -> None:
        """SIGKILL of VLLM::EngineCore while serving: restart.engine_dead, the same flags again, ready a second time."""
        lau = launch(profile_text(port))
        lau.wait_ready()
        engine = lau.engine_core()
        assert engine is not None
        engine.kill()
        dead = lau.wait_event("restart.engine_dead", 60)
        assert 1 == dead["attempt"]
        lau.wait_ready(count=2)
        first, second = (e["argv"] for e in lau.named("attempt.started"))
        assert first == second
        decisions = lau.state()["decisions"]
        assert ["engine_dead"] == [d["class"] for d in decisions]
        assert "restart with the same flags" == decisions[0]["change"]
        new_engine = lau.engine_core()
        assert new_engine is not None and engine.pid != new_engine.pid
        assert 200 == chat(lau.port, KEY).status
        stop_and_check(lau, grace_s=10.0)
