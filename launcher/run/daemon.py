"""`vllm-launch up`: the run as a sequence of stages, under the profile's lock, until SIGTERM (SIGHUP reloads).

prelaunch (leftovers, port, GPU preflight) → startup (attempts up the ladder until READY) →
serving (watch; restart a dead engine) → shutdown. Signals reach an Event through a wakeup pipe; every
wait is on it, so SIGTERM ends everything at once, whatever the daemon is doing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import structlog

from launcher.config import nodes, validate
from launcher.config.load import load, without_env_values
from launcher.config.profile import FlagValue, Profile
from launcher.errors import EX_OK, ConfigError, LadderExhausted, LauncherError, ProfileError, UsageError
from launcher.oneline import one_line
from launcher.run import (
    container,
    ladder,
    listener,
    logs,
    metrics,
    parentwatch,
    prelaunch,
    reload,
    serving,
    startup,
    state,
    supervisor,
    upkeep,
)
from launcher.run.locks import held_locks
from launcher.run.session import Installed, RunConfig, Session, Stopped, describe_overrides
from launcher.run.supervisor import EndKind
from launcher.runstate import Decision, Phase
from launcher.statedir import ensure_state_dirs, ensure_writable_dir, read_json, state_root

log = structlog.get_logger("vllm_launch")


@contextlib.contextmanager
def stop_on_signals() -> Iterator[tuple[threading.Event, threading.Event]]:
    """SIGTERM and SIGINT set the stop Event, SIGHUP the reload Event (and nothing else: a closed terminal
    or `systemctl reload` never kills the daemon and orphans vLLM); the old handlers come back on exit.

    The handlers do nothing in Python: the interpreter writes each signal's number to a wakeup pipe and
    a thread sets the Events. A handler that set an Event itself could deadlock: it runs on the main
    thread between bytecodes, maybe while that thread holds the Event's own lock inside `Event.wait`.
    """
    stop, reload = threading.Event(), threading.Event()
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    os.set_blocking(read_fd, True)

    def relay() -> None:
        while True:
            try:
                data = os.read(read_fd, 64)
            except InterruptedError:
                continue
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum == 0:
                    return  # our own "stop relaying" byte
                (reload if signum == signal.SIGHUP else stop).set()

    def ignore(signum: int, frame: FrameType | None) -> None:
        """The wakeup fd carries the signal; Python needs a handler installed for that to happen."""

    relay_thread = threading.Thread(target=relay, name="signal-relay", daemon=True)
    relay_thread.start()
    old_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    previous = {sig: signal.signal(sig, ignore) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        yield stop, reload
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        signal.set_wakeup_fd(old_wakeup)
        with contextlib.suppress(OSError):
            os.write(write_fd, b"\0")
        relay_thread.join(timeout=1.0)
        for fd in (read_fd, write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def run(profile: Profile, stop: threading.Event, *, inventory_path: str | None = None, console: bool = True,
        verbose: bool = False, node_rank: int | None = None,
        reload: threading.Event | None = None, sets: tuple[str, ...] = ()) -> int:
    """Hold the profile's locks and state for the whole run; every way out stops the child."""
    environ = dict(os.environ)
    root = state_root(environ)
    directory = ensure_state_dirs(root, profile.name)
    if profile.launcher.log_file is not None:
        ensure_writable_dir(profile.launcher.log_file.parent, "launcher.log_file's directory",
                            "fix its permissions or point log_file somewhere writable")
    where = None if profile.nodes is None else nodes.placement(profile.nodes, profile.source, node_rank, environ)
    if where is not None and where.backend == "ray" and not where.head:
        raise ConfigError(f"nodes.backend is ray: only the head (rank 0) runs `vllm-launch up`; join this node to "
                          f"the Ray cluster instead (`ray start --address={where.master_addr}:6379`)")
    # The earlier run's record (its processes, to be stopped): one that cannot be read is ignored, not a crash
    # before the lock that a service manager would restart forever.
    previous = read_json(directory / "state.json", lambda exc: log.warning(
        "state.unreadable", error=str(exc), action="ignored: processes the earlier run left are not known"))
    replayed, env_keys = without_env_values(sets)
    with held_locks(directory, profile.name, None if where and not where.head else profile.port, root):
        store = state.StateStore(directory)
        exporter = _start_metrics(profile, store)
        store.update(profile=profile.name, source=profile.source, profile_digest=profile.digest, pid=os.getpid(),
                     phase=Phase.PREFLIGHT, started_at=time.time(), decisions=[], attempt=0,
                     capacity=None, error=None, served_model_name=None, url=None,
                     restart_window_s=profile.launcher.restart.window_s,
                     # For `status`'s drift, which renders the profile as a reload would. env values
                     # never reach vLLM's argv and may be secrets: only their keys are kept.
                     sets=replayed, env_sets=env_keys,
                     # The earlier run's processes stay on record until they are stopped (_run): a crash
                     # in between must not forget them.
                     child=previous.get("child") if isinstance(previous, dict) else None)
        config = RunConfig(profile, environ, inventory_path=inventory_path, console=console, verbose=verbose,
                           sets=sets, placement=where)
        session = Session(config, stop, store, reload=reload or threading.Event())
        session.notify(STATUS="preflight")
        try:
            return _run(session, directory, previous)
        except Stopped as stopped:
            return _shutdown(session, "signal", stopped.live)
        except LauncherError as exc:
            # ladder_exhausted: exit 75 either way, but only this one the profile's flags decided (tune caches it)
            store.update(phase=Phase.FAILED, error=one_line(exc, 0), ladder_exhausted=isinstance(exc, LadderExhausted))
            session.notify(STATUS=f"failed: {str(exc)[:200]}")
            log.error("failed", exit_code=exc.exit_code, error=str(exc))
            raise
        finally:
            if session.ready is not None:  # an error while serving: the server goes with the run
                upkeep.stop(session, session.ready.child, profile.launcher.stop_grace_s)
            if exporter is not None:
                exporter.stop()


def _start_metrics(profile: Profile, store: state.StateStore) -> metrics.Exporter | None:
    """Metrics start before anything else, so a crash loop shows in them; a taken port is a config error."""
    if profile.launcher.metrics is None:
        return None
    exporter = metrics.Exporter(profile.launcher.metrics, profile.name)
    try:
        exporter.start()
    except OSError as exc:
        settings = profile.launcher.metrics
        raise ConfigError(f"launcher.metrics.port: cannot serve on {settings.address}:{settings.port} "
                          f"({exc.strerror or exc}); pick a free port") from None
    store.listeners.append(exporter.observe)
    return exporter


def _run(session: Session, directory: Path, previous: Any) -> int:
    supervisor.set_child_subreaper()
    prelaunch.stop_recorded_leftovers(previous)
    session.store.update(child=None)
    where = session.config.placement
    if not session.config.worker:
        listener.check_port(session.profile.host, session.profile.port)
    if where is not None:
        log.info("nodes.placement", rank=where.rank, of=where.count, head=f"{where.master_addr}:{where.master_port}",
                 backend=where.backend,
                 model=f"{session.profile.model}: checked on this node only; it must be at the same path on every node")
        if where.backend == "ray":
            prelaunch.check_ray(session.profile, session.run_command)
    session.check_stop()
    session.ready = startup.start(session, _prepare(session, directory))
    while True:
        outcome = serving.serve(session)
        if outcome.kind is EndKind.STOPPED:
            return _shutdown(session, "signal", None)
        if outcome.kind is EndKind.RELOAD:
            candidate = reload.check(session)
            if candidate is not None:  # changed and checked: vLLM stops, and starts again from the new profile
                _roll(session, candidate, directory)
            continue  # unchanged or refused: the server that answers goes on serving
        ended, session.ready = session.ready, None
        if ended is None:
            raise RuntimeError("the serving watch returned without a ready server")
        serving.restart_or_give_up(session, ended.child, outcome)
        session.ready = startup.start(session, dict(ended.overrides))


def _roll(session: Session, candidate: reload.Candidate, directory: Path) -> None:
    """Stop vLLM and start it with the checked new profile; when that fails, start the old profile again on the
    rung it served on. A failure of the old one too ends the run as any failed start does."""
    old_config, old_installed, old_ready = session.config, session.vllm, session.ready
    if old_ready is not None:
        reload.stop_for(session, candidate, old_ready.child)
    session.ready, session.config = None, candidate.config
    reload.record(session, reloading=True)
    try:
        session.ready = startup.start(session, _prepare(session, directory, candidate.installed))
    except LauncherError as exc:
        reason = reload.failed(session, exc, old_config.profile.digest)
        session.config, session.installed = old_config, old_installed
        reload.record(session, reloading=True, outcome="reverted", reason=reason)
        session.ready = startup.start(session, dict(old_ready.overrides) if old_ready is not None else {})
        return
    reload.record(session, outcome="applied")


def _prepare(session: Session, directory: Path, installed: Installed | None = None) -> dict[str, FlagValue | None]:
    """What vLLM is, the flags it accepts, the GPU preflight: the overrides the first attempt starts with.
    `installed`: the vLLM a reload already probed while the old one served."""
    prof = session.profile
    # Each probe can take many seconds (vLLM imports torch): a SIGTERM ends it and the run at once.
    session.installed = installed or prelaunch.probe_vllm(session.config, session.run_command)
    session.check_stop()
    log.info("preflight.vllm", vllm=session.vllm.vllm_bin, version=session.vllm.semantics.version,
             flags=session.vllm.catalog.source)
    start, gpu = prelaunch.preflight(session)
    session.check_stop()
    session.installed = installed = dataclasses.replace(
        session.vllm, gpu=gpu, lkg_key=state.lkg_key(prof.digest, *gpu, session.vllm.semantics.version))
    remembered = _last_known_good(directory, installed)
    if remembered is not None:
        record, overrides = remembered
        # Today's GPU state (preflight: memory held by others, no FP8) still wins over the record.
        start = {**overrides, **start}
        log.info("ladder.start_from_last_known_good", overrides=start, kv_tokens=record.get("kv_tokens"))
        session.store.record_decision(Decision(0, "last_known_good", describe_overrides(start),
                                               "this rung reached READY before on this GPU and vLLM version"))
    return dict(start)


def _last_known_good(directory: Path, installed: Installed
                     ) -> tuple[dict[str, Any], dict[str, FlagValue | None]] | None:
    """The record of this profile, GPU and vLLM, and its overrides as validated flags. The state directory
    is writable by the service user (and so by vLLM): a record that fails the profile's checks is ignored."""
    record = state.load_lkg(directory, installed.lkg_key)
    if record is None:
        return None
    source = str(directory / "last_known_good.json")
    try:
        return record, validate.check_overrides(record.get("overrides", {}), source, ladder.TUNED_FLAGS,
                                                installed.catalog)
    except ProfileError as exc:
        log.warning("last_known_good.ignored", error=str(exc), action="starting from the profile as written")
        return None


def _shutdown(session: Session, why: str, starting: supervisor.Child | None) -> int:
    """Stop what runs: the ready server with launcher.stop_grace to drain, or the child of the attempt that was
    `starting` with at most the start-up grace (vLLM ignores SIGTERM while its engine starts)."""
    session.notify(STOPPING=1, STATUS="stopping")
    log.info("shutdown.requested", reason=why, serving=session.serving)
    grace = session.profile.launcher.stop_grace_s
    child = session.ready.child if session.ready is not None else starting
    if session.ready is None:
        grace = min(grace, supervisor.STARTUP_GRACE_S)
    started = time.monotonic()
    report = upkeep.stop(session, child, grace) if child is not None else None
    session.ready = None
    session.store.update(phase=Phase.STOPPED, stopped_at=time.time())
    log.info("shutdown.complete", seconds=round(time.monotonic() - started, 2),
             **(report.to_log() if report else {"returncode": None, "leftovers": []}))
    return EX_OK


def up(profile_path: str | None, *, sets: tuple[str, ...] = (), inventory_path: str | None = None,
       log_format: str = "auto", container_mode: bool = False, verbose: bool = False,
       node_rank: int | None = None) -> int:
    """`vllm-launch up PROFILE`: run until SIGTERM; the exit code says what happened."""
    logs.configure(log_format)
    if container.enabled(os.environ, container_mode):
        return _up_in_container(profile_path, sets, inventory_path, verbose, node_rank)
    if not profile_path:
        raise UsageError("up needs a PROFILE (or, in a container, VLLM_LAUNCH_PROFILE)")
    prof = load(profile_path, sets)
    structlog.contextvars.bind_contextvars(profile=prof.name)
    with stop_on_signals() as (stop, reload):
        parentwatch.watch_parent(os.environ)  # started by tune or bench --compare: stop when that is gone
        return run(prof, stop, inventory_path=inventory_path, console=True, reload=reload, sets=sets,
                   verbose=verbose, node_rank=node_rank)


def _up_in_container(profile_path: str | None, sets: tuple[str, ...], inventory_path: str | None,
                     verbose: bool, node_rank: int | None) -> int:
    """Never crash-loop a pod: a failure keeps the launcher up with a page that says why (run/container.py)."""
    path, all_sets = container.arguments(profile_path, sets, os.environ)
    os.environ.update(container.cache_environment(os.environ))
    failures = 0  # in a row, each a failure a later try may fix
    with stop_on_signals() as (stop, reload):
        while True:
            host, port = None, None
            try:
                prof = load(path, all_sets)
                host, port = prof.host, prof.port
                structlog.contextvars.bind_contextvars(profile=prof.name)
                return run(prof, stop, inventory_path=inventory_path, console=True, reload=reload,
                           sets=all_sets, verbose=verbose, node_rank=node_rank)
            except Exception as exc:  # a pod never crash-loops: even a bug shows on the page, then retries
                if stop.is_set():
                    return EX_OK
                failure = container.Failure.of(exc)
                page_host, page_port = container.page_address(host, port, os.environ)
                failures += 1
                wait_s = None if failure.permanent else container.RETRY.delay(failures)
                if container.stay_up(failure, stop, page_host, page_port, wait_s):
                    return EX_OK
