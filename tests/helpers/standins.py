"""Real processes standing in for the launcher's daemon and for vLLM: what `status`, `down` and the lock
checks see on a real machine (a PID holding a lock, a command line, a state.json naming them)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from launcher.run import processes, state

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def holding_lock(path: Path, *, ignore_sigterm: bool = False) -> Iterator[subprocess.Popen[str]]:
    """Another `vllm-launch up` that holds the lock at `path` (and, if asked, ignores SIGTERM) until the
    block ends (`down` signals only a process that runs as one)."""
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignore_sigterm else ""
    code = (f"import signal, sys, time, pathlib; sys.path.insert(0, {str(ROOT)!r}); {ignore}"
            f"from launcher.run import locks; lock = locks.acquire_lock(pathlib.Path({str(path)!r}), 'x', 'y'); "
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


HOLD = """
import pathlib, signal, sys, time
sys.path.insert(0, {root!r})
from launcher.run import locks
lock = locks.acquire_lock(pathlib.Path(sys.argv[2]), "profile qwen3", "fix")
print("held", flush=True)
time.sleep(60)
"""


@contextlib.contextmanager
def holder(tmp_path: Path, lock: Path, *, daemon: bool, says: str = "") -> Iterator[subprocess.Popen[str]]:
    """A process holding `lock`: run as `vllm-launch up qwen3` (daemon) or as a plain `python -c` (whose
    command line starts with what it `says`: a process puts what it likes there)."""
    code = ("'''" + says + "'''" if says else "") + HOLD.format(root=str(ROOT))
    if daemon:
        script = tmp_path / "bin" / "vllm-launch"
        script.parent.mkdir(exist_ok=True)
        script.write_text(code)
        argv = [sys.executable, str(script), "up", str(lock)]
    else:
        argv = [sys.executable, "-c", code, "up", str(lock)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and "held" == proc.stdout.readline().strip()
        yield proc
    finally:
        proc.kill()
        proc.wait()


def profile_dir(root: Path) -> Path:
    """The state directory of profile qwen3 under `root`, with a state.json that says it serves."""
    directory = root / "qwen3"
    directory.mkdir(parents=True, mode=0o700)
    (directory / "state.json").write_text('{"profile": "qwen3", "phase": "serving"}')
    return directory


PROFILE = "model: /models/m\nvllm: {port: 8000, host: 127.0.0.1, max-model-len: 1024, shutdown-timeout: 10}\n"
# What that profile renders on the rung the ladder chose (gpu-memory-utilization 0.85), after `serve`.
SERVED = ["serve", "/models/m", "--port", "8000", "--host", "127.0.0.1", "--max-model-len", "1024",
          "--shutdown-timeout", "10", "--gpu-memory-utilization", "0.85"]


@contextlib.contextmanager
def stand_in_vllm(args: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose command line is `python -c … serve MODEL --flags`, as vLLM's entry script's is."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", *args])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


@contextlib.contextmanager
def serving(tmp_path: Path, child_args: list[str] = SERVED, **record: Any) -> Iterator[dict[str, str]]:
    """A daemon (holding the lock) whose state.json records `child_args`' process as its vLLM: profile qwen3
    (PROFILE, unless tmp_path/qwen3.yaml exists), state under tmp_path/state; yields the environment to read it."""
    profile = tmp_path / "qwen3.yaml"
    if not profile.exists():
        profile.write_text(PROFILE)
    directory = tmp_path / "state" / "qwen3"
    directory.mkdir(parents=True, exist_ok=True)
    environ = {"VLLM_LAUNCH_STATE_DIR": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with holding_lock(directory / "lock") as daemon, stand_in_vllm(child_args) as child:
        child_record = {"pid": child.pid, "start_time": processes.start_time(psutil.Process(child.pid)),
                        "boot_id": processes.boot_id()}
        fields = {"profile": "qwen3", "source": str(profile), "pid": daemon.pid, "phase": "starting",
                  "rung": {"gpu-memory-utilization": 0.85}, "vllm_version": "0.32.0", "child": child_record,
                  "sets": [], **record}
        state.StateStore(directory).update(**fields)
        environ["DAEMON_PID"] = str(daemon.pid)
        yield environ
