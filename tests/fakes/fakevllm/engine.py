"""The engine side of the tree: `VLLM::EngineCore` and its `VLLM::Worker_TP<i>` processes.

Each is a fresh interpreter started with argv == ["VLLM::<name>"] (what setproctitle leaves in
/proc/PID/cmdline) and its comm set with prctl, so psutil.name() is the full title. The program comes
on stdin (so no path or option shows in the command line), its configuration as a JSON argument.

EngineCore: ignores SIGINT and SIGHUP; on SIGTERM it stops its workers, spends engine_cleanup_s on
"cleanup", removes its shared-memory marker ($FAKE_VLLM_STATE/shm-<pid>, made at start), releases
its GPU memory and exits 0. It does not watch its parent: a SIGKILLed API server leaves it running
(an orphan holding the GPU), as real vLLM does. Told by the API server that serving began, it exits 1
by itself after die_after_s (no cleanup: the marker stays; its GPU entries still get held_until).
It says "ready" on a pipe once its tree is up.

Worker: registers its device's memory, exits on SIGTERM or once its engine is gone (its parent pid
changes; checked every 0.1 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from fakevllm import gpu
from fakevllm.common import FAKES, interpreter, mark, set_process_name, state_dir

ENGINE = "VLLM::EngineCore"
BOOT = "import sys\nsys.path.insert(0, {fakes!r})\nfrom fakevllm.engine import {entry}\n{entry}({config!r})\n"


def spawn(title: str, entry: str, config: dict[str, Any], pass_fds: tuple[int, ...] = (),
          python: str | None = None) -> subprocess.Popen[bytes]:
    """Start `entry(config)` in a new interpreter whose whole command line is `title` (same group and session)."""
    proc = subprocess.Popen([title], executable=python or interpreter(), stdin=subprocess.PIPE, pass_fds=pass_fds)
    assert proc.stdin is not None
    try:
        proc.stdin.write(BOOT.format(fakes=str(FAKES), entry=entry, config=json.dumps(config)).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    return proc


def read_lines(fd: int, count: int, timeout: float) -> int:
    """Read up to `count` lines from fd within timeout; how many came (EOF or the timeout end it early)."""
    deadline = time.monotonic() + timeout
    seen = 0
    buffer = b""
    while seen < count:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buffer += chunk
        seen = buffer.count(b"\n")
    return seen


def _quiet_signals() -> threading.Event:
    """SIGINT and SIGHUP ignored (the API server handles the terminal); SIGTERM sets the returned event."""
    term = threading.Event()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: term.set())
    return term


def engine(config_json: str) -> None:
    config = json.loads(config_json)
    set_process_name(ENGINE)
    term = _quiet_signals()
    pid = os.getpid()
    marker = _shm_marker(pid)
    tp = int(config["tp"])
    gpu_memory = config.get("gpu_memory")
    workers = _start_workers(config, pid) if tp > 1 else []
    if tp == 1 and gpu_memory is not None:
        gpu.register(0, ENGINE, int(gpu_memory))
    serving = threading.Event()
    threading.Thread(target=_read_control, args=(int(config["control_fd"]), serving), daemon=True).start()
    _say_ready(int(config["hello_fd"]))
    mark("engine_started", tp=tp)
    die_after = config.get("die_after_s")
    serving_since: float | None = None
    while not term.wait(0.05):
        if serving.is_set() and serving_since is None:
            serving_since = time.monotonic()
        if die_after is not None and serving_since is not None and time.monotonic() - serving_since >= die_after:
            mark("engine_died")
            if tp == 1 and gpu_memory is not None:
                gpu.release(float(config["release_delay_s"]))  # the driver frees a crashed process's memory late
            os._exit(1)  # a crash: no cleanup, the shared-memory marker stays
    for worker in workers:
        _signal(worker.pid, signal.SIGTERM)
    time.sleep(float(config["cleanup_s"]))  # freeing shared memory and the device takes a while
    if marker is not None:
        marker.unlink(missing_ok=True)
    for worker in workers:
        try:
            worker.wait(timeout=2)
        except subprocess.TimeoutExpired:
            worker.kill()
    if tp == 1 and gpu_memory is not None:
        gpu.release(float(config["release_delay_s"]))
    mark("engine_exited")
    os._exit(0)


def worker(config_json: str) -> None:
    config = json.loads(config_json)
    name = f"VLLM::Worker_TP{config['rank']}"
    set_process_name(name)
    term = _quiet_signals()
    engine_pid = int(config["engine_pid"])
    gpu_memory = config.get("gpu_memory")
    if gpu_memory is not None:
        gpu.register(int(config["rank"]), name, int(gpu_memory))
    _say_ready(int(config["hello_fd"]))
    while not term.wait(0.1):
        if os.getppid() != engine_pid:
            break  # the engine is gone (its death pipe, in vLLM)
    if gpu_memory is not None:
        gpu.release(float(config["release_delay_s"]))
    os._exit(0)


def _shm_marker(pid: int) -> Path | None:
    where = state_dir()
    if where is None:
        return None
    marker = where / f"shm-{pid}"
    try:
        marker.write_text(f"{pid}\n")
    except OSError:
        return None
    return marker


def _start_workers(config: dict[str, Any], engine_pid: int) -> list[subprocess.Popen[bytes]]:
    read_end, write_end = os.pipe()
    workers = []
    for rank in range(int(config["tp"])):
        worker_config = {"rank": rank, "engine_pid": engine_pid, "hello_fd": write_end,
                         "gpu_memory": config.get("gpu_memory"), "release_delay_s": config["release_delay_s"]}
        workers.append(spawn(f"VLLM::Worker_TP{rank}", "worker", worker_config, (write_end,), config["python"]))
    os.close(write_end)
    read_lines(read_end, len(workers), timeout=10)
    os.close(read_end)
    return workers


def _read_control(fd: int, serving: threading.Event) -> None:
    """Lines from the API server: `serving` once it serves. EOF (it exited or was killed) changes nothing."""
    with os.fdopen(fd, "rb") as control:
        for line in control:
            if line.strip() == b"serving":
                serving.set()


def _say_ready(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, b"ready\n")
    os.close(fd)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
