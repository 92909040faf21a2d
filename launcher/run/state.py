"""What the daemon records on disk: state.json, locks, last-known-good; and `status`/`down`.

State dir: $VLLM_LAUNCH_STATE_DIR, else $STATE_DIRECTORY (systemd's StateDirectory=),
else $XDG_STATE_HOME/vllm-launch (~/.local/state/vllm-launch), one folder per
profile. Files are written atomically with mode 0600 and never hold a secret.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from launcher.errors import EX_OK, ConfigError, TransientFailure
from launcher.oneline import one_line
from launcher.procstat import alive
from launcher.run import locks
from launcher.run.locks import acquire_lock, held_locks, lock_holder, release_lock
from launcher.runstate import FINAL_PHASES, Decision, Phase, State, read_state
from launcher.safefile import Unreadable
from launcher.statedir import check_private_dir, read_json, state_root, write_json_atomic
from launcher.vllm import prometheus

__all__ = ["StateStore", "acquire_lock", "held_locks", "lock_holder", "read_json", "release_lock", "state_root",
           "write_json_atomic"]


log = structlog.get_logger("vllm_launch")

# A daemon that serves for months keeps the latest decisions and counts the rest (state stays small).
MAX_DECISIONS = 50
READ_GAP_S = 1.0  # between the two /metrics reads of `status`: the window of its latency figures
MAX_WARNINGS = 20  # failure lines a start-up survived (acquitted), newest last


class StateStore:
    """state.json of one profile: updated in place, rewritten atomically on every change; listeners (the
    metrics) see every change."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "state.json"
        self.data: dict[str, Any] = {}
        self.listeners: list[Callable[[Mapping[str, Any]], None]] = []
        self.write_failed = False

    def update(self, **fields: Any) -> None:
        """Record `fields`; a failed write (a full disk) is a warning: the run goes on, and the next update
        writes everything again."""
        self.data.update(fields)
        self.data["updated_at"] = time.time()
        try:
            write_json_atomic(self.path, self.data)
        except OSError as exc:
            if not self.write_failed:
                log.warning("state.not_saved", path=str(self.path), error=exc.strerror or str(exc),
                            action="serving goes on; state.json is rewritten at the next change")
            self.write_failed = True
        else:
            if self.write_failed:
                log.info("state.saved_again", path=str(self.path))
            self.write_failed = False
        for listener in self.listeners:
            listener(self.data)

    def record_decision(self, decision: Decision, counter: str | None = None) -> None:
        """Append a decision; `counter` ("restarts", "ladder_steps") also counts it by failure class, for good:
        the counts survive the cap on the list and a reload (they are the metrics' counters)."""
        decisions = self.data.setdefault("decisions", [])
        decisions.append(decision.to_dict())
        if len(decisions) > MAX_DECISIONS:
            self.data["decisions_dropped"] = self.data.get("decisions_dropped", 0) + len(decisions) - MAX_DECISIONS
            del decisions[:-MAX_DECISIONS]
        if counter is not None:
            counts = self.data.setdefault("counts", {}).setdefault(counter, {})
            cls = str(decision.cls)
            counts[cls] = counts.get(cls, 0) + 1
        self.update()


def lkg_key(profile_digest: str, gpu_model: str, gpu_count: int, driver: str | None, vllm_version: str | None) -> str:
    return "|".join([profile_digest, gpu_model, str(gpu_count), driver or "-", vllm_version or "-"])


def load_lkg(directory: Path, key: str) -> dict[str, Any] | None:
    """The record under `key`; an unreadable file is ignored with a warning (the start goes on from the profile
    as written, and the next READY writes the file again)."""
    records = read_json(directory / "last_known_good.json", lambda exc: log.warning(
        "last_known_good.unreadable", error=str(exc), action="starting from the profile as written")) or {}
    record = records.get(key)
    return record if isinstance(record, dict) else None


def save_lkg(directory: Path, key: str, record: Mapping[str, Any]) -> None:
    path = directory / "last_known_good.json"
    records = read_json(path) or {}  # an unreadable file is replaced (load_lkg said so)
    records[key] = {**record, "saved_at": time.time()}
    write_json_atomic(path, records)


def _profile_dirs(profile: str | None, environ: Mapping[str, str] | None = None) -> list[Path]:
    root = state_root(environ)
    if profile:
        name = Path(profile).stem
        return [root / name]
    if not root.is_dir():
        return []
    # Whatever lies at state.json (a link, a FIFO) is listed, to be read as hostile and named when unreadable.
    return sorted(p for p in root.iterdir() if os.path.lexists(p / "state.json"))


def _alive(pid: object) -> bool:
    """A live process, from a state file's `pid` (which may be anything)."""
    return isinstance(pid, int) and alive(pid)


def daemon_running(directory: Path, found: State) -> bool:
    """The daemon that wrote `found` still runs: it holds the profile's lock (a recorded PID alone may belong
    to someone else now)."""
    return found.pid is not None and lock_holder(directory / "lock") == found.pid and _alive(found.pid)


def status_command(profile: str | None, as_json: bool = False, environ: Mapping[str, str] | None = None,
                   sleep: Callable[[float], None] = time.sleep) -> int:
    from launcher.run import advice, drift, health

    reports: list[dict[str, Any]] = []
    for directory in _profile_dirs(profile, environ):
        unreadable: list[Unreadable] = []
        found = read_state(directory / "state.json", unreadable.append)
        if found is None:
            if unreadable:  # one line for this profile; the others are listed as they are
                reports.append({"profile": directory.name, "unreadable": f"{unreadable[0]}; ignored"})
            continue
        try:
            running, lock_problem = daemon_running(directory, found), None
        except ConfigError as exc:  # a FIFO or a directory at `lock`: who runs cannot be told
            running, lock_problem = False, str(exc)
        url, url_ignored = drift.metrics_url(found.raw, found.url) if running and found.phase is Phase.SERVING \
            else (None, None)
        texts = _two_reads(url, sleep) if url else []
        live = health.gauges(texts[-1]) if texts else {}
        # Only a live daemon's vLLM is compared: a reload is what applies the difference.
        argv = drift.child_cmdline(found.raw.get("child")) if running else None  # read once: drift and advice
        changed = drift.running_drift(found.raw, argv, environ) if running else None
        figures = [advice.Figures.from_text(t) for t in texts]
        rung = found.raw.get("rung")
        advised = advice.advise(figures[0] if len(figures) == 2 else None, figures[-1] if figures else None,
                                found.capacity, found.decisions, argv, rung if isinstance(rung, dict) else {},
                                time.time(), fp8_kv=found.fp8_kv, restart_window_s=found.restart_window_s,
                                parser_errors=found.tool_parser_errors)
        # `phase` stays what the daemon wrote; `alive` says whether that daemon still runs (`running`: the same,
        # under its older name).
        reports.append({**found.raw, "alive": running, "running": running, "live": live,
                        "drift": None if changed is None or changed.unknown else [d.to_dict() for d in changed.flags],
                        "drift_apply": changed.apply if changed else None,
                        "drift_unknown": changed.unknown if changed else None,
                        "advice": [a.to_dict() for a in advised],
                        **({"lock_unreadable": lock_problem} if lock_problem else {}),
                        **({"url_ignored": url_ignored} if url_ignored else {})})
    if as_json:
        for report in reports:
            if "unreadable" in report:
                print(f"{report['profile']}: {report['unreadable']}", file=sys.stderr)
        readable = [r for r in reports if "unreadable" not in r]
        print(json.dumps(readable if profile is None else (readable[0] if readable else None), indent=2, default=str))
        return EX_OK
    if not reports:
        print(f"no state for {profile or 'any profile'} in {state_root(environ)}")
        return EX_OK
    for data in reports:
        print(_status_text(data))
    return EX_OK


def _status_text(data: Mapping[str, Any]) -> str:
    if "unreadable" in data:
        return f"{data['profile']}: {data['unreadable']}"
    found = State.from_dict(data)
    phase: object = found.phase or data.get("phase")
    if not data.get("alive") and found.phase not in FINAL_PHASES:
        phase = f"dead (last phase: {phase})"
    child = data.get("child")
    child_pid = child.get("pid", "-") if isinstance(child, Mapping) else "-"
    lines = [f"{found.profile}: {phase}  (vllm-launch PID {found.pid}, vLLM PID {child_pid})"]
    if found.url:
        lines.append(f"  url        {found.url}  model {found.served_model_name}")
    if isinstance(tls := found.raw.get("tls"), str):
        lines.append(f"  tls        the server's certificate is {tls[:200]}")
    if data.get("url_ignored"):
        lines.append(f"  note       {data['url_ignored']}")
    rung = data.get("rung_description")
    lines.append(f"  attempt    {found.attempt if found.attempt is not None else '-'}  rung: "
                 f"{rung if isinstance(rung, str) and rung else 'as written'}")
    cap = found.capacity
    if cap is not None and cap.kv_tokens is not None and cap.max_model_len:
        lines.append(f"  capacity   {cap.kv_tokens:,} KV tokens, {cap.sessions if cap.sessions is not None else '?'} "
                     f"sessions of {cap.max_model_len:,}")
    live = data.get("live") or {}
    if live:
        usage = prometheus.first(live, prometheus.KV_USAGE)
        lines.append(f"  live       KV usage {usage * 100:.1f} %, running {live.get('vllm:num_requests_running', 0):.0f}, "
                     f"waiting {live.get('vllm:num_requests_waiting', 0):.0f}" if usage is not None else f"  live {live}")
    lines += _drift_lines(data)
    for item in data.get("advice") or []:
        if isinstance(item, Mapping):
            lines.append(f"  advice     {item.get('text')}")
    agent = data.get("agent")
    if isinstance(agent, Mapping) and isinstance(agent.get("verdict"), str):
        lines.append(f"  agent      {one_line(str(agent['verdict']))}: {one_line(str(agent.get('detail') or ''))}"
                     + (f" → {one_line(str(agent['fix']))}" if agent.get("verdict") == "fail" and agent.get("fix")
                        else ""))
    warnings = data.get("warnings")
    for warning in (warnings if isinstance(warnings, list) else [])[-5:]:
        if isinstance(warning, dict) and isinstance(warning.get("text"), str):
            lines.append(f"  warning    attempt {warning.get('attempt')}: {one_line(warning['text'])}")
        elif isinstance(warning, dict):
            lines.append(f"  warning    attempt {warning.get('attempt')}: vLLM logged {warning.get('line')!r} "
                         f"({warning.get('class')}), and went on ({warning.get('why')})")
    for decision in found.decisions[-5:]:
        lines.append(f"  decision   attempt {decision.attempt}: {decision.cls} → {decision.change} ({decision.reason})")
    if found.error:
        lines.append(f"  error      {one_line(found.error, 0)}")  # it may quote a stranger, or be tampered with
    if data.get("lock_unreadable"):
        lines.append(f"  lock       {data['lock_unreadable']}")
    return "\n".join(lines)


def _two_reads(url: str, sleep: Callable[[float], None]) -> list[str]:
    """/metrics read twice, READ_GAP_S apart: counters and histograms over that window (advice). One read
    when the second fails; none when the first does."""
    from launcher.run import health

    first = health.metrics_text(url)
    if first is None:
        return []
    sleep(READ_GAP_S)
    second = health.metrics_text(url)
    return [first] if second is None else [first, second]


def _drift_lines(data: Mapping[str, Any]) -> list[str]:
    """Whether the running vLLM runs what the profile file says now (no line when nothing runs)."""
    if data.get("drift_unknown"):
        return [f"  drift      unknown: {data['drift_unknown']}"]
    changed = data.get("drift")
    if not isinstance(changed, list):
        return []
    if not changed:
        return ["  drift      none: vLLM runs what the profile file says"]
    lines = [f"  drift      the profile file changed since vLLM started; apply with: {data.get('drift_apply')}"]
    for item in changed:
        lines.append(f"  drift      {item['flag']}: running {item['running'] or 'unset'}, "
                     f"profile {item['profile'] or 'unset'}")
    return lines


def down_command(profile: str, timeout: float = 120.0, environ: Mapping[str, str] | None = None) -> int:
    """SIGTERM the daemon serving PROFILE and wait until it has exited.

    The daemon is whoever holds the profile's lock, not whatever process now has the PID that
    state.json recorded (PIDs are reused). With no daemon, the processes its last run recorded and
    left alive (the same PID *and* start time) are stopped, and `down` says so.
    """
    name = Path(profile).stem
    directory = _profile_dirs(profile, environ)[0]
    unreadable: list[Unreadable] = []
    data = read_json(directory / "state.json", unreadable.append)
    holder = lock_holder(directory / "lock")
    if holder is None:
        if unreadable:
            print(f"{name}: not running; nothing its last run recorded was stopped: {unreadable[0]}")
            return EX_OK
        try:
            # Whoever can write the directory can record any process (PID and start ticks are public).
            if directory.exists() or directory.is_symlink():
                check_private_dir(directory, "the state directory", follow=False)
        except ConfigError as exc:
            print(f"{name}: not running; its records were not acted on, nothing was stopped: {exc}")
            return EX_OK
        left = _stop_recorded_children(data)
        print(f"{name}: not running" + (f"; stopped what its last run left: {', '.join(left)}" if left else ""))
        return EX_OK
    if holder <= 0:  # never os.kill(-1, …): that is every process we may signal
        raise TransientFailure(f"the lock of {name} is held but names no PID ({directory / 'lock'}); stop its "
                               "daemon through its service manager (systemctl stop vllm-launch@NAME)")
    _signal_our_daemon(name, directory / "lock", holder)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lock_holder(directory / "lock") is None:
            print(f"{name}: stopped (vllm-launch PID {holder})")
            return EX_OK
        time.sleep(0.2)
    raise TransientFailure(f"vllm-launch PID {holder} did not exit within {timeout:.0f}s; check `vllm-launch status "
                           f"{name}` and its log")


def _signal_our_daemon(name: str, lock: Path, pid: int) -> None:
    """SIGTERM `pid` only if it is this profile's `vllm-launch up` (locks.not_our_daemon), through a pidfd:
    checked and signalled as one process, even if it exits and its PID is reused in between."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # gone already: the wait below sees the lock free
    try:
        if locks.lock_holder(lock) != pid:
            return  # it let go of the lock meanwhile: the wait below sees whether anyone holds it now
        why = locks.not_our_daemon(lock, pid)
        if why is not None:
            raise TransientFailure(f"{name}: the lock {lock} is held by PID {pid}, which is not this profile's "
                                   f"`vllm-launch up` ({why}); nothing was signalled: see what it is with "
                                   f"`ps -o pid,lstart,args -p {pid}`")
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
    finally:
        os.close(pidfd)


def _stop_recorded_children(data: Any) -> list[str]:
    """Stop the processes a dead daemon recorded (PID and start time both match): ours, never a stranger."""
    from launcher.run import processes

    alive = processes.recorded_children(data)
    names = [f"{p.pid} {processes.name_of(p)}" for p in alive]
    stuck = processes.kill_processes(alive)
    return [n for n in names if n not in stuck] + [f"{n} (could not be stopped)" for n in stuck]
