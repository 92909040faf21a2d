"""`vllm-launch up`: the run as a sequence of stages, under the profile's lock, until SIGTERM.

prelaunch (leftovers, port, GPU preflight) → startup (attempts up the ladder until READY) →
serving (watch; restart a dead engine) → shutdown. Signal handlers only set an Event; every
wait is on it, so SIGTERM ends everything at once, whatever the daemon is doing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import structlog

from launcher.config import flags, secrets
from launcher.config.load import load
from launcher.config.profile import FlagValue, Profile
from launcher.errors import EX_OK, LauncherError
from launcher.run import logs, prelaunch, serving, startup, state, supervisor
from launcher.run.session import Session, Stopped, describe_overrides
from launcher.vllm import install
from launcher.vllm.versions import semantics

log = structlog.get_logger("vllm_launch")


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """SIGTERM and SIGINT set an Event (and do nothing else); the old handlers come back on exit."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run(profile: Profile, stop: threading.Event, *, inventory_path: str | None = None, console: bool = True) -> int:
    """Hold the profile's locks and state for the whole run; every way out stops the child."""
    environ = dict(os.environ)
    root = state.state_root(environ)
    directory = root / profile.name
    previous = state.read_json(directory / "state.json")
    with state.held_locks(directory, profile.name, profile.port, root):
        store = state.StateStore(directory)
        store.update(profile=profile.name, source=profile.source, profile_digest=profile.digest, pid=os.getpid(),
                     phase="preflight", started_at=time.time(), decisions=[], attempt=0, child=None,
                     capacity=None, error=None, served_model_name=None, url=None)
        session = Session(profile, stop, store, inventory_path=inventory_path, environ=environ, console=console)
        session.notify(STATUS="preflight")
        try:
            return _run(session, directory, previous)
        except Stopped:
            return _shutdown(session, "signal")
        except LauncherError as exc:
            store.update(phase="failed", error=str(exc))
            session.notify(STATUS=f"failed: {str(exc)[:200]}")
            log.error("failed", exit_code=exc.exit_code, error=str(exc))
            raise
        finally:
            if session.child is not None:
                session.stop_child(profile.launcher.stop_grace_s)


def _run(session: Session, directory: Path, previous: Any) -> int:
    prof = session.profile
    supervisor.set_child_subreaper()
    session.secrets = secrets.resolve(prof, session.environ)
    vllm_bin = install.find_vllm(prof.launcher.vllm_bin, session.environ)
    installed = install.installed_version(vllm_bin)
    session.version = semantics(installed)
    session.catalog = install.catalog_for(vllm_bin, installed, install.cache_dir(session.environ))
    flags.check_profile_flags(prof, session.catalog)
    session.vllm_bin = str(vllm_bin)
    log.info("preflight.vllm", vllm=session.vllm_bin, version=installed, flags=session.catalog.source)
    prelaunch.stop_recorded_leftovers(previous)
    prelaunch.check_port(prof)
    start, gpu_id = prelaunch.preflight(session)
    session.gpu_id = gpu_id
    session.lkg_key = state.lkg_key(prof.digest, *gpu_id, session.semantics.version)
    record = state.load_lkg(directory, session.lkg_key)
    if record is not None:
        # Today's GPU state (preflight: memory held by others, no FP8) still wins over the record.
        start = {**dict(record.get("overrides") or {}), **start}
        log.info("ladder.start_from_last_known_good", overrides=start, kv_tokens=record.get("kv_tokens"))
        session.store.record_decision(attempt=0, **{"class": "last_known_good"}, change=describe_overrides(start),
                                      reason="this rung reached READY before on this GPU and vLLM version")
    overrides: dict[str, FlagValue | None] = dict(start)
    while True:
        overrides = startup.start(session, overrides)
        outcome = serving.serve(session)
        if outcome.kind == "stopped":
            return _shutdown(session, "signal")
        serving.restart_or_give_up(session, outcome)


def _shutdown(session: Session, why: str) -> int:
    session.notify(STOPPING=1, STATUS="stopping")
    log.info("shutdown.requested", reason=why, serving=session.serving)
    grace = session.grace_for_stop()
    started = time.monotonic()
    report = session.stop_child(grace)
    session.serving = False
    session.store.update(phase="stopped", stopped_at=time.time())
    log.info("shutdown.complete", seconds=round(time.monotonic() - started, 2),
             returncode=report.returncode if report else None,
             leftovers=list(report.leftovers) if report else [])
    return EX_OK


def up(profile_path: str, *, sets: tuple[str, ...] = (), inventory_path: str | None = None,
       log_format: str = "auto") -> int:
    """`vllm-launch up PROFILE`: run until SIGTERM; the exit code says what happened."""
    logs.configure(log_format)
    prof = load(profile_path, sets)
    structlog.contextvars.bind_contextvars(profile=prof.name)
    with stop_on_signals() as stop:
        return run(prof, stop, inventory_path=inventory_path, console=True)
