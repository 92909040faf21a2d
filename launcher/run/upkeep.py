"""A live vLLM tree of ours, kept and stopped: what every wait of an attempt (and of the serving watch) does for
it, and the one way it is stopped.

In every wait: the watchdog, systemd's start timeout pushed out while loading progresses, orphans the daemon
adopted reaped, every process of the tree put on record (should the daemon die, the next `up` or `down` stops
them), and vLLM's tool-parser error count carried to state. The clocks are the attempt's own: a new attempt
starts with fresh ones.
"""

from __future__ import annotations

import time

import structlog

from launcher.run import supervisor
from launcher.run.processes import reap_orphans
from launcher.run.session import Session
from launcher.run.supervisor import Child, StopReport

log = structlog.get_logger("vllm_launch")

EXTEND_EVERY_S = 10.0
# How often the tree of a running vLLM is walked for processes new to us (a walk reads all of /proc).
REMEMBER_EVERY_S = 1.0


class Upkeep:
    """The waits' work for one child; `tick` is called from every wait while it lives."""

    def __init__(self, session: Session, child: Child) -> None:
        self.session = session
        self.child = child
        self.last_remember = 0.0
        self.last_extend = 0.0

    def tick(self, download_growth: float = 0.0) -> None:
        """`download_growth`: when a silent download last grew (progress too, for systemd's start timeout)."""
        session, child = self.session, self.child
        now = time.monotonic()
        last_progress = max(child.pump.last_output, download_growth)
        if not session.serving and now - self.last_extend >= EXTEND_EVERY_S and now - last_progress < EXTEND_EVERY_S:
            # Loading progresses: push systemd's start timeout out by one stall period.
            self.last_extend = now
            session.notify(EXTEND_TIMEOUT_USEC=int(session.profile.launcher.startup_stall_s * 1_000_000))
        session.notifier.ping_watchdog()
        reaped = reap_orphans(child.popen)
        if reaped:
            log.info("child.reaped", pids=reaped)
        if now - self.last_remember >= REMEMBER_EVERY_S:
            self.last_remember = now
            remember(session, child)
            errors = child.pump.tool_parser_errors
            if errors != session.store.data.get("tool_parser_errors", 0):
                session.store.update(tool_parser_errors=errors)


def remember(session: Session, child: Child) -> None:
    """Every process of vLLM's tree, and every one of it the daemon adopted as subreaper, goes on record."""
    child.remember_descendants()
    if len(child.known) > child.on_record:
        child.on_record = len(child.known)
        session.store.update(child=supervisor.describe(child))


def stop(session: Session, child: Child, grace_s: float) -> StopReport:
    """Stop the whole tree (run/supervisor.py), close its log, take it off record. Its processes are kept as the
    run's last stopped tree: the GPU memory they held is ours while the next launch waits for it."""
    session.stopped_pids = frozenset(child.known)
    report = supervisor.stop_tree(child, grace_s, tick=session.notifier.ping_watchdog)
    if child.pump.sink is not None:
        child.pump.sink.close()
    if report.leftovers:
        log.error("shutdown.leftovers", leftovers=list(report.leftovers))
    session.store.update(child=None)
    return report
