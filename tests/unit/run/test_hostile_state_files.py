"""A state directory someone else wrote into: state.json, last_known_good.json and the lock as a deep JSON, a
link to /dev/zero, a FIFO or a directory. `status`, `down` and `up` each say so in one line or ignore the file
with a warning; none hangs, exhausts memory or prints a traceback."""

from __future__ import annotations

import errno
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from launcher.config.load import loads
from launcher.errors import ConfigError, PreflightError, TransientFailure
from launcher.observe import down, status
from launcher.run import daemon, locks, prelaunch, state

DEEP = "[" * 200_000


def deep(path: Path) -> None:
    path.write_text(DEEP)


def dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def fifo(path: Path) -> None:
    os.mkfifo(path)


def directory(path: Path) -> None:
    path.mkdir()


PLANTS = {"deep": deep, "/dev/zero": dev_zero, "fifo": fifo, "directory": directory}
WORDS = {"deep": "nests deeper than", "/dev/zero": "symbolic link", "fifo": "FIFO", "directory": "directory"}


def profile_dir(root: Path) -> Path:
    found = root / "qwen3"
    found.mkdir(parents=True, mode=0o700)
    return found


@pytest.mark.timeout(60)  # before: a FIFO hung `status` here for good
@pytest.mark.parametrize("plant", sorted(PLANTS))
class TestStateJson:
    def test_status_names_the_unreadable_file_and_goes_on(self, tmp_path: Path, plant: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
        """Every profile is listed: the broken one in one line, the others as they are."""
        PLANTS[plant](profile_dir(tmp_path) / "state.json")
        state.StateStore(tmp_path / "other").update(profile="other", phase="stopped", pid=2**22 + 1)
        environ = {"VLLM_LAUNCH_STATE_DIR": str(tmp_path)}
        assert 0 == status.status_command(None, environ=environ)
        out = capsys.readouterr().out
        said = [line for line in out.splitlines() if line.startswith("qwen3:")]
        assert 1 == len(said) and WORDS[plant] in said[0] and "ignored" in said[0], out
        assert "other: stopped" in out
        assert 0 == status.status_command("qwen3", environ=environ)
        assert WORDS[plant] in capsys.readouterr().out
        assert 0 == status.status_command("qwen3", as_json=True, environ=environ)
        captured = capsys.readouterr()
        assert json.loads(captured.out) is None and WORDS[plant] in captured.err

    def test_down_says_it_in_one_line(self, tmp_path: Path, plant: str, capsys: pytest.CaptureFixture[str]) -> None:
        PLANTS[plant](profile_dir(tmp_path) / "state.json")
        assert 0 == down.down_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
        out = capsys.readouterr().out.strip()
        assert 1 == len(out.splitlines()) and "not running" in out and WORDS[plant] in out, out

    def test_up_warns_and_goes_on_before_the_lock(self, tmp_path: Path, plant: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
        """An unreadable record of the earlier run is ignored with a warning; the run reaches its first stage
        (stopped there by a stand-in, so no vLLM is started)."""
        PLANTS[plant](profile_dir(tmp_path) / "state.json")
        monkeypatch.setenv("VLLM_LAUNCH_STATE_DIR", str(tmp_path))
        seen: list[object] = []

        def first_stage(previous: object) -> None:
            seen.append(previous)
            raise PreflightError("stopped by the test")

        monkeypatch.setattr(prelaunch, "stop_recorded_leftovers", first_stage)
        profile = loads("model: /m\nvllm: {host: 127.0.0.1, port: 18999}\nlauncher: {device: cpu}\n", name="qwen3")
        with capture_logs() as logs, pytest.raises(PreflightError):
            daemon.run(profile, threading.Event(), console=False)
        assert [None] == seen
        warned = [e for e in logs if e["event"] == "state.unreadable"]
        assert 1 == len(warned) and WORDS[plant] in warned[0]["error"], logs


@pytest.mark.timeout(60)
@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_an_unreadable_last_known_good_is_ignored_with_a_warning(tmp_path: Path, plant: str) -> None:
    PLANTS[plant](tmp_path / "last_known_good.json")
    with capture_logs() as logs:
        assert state.load_lkg(tmp_path, "k") is None
    warned = [e for e in logs if e["event"] == "last_known_good.unreadable"]
    assert 1 == len(warned) and WORDS[plant] in warned[0]["error"], logs


LOCK_PLANTS: dict[str, Callable[[Path], None]] = {"fifo": fifo, "directory": directory}


@pytest.mark.timeout(60)  # before: a FIFO lock hung `status` and `down`
@pytest.mark.parametrize("plant", sorted(LOCK_PLANTS))
class TestLock:
    def write(self, root: Path, plant: str) -> Path:
        found = profile_dir(root)
        (found / "state.json").write_text(json.dumps({"profile": "qwen3", "phase": "serving", "pid": os.getpid()}))
        LOCK_PLANTS[plant](found / "lock")
        return found / "lock"

    def test_up_refuses_it_in_one_line(self, tmp_path: Path, plant: str) -> None:
        lock = self.write(tmp_path, plant)
        with pytest.raises(ConfigError) as caught:
            locks.acquire_lock(lock, "profile qwen3", "fix")
        assert f"{lock} is {'a FIFO' if plant == 'fifo' else 'a directory'}" in str(caught.value)
        assert f"rm -r {lock}" in str(caught.value) if plant == "directory" else f"rm {lock}" in str(caught.value)

    def test_status_says_it_and_goes_on(self, tmp_path: Path, plant: str, capsys: pytest.CaptureFixture[str]) -> None:
        lock = self.write(tmp_path, plant)
        assert 0 == status.status_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
        out = capsys.readouterr().out
        assert "qwen3: dead (last phase: serving)" in out and f"lock       {lock}" in out, out

    def test_down_refuses_in_one_line(self, tmp_path: Path, plant: str) -> None:
        lock = self.write(tmp_path, plant)
        with pytest.raises(ConfigError) as caught:
            down.down_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
        assert str(lock) in str(caught.value) and "\n" not in str(caught.value)


def test_a_full_state_disk_at_start_is_one_line_exit_75(tmp_path: Path) -> None:
    """ENOSPC writing the lock's holder line: one line naming the lock and the fix; the lock is not kept."""
    def full_disk(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    path = tmp_path / "lock"
    with pytest.raises(TransientFailure) as caught:
        locks.acquire_lock(path, "profile qwen3", "fix", write=full_disk)
    message = str(caught.value)
    assert 75 == caught.value.exit_code and "\n" not in message
    assert f"cannot write the lock {path} (No space left on device)" in message and "df -h" in message
    assert locks.lock_holder(path) is None  # nothing left holding it
    locks.release_lock(locks.acquire_lock(path, "profile qwen3", "fix"))  # and room again: it starts
