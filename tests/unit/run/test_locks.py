"""The state directory is not trusted blindly: no link is followed, a directory others can write is refused,
looking at a lock never takes it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.errors import ConfigError
from launcher.run import locks
from tests.conftest import ROOT


class TestNoLinkIsFollowed:
    @pytest.mark.parametrize("which", ["profile", "port"])
    def test_a_planted_link_is_refused_and_its_target_untouched(self, tmp_path: Path, which: str) -> None:
        """As root, `up` truncated a link's target and wrote its PID into it; now the link is refused by name."""
        target = tmp_path / "precious"
        target.write_text("root's data\n")
        root = tmp_path / "state"
        (root / "qwen3").mkdir(parents=True, mode=0o700)
        (root / "ports").mkdir(mode=0o700)
        link = root / "qwen3" / "lock" if which == "profile" else root / "ports" / "8000.lock"
        link.symlink_to(target)
        with pytest.raises(ConfigError) as caught, locks.held_locks(root / "qwen3", "qwen3", 8000, root):
            pass
        assert f"{link} is a symbolic link" in str(caught.value) and 78 == caught.value.exit_code
        assert "root's data\n" == target.read_text()

    def test_a_lock_file_is_created_0600(self, tmp_path: Path) -> None:
        old = os.umask(0o022)
        try:
            lock = locks.acquire_lock(tmp_path / "lock", "profile qwen3", "fix")
        finally:
            os.umask(old)
        locks.release_lock(lock)
        assert 0o600 == stat.S_IMODE((tmp_path / "lock").stat().st_mode)


class TestStateDirectory:
    """A state directory that someone else owns or can write is refused before anything starts: one line, 78."""

    def up(self, tmp_path: Path, state_dir: Path) -> subprocess.CompletedProcess[str]:
        prof = tmp_path / "qwen3.yaml"
        prof.write_text("model: /models/tiny\nvllm: {host: 127.0.0.1, port: 8123}\nlauncher: {device: cpu}\n")
        return subprocess.run([sys.executable, "-m", "launcher", "up", str(prof)], capture_output=True, text=True,
                              timeout=60, check=False, cwd=ROOT,
                              env={**os.environ, "VLLM_LAUNCH_STATE_DIR": str(state_dir)})

    @pytest.mark.parametrize(("case", "expected"), [
        ("world-writable", "is writable by group or others (mode 0777); `chmod go-w {dir}`"),
        ("group-writable", "is writable by group or others (mode 0770); `chmod go-w {dir}`"),
        ("another owner", "is owned by uid 4242, not by this user (uid {uid}); `chown {uid} {dir}`"),
        ("linked profile", "is a symbolic link, which vllm-launch does not follow there; remove it"),
    ])
    def test_refused_naming_the_directory_and_the_fix(self, tmp_path: Path, case: str, expected: str) -> None:
        root = tmp_path / "state"
        root.mkdir(mode=0o700)
        refused = root
        if case == "world-writable":
            root.chmod(0o777)
        elif case == "group-writable":
            root.chmod(0o770)
        elif case == "another owner":
            if os.geteuid() != 0:
                pytest.skip("giving a directory to another user needs root")
            os.chown(root, 4242, -1)
        else:
            elsewhere = tmp_path / "elsewhere"
            elsewhere.mkdir(mode=0o700)
            refused = root / "qwen3"
            refused.symlink_to(elsewhere)
        done = self.up(tmp_path, root)
        assert 78 == done.returncode, done.stderr
        line = expected.format(dir=refused, uid=os.geteuid())
        assert f"the state directory {refused} {line}" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        if case == "linked profile":
            assert [] == list((tmp_path / "elsewhere").iterdir()), "nothing is written through the link"

    def test_a_private_directory_is_created_0700(self, tmp_path: Path) -> None:
        done = self.up(tmp_path, tmp_path / "fresh" / "state")
        assert "the state directory" not in done.stderr, done.stderr
        for directory in (tmp_path / "fresh" / "state", tmp_path / "fresh" / "state" / "qwen3"):
            assert 0o700 == stat.S_IMODE(directory.stat().st_mode), directory


ACQUIRE_LOOP = """
import pathlib, sys
sys.path.insert(0, {root!r})
from launcher.errors import LockHeld
from launcher.run import locks
path, refused = pathlib.Path(sys.argv[1]), []
print("ready", flush=True)
sys.stdin.readline()
for _ in range(int(sys.argv[2])):
    try:
        lock = locks.acquire_lock(path, "profile qwen3", "fix")
    except LockHeld as exc:
        refused.append(str(exc))
        continue
    locks.release_lock(lock)
lock = locks.acquire_lock(path, "profile qwen3", "fix")
pathlib.Path(sys.argv[3]).touch()
print(len(refused), refused[:1], flush=True)
sys.stdin.readline()
"""


def test_looking_at_the_lock_never_refuses_a_start(tmp_path: Path) -> None:
    """`up`'s lock acquisition in a tight loop while `status`/`down` probe the same lock: zero refusals
    (the probe used to take the lock for an instant: 2,143 refusals in 13,022 starts)."""
    path, done = tmp_path / "lock", tmp_path / "done"
    starts = 2000
    proc = subprocess.Popen([sys.executable, "-c", ACQUIRE_LOOP.format(root=str(ROOT)), str(path), str(starts),
                             str(done)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert "ready" == proc.stdout.readline().strip()
        probes = 0
        proc.stdin.write("go\n")
        proc.stdin.flush()
        while not done.exists():  # as long as the starts go on (they are bounded, not the time)
            locks.lock_holder(path)
            probes += 1
        assert probes > 0
        result = proc.stdout.readline().split(" ", 1)
        assert "0" == result[0], f"{result[0]} of {starts} starts refused while probing: {result[1:]}"
        assert proc.pid == locks.lock_holder(path)  # the probe does see the holder
    finally:
        proc.kill()
        proc.wait()
