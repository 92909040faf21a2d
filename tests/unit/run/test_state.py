"""State files: atomic and private, locks that name their holder, last-known-good records."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.errors import EX_CONFIG, LockHeld, TransientFailure
from launcher.run import locks, processes, state
from launcher.runstate import Decision, Phase, read_state
from tests.conftest import ROOT


@contextlib.contextmanager
def holding_lock(path: Path, *, ignore_sigterm: bool = False) -> Iterator[subprocess.Popen[str]]:
    """Another `vllm-launch up` that holds the lock at `path` (and, if asked, ignores SIGTERM) until the
    block ends (`down` signals only a process that runs as one)."""
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignore_sigterm else ""
    code = (f"import signal, sys, time, pathlib; sys.path.insert(0, {str(ROOT)!r}); {ignore}"
            f"from launcher.run import state; lock = state.acquire_lock(pathlib.Path({str(path)!r}), 'x', 'y'); "
            "print('held', flush=True); time.sleep(30)")
    script = path.parent / "bin" / "vllm-launch"
    script.parent.mkdir(exist_ok=True)
    script.write_text(code)
    holder = subprocess.Popen([sys.executable, str(script), "up", "qwen3"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and "held" == holder.stdout.readline().strip()
        yield holder
    finally:
        holder.kill()
        holder.wait()


class TestStateFiles:
    def test_state_json_is_private_and_complete(self, tmp_path: Path) -> None:
        """state.json is written whole, mode 0600."""
        store = state.StateStore(tmp_path / "p")
        store.update(phase="starting", attempt=1)
        store.record_decision(Decision(1, "kv_insufficient", "max-model-len 32768 → 8064", "kv_insufficient"))
        data = json.loads(store.path.read_text())
        assert ("starting", 1) == (data["phase"], data["attempt"])
        assert "max-model-len 32768 → 8064" == data["decisions"][0]["change"]
        assert 0o600 == stat.S_IMODE(store.path.stat().st_mode)
        assert [] == [p.name for p in store.path.parent.iterdir() if p.name.startswith(".")]

    @pytest.mark.parametrize(("environ", "expected"), [
        ({"VLLM_LAUNCH_STATE_DIR": "/x", "STATE_DIRECTORY": "/y"}, "/x"),
        ({"STATE_DIRECTORY": "/var/lib/vllm-launch:/other"}, "/var/lib/vllm-launch"),
        ({"XDG_STATE_HOME": "/home/u/.local/state"}, "/home/u/.local/state/vllm-launch"),
    ])
    def test_state_root(self, environ: dict[str, str], expected: str) -> None:
        assert Path(expected) == state.state_root(environ)


class TestLocks:
    def test_second_holder_is_told_the_first_pid(self, tmp_path: Path) -> None:
        """Another process holding the lock makes acquire fail with 78 and that process's PID."""
        path = tmp_path / "lock"
        with holding_lock(path) as holder:
            with pytest.raises(LockHeld) as caught:
                state.acquire_lock(path, "profile qwen3", "stop it with `vllm-launch down qwen3`")
            assert EX_CONFIG == caught.value.exit_code
            assert f"PID {holder.pid}" in str(caught.value)
        lock = state.acquire_lock(path, "profile qwen3", "fix")  # free again once the holder is gone
        pid, ticks, boot = path.read_text().split()  # who holds it, as `down` checks it
        assert (pid, ticks, boot) == (str(os.getpid()), str(locks.start_ticks(os.getpid())), processes.boot_id())
        state.release_lock(lock)


class TestLastKnownGood:
    def test_records_are_keyed_by_profile_gpu_driver_and_version(self, tmp_path: Path) -> None:
        key = state.lkg_key("abc", "NVIDIA L40S", 1, "570.1", "0.11.0")
        state.save_lkg(tmp_path, key, {"overrides": {"gpu-memory-utilization": 0.88}})
        record = state.load_lkg(tmp_path, key)
        assert record is not None and {"gpu-memory-utilization": 0.88} == record["overrides"]
        assert state.load_lkg(tmp_path, state.lkg_key("abc", "NVIDIA L40S", 1, "570.1", "0.12.0")) is None


class TestCommands:
    def test_status_without_state(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert 0 == state.status_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
        assert "no state for qwen3" in capsys.readouterr().out

    def test_status_json_keeps_the_phase_and_says_the_daemon_is_dead(self, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
        """`phase` stays a phase a program can compare; `alive` says that the daemon that wrote it is gone."""
        state.StateStore(tmp_path / "qwen3").update(pid=2**22 + 12345, phase="serving", profile="qwen3")
        environ = {"VLLM_LAUNCH_STATE_DIR": str(tmp_path)}
        assert 0 == state.status_command("qwen3", as_json=True, environ=environ)
        report = json.loads(capsys.readouterr().out)
        assert ("serving", False) == (report["phase"], report["alive"])
        assert 0 == state.status_command("qwen3", environ=environ)
        assert "qwen3: dead (last phase: serving)" in capsys.readouterr().out

    def test_status_reads_a_tampered_state_file_without_a_traceback(self, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
        """The state directory is writable by vLLM: fields of the wrong type read as absent."""
        directory = tmp_path / "qwen3"
        directory.mkdir()
        (directory / "state.json").write_text(json.dumps({
            "profile": "qwen3", "pid": "1", "phase": 7, "url": ["http://x"], "capacity": "full",
            "decisions": [1, {"class": 3, "attempt": "x"}], "counts": {"restarts": {"engine_dead": "9"}}}))
        assert 0 == state.status_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
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
        assert 0 == state.status_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
        out = capsys.readouterr().out
        assert "  error      port busy url http://evil !" in out.splitlines()
        assert [] == [c for c in out if not c.isprintable() and c != "\n"]

    def test_down_when_not_running(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        state.StateStore(tmp_path / "qwen3").update(pid=2**22 + 12345, phase="serving")
        assert 0 == state.down_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
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
            assert 0 == state.down_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
            assert "not running" in capsys.readouterr().out
            assert stranger.poll() is None  # still alive: it was never ours
            assert 0 == state.status_command("qwen3", as_json=True, environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
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
            assert 0 == state.down_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
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
            assert 0 == state.down_command("qwen3", environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
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
                state.down_command("qwen3", timeout=0.5, environ={"VLLM_LAUNCH_STATE_DIR": str(tmp_path)})
            assert 75 == caught.value.exit_code
            assert f"vllm-launch PID {holder.pid} did not exit" in str(caught.value)

def test_state_writes_reach_the_disk_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A power cut after the rename must not leave an empty state.json: the data is fsync'd first."""
    from launcher import statedir

    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(statedir.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    state.StateStore(tmp_path).update(phase="serving")
    assert synced, "write_json_atomic must fsync before renaming"


@pytest.mark.parametrize("broken", ["state", "log"])
def test_an_unwritable_state_or_log_directory_is_78_naming_it(tmp_path: Path, broken: str) -> None:
    """Found before anything starts, as one line with the path and the fix, never a traceback."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    log_dir = blocker if broken == "log" else tmp_path / "logs"
    state_dir = blocker if broken == "state" else tmp_path / "state"
    prof = tmp_path / "p.yaml"
    prof.write_text("model: /models/tiny\nvllm: {host: 127.0.0.1, port: 8123}\n"
                    f"launcher: {{device: cpu, log_file: {log_dir}/vllm.log}}\n")
    done = subprocess.run([sys.executable, "-m", "launcher", "up", str(prof)], capture_output=True, text=True,
                          timeout=60, check=False, cwd=ROOT,
                          env={**os.environ, "VLLM_LAUNCH_STATE_DIR": str(state_dir)})
    expected = "the state directory" if broken == "state" else "launcher.log_file's directory"
    assert done.returncode == 78
    assert f"{expected} {blocker}" in done.stderr and "Traceback" not in done.stderr


class TestProcessIdentity:
    def test_start_time_is_the_kernels_and_ignores_the_wall_clock(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """psutil's create_time adds the wall-clock boot time, which a clock step moves; ours does not."""
        import psutil
        from psutil import _pslinux

        before_ours, before_psutil = processes.start_time(psutil.Process()), psutil.Process().create_time()
        stepped = _pslinux.boot_time() + 3600.0  # the kernel's btime after the clock stepped an hour
        monkeypatch.setattr(_pslinux, "boot_time", lambda: stepped)
        assert abs(psutil.Process().create_time() - before_psutil) > 3000  # what the old identity would see
        assert processes.start_time(psutil.Process()) == before_ours
        assert 0 < before_ours <= time.clock_gettime(time.CLOCK_BOOTTIME)

    def test_a_record_from_another_boot_is_never_trusted(self) -> None:
        me = os.getpid()
        started = processes.start_time(__import__("psutil").Process(me))
        same = {"child": {"boot_id": processes.boot_id(), "known": {str(me): started}}}
        other = {"child": {"boot_id": "another-boot", "known": {str(me): started}}}
        assert [p.pid for p in processes.recorded_children(same)] == [me]
        assert processes.recorded_children(other) == []
        assert processes.recorded_children({"child": {"boot_id": processes.boot_id(), "known": {"x": "y"}}}) == []
        assert processes.recorded_children({"child": None}) == []


def test_the_documented_phases_are_the_phases() -> None:
    """docs/operations.md lists every phase state.json can hold, and nothing else."""
    text = " ".join((ROOT / "docs" / "operations.md").read_text().split())
    listed = text.split("`phase` (", 1)[1].split(":", 1)[0]
    assert {p.strip() for p in listed.split(",")} == {str(p) for p in Phase}
