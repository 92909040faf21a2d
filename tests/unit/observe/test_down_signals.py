"""`down` signals only this profile's `vllm-launch up`: never a stranger holding the lock, never a PID the
lock file names."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.errors import TransientFailure
from launcher.observe import down
from tests.helpers.standins import holder, profile_dir


class TestDownSignalsOnlyOurDaemon:
    def test_a_lock_held_by_something_else_is_named_and_nothing_is_signalled(self, tmp_path: Path) -> None:
        directory = profile_dir(tmp_path)
        with holder(tmp_path, directory / "lock", daemon=False) as stranger:
            with pytest.raises(TransientFailure) as caught:
                down.down_command("qwen3", timeout=5, environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
            assert f"held by PID {stranger.pid}" in str(caught.value)
            assert "not this profile's `vllm-launch up`" in str(caught.value)
            assert "nothing was signalled" in str(caught.value)
            assert stranger.poll() is None

    def test_a_strangers_command_line_reaches_the_error_as_one_clean_line(self, tmp_path: Path) -> None:
        """Whatever a stranger put on its command line (newlines, ANSI escapes), `down`'s error is one line with no
        control character in it."""
        directory = profile_dir(tmp_path)
        hostile = "\x1b[2J\x1b[31mdone\nqwen3: stopped (vllm-launch PID 1)\x1b]0;title\x07\u202ereversed"
        with holder(tmp_path, directory / "lock", daemon=False, says=hostile) as stranger:
            with pytest.raises(TransientFailure) as caught:
                down.down_command("qwen3", timeout=5, environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
            text = str(caught.value)
            assert f"held by PID {stranger.pid}" in text and "done qwen3: stopped" in text
            assert [] == [c for c in text if not c.isprintable()], text
            assert stranger.poll() is None

    def test_a_lock_file_naming_another_process_signals_neither(self, tmp_path: Path) -> None:
        """The lock file's text is only a claim: a PID written into it is never signalled on its say-so."""
        directory = profile_dir(tmp_path)
        innocent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            with holder(tmp_path, directory / "lock", daemon=True) as daemon:
                (directory / "lock").write_text(str(innocent.pid))
                with pytest.raises(TransientFailure) as caught:
                    down.down_command("qwen3", timeout=5, environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
                assert f"held by PID {daemon.pid}" in str(caught.value)
                assert (None, None) == (daemon.poll(), innocent.poll())
        finally:
            innocent.kill()
            innocent.wait()

    def test_our_daemon_is_stopped(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        directory = profile_dir(tmp_path)
        with holder(tmp_path, directory / "lock", daemon=True) as daemon:
            assert 0 == down.down_command("qwen3", timeout=10, environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
            assert -signal.SIGTERM == daemon.wait(10)
        assert f"qwen3: stopped (vllm-launch PID {daemon.pid})" in capsys.readouterr().out
