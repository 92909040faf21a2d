"""The one module that owns the vLLM child: spawn it, stop the whole tree, verify that nothing is left.

`vllm serve` starts an API server, an EngineCore and workers in one process group;
a SIGKILLed API server orphans its engine (which keeps the GPU), and during engine
start-up vLLM swallows SIGTERM. So: spawn in a new session, remember every
descendant ever seen, stop with SIGTERM → grace → SIGKILL of the group and of every
remembered process, reap, and verify that nothing is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import errno
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil
import structlog

from launcher.errors import ConfigError, TransientFailure
from launcher.procstat import is_vllm_title
from launcher.run.logpump import LogPump, RotatingFile
from launcher.run.parentwatch import PARENT_VARIABLE
from launcher.run.processes import (
    adopted,
    boot_id,
    descendants,
    in_session,
    live_processes,
    name_of,
    reap_orphans,
    remembered,
    start_time,
    tree,
)
from launcher.vllm.command import CHILD_ENV, Plan, exec_problem
from launcher.vllm.diagnose import Diagnoser
from launcher.vllm.diagnosis import Diagnosis
from launcher.vllm.versions import DEFAULT_BLOCK_SIZE

log = structlog.get_logger("vllm_launch")

# A failed attempt has nothing to drain: it gets a short grace before the group is killed.
FAILED_ATTEMPT_GRACE_S = 0.3
# During engine start-up vLLM ignores SIGTERM; waiting the full grace there only delays the stop.
STARTUP_GRACE_S = 5.0
# Once the API server has exited, its engine and workers get this long to exit by themselves.
ENGINE_CLEANUP_S = 5.0
# An exec that fails with these fails again the same way: not a failure a retry can fix.
_PERMANENT_EXEC_ERRORS = frozenset({errno.E2BIG, errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR,
                                    errno.ENAMETOOLONG, errno.ELOOP})


@dataclass
class Child:
    """One running attempt: the only mutable object, owned by this module."""

    attempt: int
    plan: Plan
    popen: subprocess.Popen[bytes]
    pump: LogPump
    started: float
    start_time: float  # seconds after boot (processes.start_time): immune to clock steps
    known: dict[int, float] = field(default_factory=dict)  # pid → start_time of every descendant seen
    adopted_pids: set[int] = field(default_factory=set)  # of those, the ones the daemon adopted (a double fork)
    on_record: int = 0  # how many of `known` state.json holds
    titles: dict[int, str] = field(default_factory=dict)  # pid → the title vLLM gave it (VLLM::EngineCore, …)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def pgid(self) -> int:
        return self.popen.pid  # start_new_session: the leader's pid is the group and session id

    def live_pids(self) -> set[int]:
        """Our processes now: the leader's tree, and every remembered descendant still alive as itself (its start
        time checked, so a reused PID is not ours). What may hold our server's socket."""
        return {self.pid, *(proc.pid for proc in tree(self.pid)), *(proc.pid for proc in remembered(self.known))}

    def remember_descendants(self) -> None:
        """Snapshot the tree, and what the daemon adopted from it, so that a process that later escapes the
        group, or left the tree by a double fork, is still stopped. The tree is everything below the leader and
        below every process already on record (an engine whose API server has exited keeps its workers)."""
        roots = {self.pid, *(p.pid for p in remembered(self.known))}
        for proc in [*live_processes([self.pid]), *descendants(roots)]:
            with contextlib.suppress(psutil.Error):
                self.known.setdefault(proc.pid, start_time(proc))
                if not is_vllm_title(self.titles.get(proc.pid, "")):
                    self.titles[proc.pid] = name_of(proc)  # vLLM retitles its engine and workers after their imports
        for proc in adopted(self.pid, self.start_time):
            with contextlib.suppress(psutil.Error):
                self.known.setdefault(proc.pid, start_time(proc))
                if proc.pid not in self.adopted_pids:
                    self.adopted_pids.add(proc.pid)
                    log.info("child.adopted", pid=proc.pid, name=name_of(proc),
                             why="it left vLLM's process tree (a double fork); it is stopped with the tree")


class EndKind(enum.StrEnum):
    """How an attempt (or a serving period) ended."""

    READY = "ready"
    FAILED = "failed"  # a convicted failure line, an exit, or the capacity gate
    TIMED_OUT = "timed_out"  # launcher.startup_timeout or startup_stall
    STOPPED = "stopped"  # SIGTERM/SIGINT
    ENGINE_DEAD = "engine_dead"  # after READY: it exited, /health failed, or it is wedged
    RELOAD = "reload"  # after READY: SIGHUP


@dataclass(frozen=True, slots=True)
class Ending:
    """How an attempt (or a serving period) ended."""

    kind: EndKind
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
    # The stop's own clock, so that a test (or an operator) can tell a drained exit from an escalation at the
    # deadline without timing it from outside: seconds after the SIGTERM.
    grace_s: float = 0.0
    leader_exited_after_s: float | None = None  # vLLM's API server was gone this long after the SIGTERM …
    escalated_after_s: float | None = None  # … or it was still alive at the deadline: SIGKILL this long after

    def to_log(self) -> dict[str, Any]:
        return {"returncode": self.returncode, "leftovers": list(self.leftovers), "grace_s": self.grace_s,
                "leader_exited_after_s": _rounded(self.leader_exited_after_s),
                "escalated_after_s": _rounded(self.escalated_after_s)}


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


def set_child_subreaper() -> bool:
    """Orphaned vLLM processes (a SIGKILLed API server's engine) get re-parented to us, not to init."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(36, 1, 0, 0, 0)) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def child_environment(plan: Plan, secrets: Mapping[str, str], environ: Mapping[str, str] | None = None
                      ) -> dict[str, str]:
    """Our environment minus systemd's notify/watchdog variables (and the parent `up` watches), plus the plan's
    env and the secrets."""
    env = dict(os.environ if environ is None else environ)
    for key in (*CHILD_ENV.strip, PARENT_VARIABLE):
        env.pop(key, None)
    env.update(plan.env)
    env.update(secrets)
    return env


def spawn(plan: Plan, *, attempt: int, secrets: Mapping[str, str], sink: RotatingFile | None, echo: bool = True,
          environ: Mapping[str, str] | None = None, popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
          block_size: int = DEFAULT_BLOCK_SIZE) -> Child:
    """Start `vllm serve` in its own session with stdout and stderr merged into one pipe. What cannot be exec'd
    is one line: ConfigError for what the profile or the binary decides, TransientFailure for the rest."""
    problem = exec_problem(plan, secrets)
    if problem:
        raise ConfigError(f"{problem}; fix it in the profile (or the secret's source)")
    try:
        proc = popen(list(plan.argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     env=child_environment(plan, secrets, environ), start_new_session=True, close_fds=True)
    except OSError as exc:
        message = f"cannot start {plan.argv[0]}: {exc.strerror or exc}"
        if exc.errno in _PERMANENT_EXEC_ERRORS:
            raise ConfigError(f"{message}; check launcher.vllm_bin and the size of the profile's values") from None
        raise TransientFailure(message) from None
    if proc.stdout is None:
        raise RuntimeError("spawn: the child has no stdout pipe")
    pump = LogPump(proc.stdout, sink, echo, Diagnoser(block_size))
    pump.start()
    try:
        created = start_time(psutil.Process(proc.pid))
    except psutil.Error:  # it exited at once; nothing of it is left to recognise
        created = -1.0
    return Child(attempt, plan, proc, pump, time.monotonic(), created, {proc.pid: created})


def outcome(child: Child, kind: EndKind, detail: str, max_model_len: int | None = None) -> Ending:
    diagnosis = child.pump.diagnosis()
    if max_model_len is not None:
        diagnosis = Diagnosis(diagnosis.cls, diagnosis.reason, diagnosis.root_cause,
                              {**diagnosis.numbers, "served_max_model_len": max_model_len}, diagnosis.state,
                              diagnosis.line_number)
    return Ending(kind, child.attempt, diagnosis, child.popen.poll(), tuple(child.pump.tail), detail)


def stop_tree(child: Child, grace_s: float, *, tick: Callable[[], None] = lambda: None,
              cleanup_s: float = ENGINE_CLEANUP_S) -> StopReport:
    """SIGTERM the leader and wait up to `grace_s`; give the engine and workers up to `cleanup_s` more to
    finish their own cleanup (they free shared memory and the GPU); then SIGKILL the group and every
    remembered process, reap, and verify. `tick` runs in every wait (the watchdog)."""
    child.pump.expect_shutdown()
    child.remember_descendants()

    def rescan() -> None:
        # A descendant may leave the session (setsid) and the tree (its parent exits) while the tree stops:
        # every wait looks again at the tree and at what the daemon adopted, and puts the newcomers on record.
        tick()
        child.remember_descendants()

    popen = child.popen
    termed = time.monotonic()
    exited_after: float | None = 0.0 if popen.poll() is not None else None
    escalated_after: float | None = None
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            popen.send_signal(signal.SIGTERM)
        if _wait_until(lambda: popen.poll() is not None, grace_s, rescan):
            exited_after = time.monotonic() - termed
        else:
            escalated_after = time.monotonic() - termed  # the deadline passed: the group is killed below
    if popen.poll() is not None:
        # The leader is gone: its engine shuts down too (SIGKILL now would leave /dev/shm segments). An
        # engine orphaned by a leader that died unasked is told to, with the SIGTERM vLLM handles.
        for proc in remembered(child.known) + in_session(child.pgid):
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _wait_until(lambda: not (remembered(child.known) + in_session(child.pgid)), cleanup_s, rescan)
    child.remember_descendants()
    survivors = remembered(child.known) + in_session(child.pgid)
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
    child.remember_descendants()  # one started in the last moments is not stopped, but it is reported
    leftovers = tuple(f"{p.pid} {name_of(p)}" for p in remembered(child.known) + in_session(child.pgid))
    return StopReport(popen.returncode, tuple(sorted(set(killed))), leftovers, grace_s, exited_after, escalated_after)


def _wait_until(done: Callable[[], bool], seconds: float, tick: Callable[[], None]) -> bool:
    deadline = time.monotonic() + max(0.0, seconds)
    while True:
        if done():
            return True
        tick()
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, 0.05))


def describe(child: Child) -> dict[str, Any]:
    """What state.json records about the child (no environment: it holds the secrets)."""
    return {"pid": child.pid, "pgid": child.pgid, "start_time": child.start_time, "boot_id": boot_id(),
            "attempt": child.attempt, "known": {str(pid): started for pid, started in child.known.items()}}
