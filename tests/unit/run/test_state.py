"""State files: atomic and private, locks that name their holder, last-known-good records."""

from __future__ import annotations

import ast
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher import statedir
from launcher.errors import EX_CONFIG, LockHeld
from launcher.run import locks, processes, state
from launcher.runstate import Decision, Phase
from tests.conftest import ROOT
from tests.helpers.standins import holding_lock


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
        assert Path(expected) == statedir.state_root(environ)


class TestLocks:
    def test_second_holder_is_told_the_first_pid(self, tmp_path: Path) -> None:
        """Another process holding the lock makes acquire fail with 78 and that process's PID."""
        path = tmp_path / "lock"
        with holding_lock(path) as holder:
            with pytest.raises(LockHeld) as caught:
                locks.acquire_lock(path, "profile qwen3", "stop it with `vllm-launch down qwen3`")
            assert EX_CONFIG == caught.value.exit_code
            assert f"PID {holder.pid}" in str(caught.value)
        lock = locks.acquire_lock(path, "profile qwen3", "fix")  # free again once the holder is gone
        pid, ticks, boot = path.read_text().split()  # who holds it, as `down` checks it
        assert (pid, ticks, boot) == (str(os.getpid()), str(locks.start_ticks(os.getpid())), processes.boot_id())
        locks.release_lock(lock)


class TestLastKnownGood:
    def test_records_are_keyed_by_profile_gpu_driver_and_version(self, tmp_path: Path) -> None:
        key = state.lkg_key("abc", "NVIDIA L40S", 1, "570.1", "0.11.0")
        state.save_lkg(tmp_path, key, {"overrides": {"gpu-memory-utilization": 0.88}})
        record = state.load_lkg(tmp_path, key)
        assert record is not None and {"gpu-memory-utilization": 0.88} == record["overrides"]
        assert state.load_lkg(tmp_path, state.lkg_key("abc", "NVIDIA L40S", 1, "570.1", "0.12.0")) is None


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



def _keys_read(tree: ast.AST, receivers: set[str]) -> set[str]:
    """The literal keys `RECEIVER.get("key")` and `RECEIVER["key"]` read in `tree`."""
    keys: set[str] = set()
    for node in ast.walk(tree):
        target, key = None, None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and isinstance(node.args[0], ast.Constant)):
            target, key = node.func.value, node.args[0].value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            target, key = node.value, node.slice.value
        name = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else None
        if name in receivers and isinstance(key, str):
            keys.add(key)
    return keys


def test_every_key_read_from_state_is_a_key_the_daemon_declares() -> None:
    """state.json is written through runstate.Written (mypy checks every writer against it) and read by
    State.from_dict, status, watch and bench: a key read that no writer declares is a reader of nothing, and a
    renamed key fails here instead of reading as absent for ever."""
    from launcher.runstate import Written

    module = ast.parse((ROOT / "launcher" / "runstate.py").read_text())
    state_class = next(node for node in module.body if isinstance(node, ast.ClassDef) and node.name == "State")
    read = _keys_read(state_class, {"data"})
    for path in [*(ROOT / "launcher" / "observe").glob("*.py"), ROOT / "launcher" / "bench" / "command.py"]:
        read |= _keys_read(ast.parse(path.read_text()), {"raw"})
    assert {"phase", "capacity", "child", "decisions", "agent", "rung", "ladder_exhausted"} <= read, "a reader was missed"
    assert read - set(Written.__annotations__) == set()
