"""The one module that owns the vLLM child: spawn, pump its output, wait, stop the whole tree.

`vllm serve` starts an API server, an EngineCore and workers in one process group;
a SIGKILLed API server orphans its engine (which keeps the GPU), and during engine
start-up vLLM swallows SIGTERM. So: spawn in a new session, remember every
descendant ever seen, stop with SIGTERM → grace → SIGKILL of the group and of every
remembered process, reap, and verify that nothing is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from launcher.run import logs
from launcher.vllm.command import CHILD_ENV, Plan
from launcher.vllm.diagnose import Diagnoser, Diagnosis
from launcher.vllm.signatures import LogEvent

TAIL_LINES = 50
# How long a generic fatal line ("EngineCore failed to start") waits for its root cause.
ROOT_CAUSE_WAIT_S = 2.0
# A failed attempt has nothing to drain: it gets a short grace before the group is killed.
FAILED_ATTEMPT_GRACE_S = 0.3
# During engine start-up vLLM ignores SIGTERM; waiting the full grace there only delays the stop.
STARTUP_GRACE_S = 5.0
_EOF = LogEvent("eof", "")
_NOTABLE = frozenset({"failure", "kv_tokens", "concurrency", "available_kv", "model_loading", "progress",
                      "server_starting", "startup_complete", "version", "gpu_blocks", "shutdown"})


class RotatingFile:
    """vLLM's log on disk, size-capped: `log` → `log.1` … `log.N` when it grows past max_bytes."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handle: IO[str] = path.open("a", encoding="utf-8")
        self.size = self.handle.tell()

    def write(self, line: str) -> None:
        text = line + "\n"
        if self.max_bytes and self.size + len(text) > self.max_bytes:
            self._rotate()
        self.handle.write(text)
        self.handle.flush()
        self.size += len(text)

    def _rotate(self) -> None:
        self.handle.close()
        for index in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{index}")
            if older.exists():
                older.replace(self.path.with_name(f"{self.path.name}.{index + 1}"))
        if self.backups:
            self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink(missing_ok=True)
        self.handle = self.path.open("a", encoding="utf-8")
        self.size = 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.handle.close()


class LogPump(threading.Thread):
    """Reads the child's merged output line by line, so a full pipe never blocks vLLM."""

    def __init__(self, stream: IO[bytes], sink: RotatingFile | None, echo: bool, diagnoser: Diagnoser) -> None:
        super().__init__(name="vllm-log-pump", daemon=True)
        self.stream = stream
        self.sink = sink
        self.echo = echo
        self.diagnoser = diagnoser
        self.lock = threading.Lock()
        self.events: queue.Queue[LogEvent] = queue.Queue()
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.last_output = time.monotonic()
        self.fatal_at: float | None = None  # monotonic time the first specific fatal line was read

    def run(self) -> None:
        for raw in iter(self.stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            self.last_output = time.monotonic()
            if self.sink is not None:
                try:
                    self.sink.write(line)
                except OSError:
                    self.sink = None  # a full disk must not stop the pump (and so vLLM)
            if self.echo:
                logs.echo_child_line(line.rstrip("\r"))
            self.tail.append(line)
            with self.lock:
                event = self.diagnoser.feed(line)
                if event is not None and event.fatal == "specific" and self.fatal_at is None and self.diagnoser.decided:
                    self.fatal_at = self.last_output
            if event is not None and event.kind in _NOTABLE:
                self.events.put(event)
        self.events.put(_EOF)

    def diagnosis(self) -> Diagnosis:
        with self.lock:
            return self.diagnoser.diagnosis()

    def expect_shutdown(self) -> None:
        with self.lock:
            self.diagnoser.expect_shutdown()


@dataclass
class Child:
    """One running attempt: the only mutable object, owned by this module."""

    attempt: int
    plan: Plan
    popen: subprocess.Popen[bytes]
    pump: LogPump
    started: float
    create_time: float
    known: dict[int, float] = field(default_factory=dict)  # pid → create_time of every descendant seen

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def pgid(self) -> int:
        return self.popen.pid  # start_new_session: the leader's pid is the group and session id

    def remember_descendants(self) -> None:
        """Snapshot the tree now, so a process that later escapes the group is still stopped."""
        for proc in _tree(self.pid):
            with contextlib.suppress(psutil.Error):
                self.known.setdefault(proc.pid, proc.create_time())


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt (or a serving period) ended."""

    kind: str  # ready, failed, timed_out, stopped, engine_dead
    attempt: int
    diagnosis: Diagnosis
    returncode: int | None = None
    tail: tuple[str, ...] = ()
    detail: str = ""
    decision_latency_s: float | None = None  # fatal line read → child stopped


@dataclass(frozen=True, slots=True)
class StopReport:
    returncode: int | None
    killed: tuple[int, ...]
    leftovers: tuple[str, ...]  # "pid name" of anything still alive after the stop


def set_child_subreaper() -> bool:
    """Orphaned vLLM processes (a SIGKILLed API server's engine) get re-parented to us, not to init."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(36, 1, 0, 0, 0)) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def child_environment(plan: Plan, secrets: Mapping[str, str], environ: Mapping[str, str] | None = None
                      ) -> dict[str, str]:
    """Our environment minus systemd's notify/watchdog variables, plus the plan's env and the secrets."""
    env = dict(os.environ if environ is None else environ)
    for key in CHILD_ENV.strip:
        env.pop(key, None)
    env.update(plan.env)
    env.update(secrets)
    return env


def spawn(plan: Plan, *, attempt: int, secrets: Mapping[str, str], sink: RotatingFile | None, echo: bool = True,
          environ: Mapping[str, str] | None = None, popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
          block_size: int = 16) -> Child:
    """Start `vllm serve` in its own session with stdout and stderr merged into one pipe."""
    proc = popen(list(plan.argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                 env=child_environment(plan, secrets, environ), start_new_session=True, close_fds=True)
    if proc.stdout is None:
        raise RuntimeError("spawn: the child has no stdout pipe")
    pump = LogPump(proc.stdout, sink, echo, Diagnoser(block_size))
    pump.start()
    try:
        created = psutil.Process(proc.pid).create_time()
    except psutil.Error:
        created = time.time()
    return Child(attempt, plan, proc, pump, time.monotonic(), created, {proc.pid: created})


# --------------------------------------------------------------------------- waiting


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    """How to tell that the server is ready: /health, /v1/models, optionally a completion."""

    health: Callable[[], bool]
    models: Callable[[], tuple[bool, str, int | None]]
    completion: Callable[[], tuple[bool, str]] | None = None
    interval_s: float = 0.5


def wait_ready(child: Child, stop: threading.Event, check: ReadyCheck, *, on_event: Callable[[LogEvent], None],
               tick: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.monotonic) -> Outcome:
    """Block until the server is ready, an attempt-ending line is read, it exits, stalls, or we are stopped.

    The first specific fatal line decides at once: vLLM can hang after a fatal error,
    or exit 0. A generic one ("EngineCore failed to start") waits briefly for its root cause.
    """
    plan = child.plan
    deadline = child.started + plan.startup_timeout_s
    next_probe = clock()
    next_snapshot = clock()
    generic_since: float | None = None
    models_info: tuple[bool, str, int | None] = (False, "", None)
    while True:
        if stop.is_set():
            return _outcome(child, "stopped", "stop requested")
        try:
            event = child.pump.events.get(timeout=0.1)
        except queue.Empty:
            event = None
        if event is not None and event is not _EOF:
            on_event(event)
        tick()
        diagnoser = child.pump.diagnoser
        with child.pump.lock:
            decided, pending = diagnoser.decided, diagnoser.pending
        if decided:
            return _outcome(child, "failed", "fatal log line")
        now = clock()
        if pending:
            generic_since = generic_since or now
            if now - generic_since >= ROOT_CAUSE_WAIT_S:
                return _outcome(child, "failed", "start-up failed (no specific root cause)")
        if event is _EOF or child.popen.poll() is not None:
            child.pump.join(timeout=2.0)
            return _outcome(child, "failed", f"vLLM exited with {child.popen.wait()}")
        if now >= next_snapshot:
            child.remember_descendants()
            next_snapshot = now + 2.0
        silent = now - child.pump.last_output
        if silent >= plan.startup_stall_s:
            return _outcome(child, "timed_out", f"no output for {silent:.0f}s (launcher.startup_stall)")
        if now >= deadline:
            return _outcome(child, "timed_out", f"not ready after {plan.startup_timeout_s:.0f}s "
                                                "(launcher.startup_timeout)")
        if now >= next_probe:
            next_probe = now + check.interval_s
            if check.health():
                models_info = check.models()
                if models_info[0] and (check.completion is None or check.completion()[0]):
                    child.remember_descendants()
                    return _outcome(child, "ready", models_info[1], max_model_len=models_info[2])


def _outcome(child: Child, kind: str, detail: str, max_model_len: int | None = None) -> Outcome:
    diagnosis = child.pump.diagnosis()
    if max_model_len is not None:
        diagnosis = Diagnosis(diagnosis.cls, diagnosis.reason, diagnosis.root_cause,
                              {**diagnosis.numbers, "served_max_model_len": max_model_len}, diagnosis.state,
                              diagnosis.line_number)
    return Outcome(kind, child.attempt, diagnosis, child.popen.poll(), tuple(child.pump.tail), detail)


def watch(child: Child, stop: threading.Event, *, health: Callable[[], bool], interval_s: float, failures: int,
          tick: Callable[[], None], clock: Callable[[], float] = time.monotonic) -> Outcome:
    """After READY: return when we are stopped, the engine dies (log, exit, or failed health checks)."""
    failed = 0
    next_probe = clock() + interval_s
    next_snapshot = clock()
    while True:
        if stop.is_set():
            return _outcome(child, "stopped", "stop requested")
        try:
            event = child.pump.events.get(timeout=0.5)
        except queue.Empty:
            event = None
        if event is not None and event.kind == "failure" and event.failure == "engine_dead":
            return _outcome(child, "engine_dead", event.message)
        if event is _EOF or child.popen.poll() is not None:
            child.pump.join(timeout=2.0)
            return _outcome(child, "engine_dead", f"vLLM exited with {child.popen.wait()} while serving")
        tick()
        now = clock()
        if now >= next_snapshot:
            child.remember_descendants()
            next_snapshot = now + 10.0
        if now >= next_probe:
            next_probe = now + interval_s
            failed = 0 if health() else failed + 1
            if failed >= failures:
                return _outcome(child, "engine_dead", f"/health failed {failed} times in a row")


# --------------------------------------------------------------------------- stopping


def _tree(pid: int) -> list[psutil.Process]:
    try:
        leader = psutil.Process(pid)
        return [leader, *leader.children(recursive=True)]
    except psutil.Error:
        return []


def _in_session(sid: int) -> list[psutil.Process]:
    """Every live process of the child's session (its group leader started it with setsid)."""
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(proc.pid) == sid:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def _remembered(known: Mapping[int, float]) -> list[psutil.Process]:
    """The remembered processes still alive; a matching start time guards against PID reuse."""
    return [proc for proc in live_processes(known) if abs(proc.create_time() - known[proc.pid]) < 0.01]


def reap_orphans(tracked: subprocess.Popen[bytes] | None = None) -> list[int]:
    """Reap adopted zombies (we are a subreaper or PID 1) without stealing the tracked child's status.

    A plain waitpid(-1) would also reap vLLM's main process, after which Popen.wait()
    reports 0 (ECHILD): peek with WNOWAIT, and let Popen reap its own child.
    """
    reaped = []
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            break
        if info is None or info.si_pid == 0:
            break
        if tracked is not None and info.si_pid == tracked.pid:
            tracked.poll()
            if tracked.returncode is None:
                break
            continue
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info.si_pid, 0)
            reaped.append(info.si_pid)
    return reaped


def stop_tree(child: Child, grace_s: float) -> StopReport:
    """SIGTERM the leader, wait up to `grace_s`, SIGKILL the group and every remembered process, reap, verify."""
    child.pump.expect_shutdown()
    child.remember_descendants()
    popen = child.popen
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            popen.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=max(0.0, grace_s))
    survivors = _remembered(child.known) + _in_session(child.pgid)
    killed = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pgid, signal.SIGKILL)
    for proc in survivors:
        with contextlib.suppress(psutil.Error):
            proc.kill()
            killed.append(proc.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=10)
    psutil.wait_procs(survivors, timeout=5)
    reap_orphans(popen)
    child.pump.join(timeout=2.0)
    leftovers = tuple(f"{p.pid} {_name(p)}" for p in _remembered(child.known) + _in_session(child.pgid))
    return StopReport(popen.returncode, tuple(sorted(set(killed))), leftovers)


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return "?"


def leftover_vllm_processes(own_pids: Mapping[int, float]) -> list[psutil.Process]:
    """Processes recorded in our state by an earlier run that are still alive (same pid and start time)."""
    return _remembered(own_pids)


def live_processes(pids: Iterable[int]) -> list[psutil.Process]:
    """The processes with these PIDs that are alive now (a zombie is not)."""
    alive = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            continue
    return alive


def kill_processes(procs: list[psutil.Process], grace_s: float = 5.0) -> list[str]:
    """Terminate then kill processes we own; returns what could not be stopped."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _, alive = psutil.wait_procs(alive, timeout=5)
    return [f"{p.pid} {_name(p)}" for p in alive]


def describe(child: Child) -> dict[str, Any]:
    """What state.json records about the child (no environment: it holds the secrets)."""
    return {"pid": child.pid, "pgid": child.pgid, "create_time": child.create_time, "attempt": child.attempt,
            "known": {str(pid): created for pid, created in child.known.items()}}
