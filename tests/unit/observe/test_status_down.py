"""`status` and `down` over state files: without state, a dead daemon, a tampered file, a reused PID, the
leftovers of a dead daemon, a state directory others can write, a daemon that will not stop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.errors import TransientFailure
from launcher.observe import down, status
from launcher.run import processes, state
from launcher.runstate import read_state
from tests.helpers.standins import holding_lock


class TestCommands:
    def test_status_without_state(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert 0 == status.status_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
        assert "no state for qwen3" in capsys.readouterr().out

    def test_status_json_keeps_the_phase_and_says_the_daemon_is_dead(self, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
        """`phase` stays a phase a program can compare; `alive` says that the daemon that wrote it is gone."""
        state.StateStore(tmp_path / "qwen3").update(pid=2**22 + 12345, phase="serving", profile="qwen3")
        environ = {"VLLM_LAUNCH_STATE_DIR": str(tmp_path)}
        assert 0 == status.status_command("qwen3", as_json=True, environ=environ)
        report = json.loads(capsys.readouterr().out)
        assert ("serving", False) == (report["phase"], report["alive"])
        assert 0 == status.status_command("qwen3", environ=environ)
        assert "qwen3: dead (last phase: serving)" in capsys.readouterr().out

    def test_status_reads_a_tampered_state_file_without_a_traceback(self, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
        """The state directory is writable by vLLM: fields of the wrong type read as absent."""
        directory = tmp_path / "qwen3"
        directory.mkdir()
        (directory / "state.json").write_text(json.dumps({
            "profile": "qwen3", "pid": "1", "phase": 7, "url": ["http://x"], "capacity": "full",
            "decisions": [1, {"class": 3, "attempt": "x"}], "counts": {"restarts": {"engine_dead": "9"}}}))
        assert 0 == status.status_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
        assert "qwen3: dead (last phase: 7)" in capsys.readouterr().out
        found = read_state(directory / "state.json")
        assert found is not None and (found.pid, found.phase, found.url, found.capacity) == (None, None, None, None)
        assert [("unknown", 0)] == [(d.cls, d.attempt) for d in found.decisions] and {"restarts": {}} == found.counts

    def test_the_error_in_state_is_printed_as_one_clean_line(self, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
        """state.json's error may quote a stranger (or be tampered with): `status` prints it on one line, without
        the escape sequences or control characters it holds."""
        state.StateStore(tmp_path / "qwen3").update(pid=2**22 + 12345, phase="failed", profile="qwen3",
                                                   error="port busy\n  url  http://evil\x1b[2J\x1b]0;x\x07 \x9b1m!")
        assert 0 == status.status_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
        out = capsys.readouterr().out
        assert "  error      port busy url http://evil !" in out.splitlines()
        assert [] == [c for c in out if not c.isprintable() and c != "\n"]

    def test_down_when_not_running(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        state.StateStore(tmp_path / "qwen3").update(pid=2**22 + 12345, phase="serving")
        assert 0 == down.down_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
        assert "not running" in capsys.readouterr().out


class TestDownIsSafe:
    """`down` signals the daemon that holds the lock, never a stranger who got the recorded PID."""

    def write_state(self, root: Path, **data: object) -> Path:
        directory = root / "qwen3"
        directory.mkdir(parents=True)
        (directory / "state.json").write_text(json.dumps({"profile": "qwen3", "phase": "serving", **data}))
        return directory

    def test_a_reused_pid_is_not_signalled(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            self.write_state(tmp_path, pid=stranger.pid)
            assert 0 == down.down_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
            assert "not running" in capsys.readouterr().out
            assert stranger.poll() is None  # still alive: it was never ours
            assert 0 == status.status_command("qwen3", as_json=True, environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
            assert json.loads(capsys.readouterr().out)["running"] is False
        finally:
            stranger.kill()
            stranger.wait()

    def test_a_dead_daemons_leftovers_are_stopped(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """What the last run recorded (same PID and start time) is ours: `down` stops it and says so."""
        import psutil

        orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            created = processes.start_time(psutil.Process(orphan.pid))
            self.write_state(tmp_path, pid=999_999_999,
                             child={"known": {str(orphan.pid): created}, "boot_id": processes.boot_id()})
            assert 0 == down.down_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
            assert f"stopped what its last run left: {orphan.pid}" in capsys.readouterr().out
            assert orphan.wait(10) is not None
        finally:
            orphan.kill()
            orphan.wait()

    def test_records_in_a_state_directory_others_can_write_are_not_acted_on(
            self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Anyone who can write the directory can record any process's PID and start ticks (both readable in
        /proc): `down`, maybe run as root, kills nothing on such a record and says why."""
        import psutil

        bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            created = processes.start_time(psutil.Process(bystander.pid))
            directory = self.write_state(tmp_path, pid=999_999_999, child={"known": {str(bystander.pid): created},
                                                                          "boot_id": processes.boot_id()})
            directory.chmod(0o777)
            assert 0 == down.down_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
            out = capsys.readouterr().out
            assert "not running" in out and "writable by group or others" in out and "nothing was stopped" in out
            assert bystander.poll() is None
        finally:
            bystander.kill()
            bystander.wait()

    def test_a_daemon_that_will_not_stop_is_exit_75(self, tmp_path: Path) -> None:
        """The lock holder is signalled; one that ignores SIGTERM past the timeout is a temporary failure (75)."""
        directory = self.write_state(tmp_path, pid=0)
        with holding_lock(directory / "lock", ignore_sigterm=True) as holder:
            with pytest.raises(TransientFailure) as caught:
                down.down_command("qwen3", timeout=0.5, environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
            assert 75 == caught.value.exit_code
            assert f"vllm-launch PID {holder.pid} did not exit" in str(caught.value)
