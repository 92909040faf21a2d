"""SIGHUP: the profile read again and checked while the old vLLM serves; the rolling restart's steps and its
record (the daemon strings them together: daemon._roll), falling back to the old profile when the new one
cannot start.

Everything that needs no GPU memory is checked before anything is stopped: the new profile loads, its secrets
resolve, its vLLM binary answers with a version and a flag list that takes its flags, its first argv and
environment can be exec'd, and preflight's pure checks pass (prelaunch.check_while_serving). Any failure is
`reload.refused`: vLLM untouched, still serving, the watchdog pinged. What only a start can tell (vLLM's own
start-up, the GPU after the stop) comes after the stop; when the new profile fails there, the old one is
started again from the rung it served on (`reload.reverted`).
"""

from __future__ import annotations

import dataclasses
import time

import structlog

from launcher.config.load import load
from launcher.errors import LauncherError
from launcher.run import prelaunch, upkeep
from launcher.run.session import Installed, RunConfig, Session, Stopped
from launcher.run.supervisor import Child
from launcher.runstate import Phase, Written

log = structlog.get_logger("vllm_launch")

@dataclasses.dataclass(frozen=True, slots=True)
class Candidate:
    """A new profile that passed every check a serving vLLM allows, and the vLLM it starts with."""

    config: RunConfig
    installed: Installed


def check(session: Session) -> Candidate | None:
    """The new profile if it changed and can start as far as can be told without stopping vLLM; else None
    (unchanged, or refused: logged, told to systemd and recorded in state)."""
    config = session.config
    old = config.profile
    try:
        new = load(old.source, config.sets)
        if new.digest == old.digest:
            log.info("reload.unchanged")
            return None
        if (new.port, new.host) != (old.port, old.host):
            _refuse(session, "vllm.port or vllm.host changed: restart the service to move it")
            return None
        if new.nodes != old.nodes:
            _refuse(session, "nodes: changed: restart the service (on every node) to regroup them")
            return None
        candidate = dataclasses.replace(config, profile=new)
        installed = prelaunch.probe_vllm(candidate, session.run_command)
        session.check_stop()
        prelaunch.check_while_serving(session, candidate, installed)
    except Stopped:
        raise
    except Exception as exc:  # whatever the new profile does to the checks, the server that answers goes on
        # A LauncherError is already one line; anything else (a bug the profile found) gets its type named.
        _refuse(session, str(exc) if isinstance(exc, LauncherError) else f"{old.source}: {type(exc).__name__}: {exc}")
        return None
    return Candidate(candidate, installed)


def _refuse(session: Session, reason: str) -> None:
    reason = " ".join(reason.split())
    log.error("reload.refused", reason=reason, action="still serving the profile as it was")
    session.notify(STATUS=f"reload refused: {reason[:200]}")
    session.store.update(reload={"outcome": "refused", "reason": reason, "at": time.time()})


def stop_for(session: Session, candidate: Candidate, serving: Child) -> None:
    """The rolling restart's first step: say so, and stop the serving vLLM (the daemon then starts the new one)."""
    log.info("reload.rolling", old_digest=session.profile.digest, new_digest=candidate.config.profile.digest)
    session.notify(STATUS="reloading: stopping vLLM to start it with the new profile")
    upkeep.stop(session, serving, session.profile.launcher.stop_grace_s)


def failed(session: Session, error: LauncherError, old_digest: str) -> str:
    """The new profile did not start (its attempts stopped their own children): say that the old one starts
    again; the reason."""
    reason = " ".join(str(error).split())
    log.error("reload.reverted", reason=reason, action="starting the profile as it was again", digest=old_digest)
    session.notify(STATUS=f"reload failed, starting the old profile again: {reason[:160]}")
    return reason


def record(session: Session, *, reloading: bool = False, outcome: str | None = None, reason: str | None = None
            ) -> None:
    """The profile in force in state (its digest keys status's drift); with `outcome`, how the reload ended."""
    profile = session.profile
    fields: Written = {"profile_digest": profile.digest, "restart_window_s": profile.launcher.restart.window_s}
    if reloading:
        fields["phase"] = Phase.RELOADING
    if outcome is not None:
        fields["reload"] = {"outcome": outcome, "reason": reason, "at": time.time()}
    session.store.update(**fields)
