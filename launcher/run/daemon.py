"""`vllm-launch up`: preflight, launch, the failure ladder, readiness, serving, clean stop.

tenacity decides *when* the next attempt starts (no wait after a change the ladder
made, exponential backoff when the same flags are retried); `ladder.next_step`
decides *what* changes. Signal handlers only set an Event; every wait is on it, so
SIGTERM ends everything at once, whatever the daemon is doing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import structlog
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, stop_when_event_set

from launcher.config import flags, profile, secrets
from launcher.config.profile import FlagValue, Profile
from launcher.errors import EX_OK, ConfigError, LadderExhausted, LauncherError, PreflightError
from launcher.gpu import inventory as gpuprobe
from launcher.plan import modelinfo, preflight
from launcher.plan import report as planner
from launcher.run import health, ladder, logs, sdnotify, state, supervisor
from launcher.units import format_duration
from launcher.vllm import command, install
from launcher.vllm.diagnose import Diagnosis
from launcher.vllm.signatures import KV_INSUFFICIENT, LogEvent
from launcher.vllm.versions import VersionSemantics, semantics

log = structlog.get_logger("vllm_launch")

EXTEND_EVERY_S = 10.0


class Stopped(Exception):
    """SIGTERM/SIGINT arrived: unwind and stop cleanly (exit 0)."""


class AttemptFailed(Exception):
    """One start-up attempt failed; tenacity retries with the ladder's next overrides."""

    def __init__(self, outcome: supervisor.Outcome) -> None:
        super().__init__(outcome.detail)
        self.outcome = outcome


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


@dataclass
class Attempt:
    """The record of one attempt for logs, state and the exhausted-ladder message."""

    number: int
    overrides: Mapping[str, FlagValue | None]
    outcome: str = ""
    cls: str = ""
    detail: str = ""


@dataclass
class Daemon:
    profile: Profile
    stop: threading.Event
    inventory_path: str | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    console: bool = True
    attempts: list[Attempt] = field(default_factory=list)
    restarts: list[float] = field(default_factory=list)
    child: supervisor.Child | None = None
    serving: bool = False
    last_extend: float = 0.0
    last_watchdog: float = 0.0
    same_flags_retries: int = 0

    # ------------------------------------------------------------------ setup

    def run(self) -> int:
        prof = self.profile
        root = state.state_root(self.environ)
        directory = root / prof.name
        previous = state.read_json(directory / "state.json")
        with state.held_locks(directory, prof.name, prof.port, root):
            self.store = state.StateStore(directory)
            self.store.update(profile=prof.name, source=prof.source, profile_digest=prof.digest, pid=os.getpid(),
                              phase="preflight", started_at=time.time(), decisions=[], attempt=0, child=None,
                              capacity=None, error=None, served_model_name=None, url=None)
            self.notify(STATUS="preflight")
            try:
                return self._run(directory, previous)
            except Stopped:
                return self._shutdown("signal")
            except LauncherError as exc:
                self.store.update(phase="failed", error=str(exc))
                self.notify(STATUS=f"failed: {str(exc)[:200]}")
                log.error("failed", exit_code=exc.exit_code, error=str(exc))
                raise
            finally:
                if self.child is not None:
                    self._stop_child(self.profile.launcher.stop_grace_s)

    def _run(self, directory: Path, previous: Any) -> int:
        prof = self.profile
        supervisor.set_child_subreaper()
        self.secrets = secrets.resolve(prof, self.environ)
        vllm_bin = install.find_vllm(prof.launcher.vllm_bin, self.environ)
        installed = install.installed_version(vllm_bin)
        self.version: VersionSemantics = semantics(installed)
        self.catalog = install.catalog_for(vllm_bin, installed, install.cache_dir(self.environ))
        flags.check_profile_flags(prof, self.catalog)
        self.vllm_bin = str(vllm_bin)
        log.info("preflight.vllm", vllm=self.vllm_bin, version=installed, flags=self.catalog.source)
        self._stop_leftovers(previous)
        self._check_port()
        start, gpu_id = self._preflight()
        self.lkg_key = state.lkg_key(prof.digest, *gpu_id, self.version.version)
        record = state.load_lkg(directory, self.lkg_key)
        if record is not None:
            # Today's GPU state (preflight: memory held by others, no FP8) still wins over the record.
            start = {**dict(record.get("overrides") or {}), **start}
            log.info("ladder.start_from_last_known_good", overrides=start, kv_tokens=record.get("kv_tokens"))
            self.store.record_decision(attempt=0, **{"class": "last_known_good"}, change=_describe(start),
                                       reason="this rung reached READY before on this GPU and vLLM version")
        overrides: dict[str, FlagValue | None] = dict(start)
        while True:
            overrides = self._start(overrides)
            outcome = self._serve()
            if outcome.kind == "stopped":
                return self._shutdown("signal")
            self._restart_or_give_up(outcome)

    def _stop_leftovers(self, previous: Any) -> None:
        """Processes an earlier run of this profile recorded and left alive hold memory: stop them."""
        known = ((previous or {}).get("child") or {}).get("known") if isinstance(previous, dict) else None
        if not known:
            return
        procs = supervisor.leftover_vllm_processes({int(pid): float(t) for pid, t in known.items()})
        if procs:
            names = [f"{p.pid}" for p in procs]
            log.warning("preflight.leftovers", pids=names, action="stopping them: they were ours")
            stuck = supervisor.kill_processes(procs)
            if stuck:
                raise PreflightError(f"processes of an earlier run cannot be stopped: {', '.join(stuck)} (a process "
                                     "stuck in the GPU driver needs a reboot)")

    def _check_port(self) -> None:
        """vLLM 0.7.3–0.24 set SO_REUSEPORT, so a second server on a busy port starts silently: check first."""
        host = self.profile.host or "0.0.0.0"  # noqa: S104 - the address vLLM will bind
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host.strip("[]"), self.profile.port))
            except OSError as exc:
                raise ConfigError(f"port {self.profile.port} on {host} is not free ({exc.strerror}); stop what "
                                  "listens there or set vllm.port to a free port") from None

    def _preflight(self) -> tuple[dict[str, FlagValue | None], tuple[str, int, str | None]]:
        prof = self.profile
        probe: gpuprobe.GpuProbe | None = None
        if prof.launcher.device == "cpu":
            inventory = gpuprobe.GpuInventory(source="host")
            gpu_id: tuple[str, int, str | None] = ("cpu", 1, None)
        else:
            probe = self._probe()
            inventory = probe.read() if probe is not None else gpuprobe.GpuInventory(
                source="none", error="no NVIDIA driver or GPU found (no NVML, no nvidia-smi)")
            devices = inventory.visible_devices
            gpu_id = (devices[0].name if devices else "none", len(devices), inventory.driver_version)
        self.inventory = inventory
        cap = None
        gpu = preflight.gpu_spec(inventory, prof.gpus_needed) if prof.launcher.device != "cpu" \
            else planner.host_gpu(self.environ)
        with contextlib.suppress(LauncherError):
            # vLLM runs with the profile's env: its HF_HOME decides where the model is cached.
            files = modelinfo.find_model(prof.model, None, {**self.environ, **prof.env})
            if gpu is not None:
                plan = command.build_plan(prof, {}, vllm_bin=self.vllm_bin, catalog=self.catalog)
                cap = planner.capacity_for(prof, plan, gpu, self.version, files, None)
        host = preflight.host_facts(prof, environ=self.environ)
        if host.leftovers:
            # Orphaned VLLM:: processes of ours hold memory: stop them, then read the GPU again.
            log.warning("preflight.leftovers", processes=[f"{p.pid} {p.name} ({p.why})" for p in host.leftovers],
                        action="stopping them")
            stuck = supervisor.kill_processes(supervisor.live_processes(p.pid for p in host.leftovers))
            if stuck:
                raise PreflightError(f"leftover processes cannot be stopped: {', '.join(stuck)} (a process stuck in "
                                     "the GPU driver needs a reboot)")
            if prof.launcher.device != "cpu" and probe is not None:
                inventory = self.inventory = probe.read()
            host = preflight.host_facts(prof, environ=self.environ)
        result = preflight.evaluate(prof, inventory, host=host, capacity=cap, version=self.version)
        for problem in result.problems:
            (log.error if problem.severity == "error" else log.warning)(
                "preflight.problem", code=problem.code, message=problem.message, fix=problem.fix)
        for change in result.changes:
            log.info("preflight.change", change=change)
        if result.blocking:
            errors = [f"{p.code}: {p.message} → {p.fix}" for p in result.problems if p.severity == "error"]
            raise PreflightError("preflight: " + " | ".join(errors))
        if cap is not None:
            log.info("preflight.ok", kv_tokens_estimate=cap.kv_tokens, sessions_estimate=cap.sessions,
                     verdict=cap.verdict)
        return dict(result.overrides), gpu_id

    # ------------------------------------------------------------------ start-up ladder

    def _start(self, overrides: dict[str, FlagValue | None]) -> dict[str, FlagValue | None]:
        """Attempts until one is ready; returns the overrides that worked."""
        prof = self.profile
        tried: list[Mapping[str, FlagValue | None]] = []
        retrying = Retrying(
            stop=stop_after_attempt(prof.launcher.max_attempts) | stop_when_event_set(self.stop),
            wait=self._wait, sleep=self._sleep, retry=retry_if_exception_type(AttemptFailed), reraise=True,
            before_sleep=self._log_backoff)
        try:
            for attempt in retrying:
                with attempt:
                    if self.stop.is_set():
                        raise Stopped
                    outcome = self._attempt(overrides)
                    if outcome.kind == "ready":
                        return overrides
                    if outcome.kind == "stopped":
                        raise Stopped
                    step = ladder.next_step(prof, overrides, outcome.diagnosis, version=self.version,
                                            free_fraction=self._free_fraction(), tried=tried)
                    tried.append(dict(overrides))
                    self.same_flags_retries = self.same_flags_retries + 1 if dict(step.overrides) == overrides else 0
                    log.info("ladder.step", attempt=outcome.attempt, failure=outcome.diagnosis.cls,
                             change=step.change, reason=step.reason)
                    self.store.record_decision(attempt=outcome.attempt, change=step.change, reason=step.reason,
                                               **{"class": outcome.diagnosis.cls})
                    overrides = dict(step.overrides)
                    raise AttemptFailed(outcome)
        except ladder.Stop as stop:
            if self.stop.is_set():
                raise Stopped from None
            summary = self._attempts_summary()
            if stop.exit_code == LadderExhausted.exit_code:
                raise LadderExhausted(f"{stop} — attempts: {summary}") from None
            raise ConfigError(f"{stop} — attempts: {summary}") from None
        except AttemptFailed:
            if self.stop.is_set():
                raise Stopped from None
            raise LadderExhausted(f"no attempt became ready within launcher.max_attempts "
                                  f"({prof.launcher.max_attempts}) — attempts: {self._attempts_summary()}") from None
        raise Stopped  # tenacity stopped because the stop event is set

    def _sleep(self, seconds: float) -> None:
        self.stop.wait(seconds)  # a signal ends the backoff at once

    def _wait(self, retry_state: RetryCallState) -> float:
        """No wait after a change the ladder made; exponential backoff when the same flags are retried."""
        if self.same_flags_retries == 0:
            return 0.0
        policy = self.profile.launcher.restart
        return float(min(policy.backoff_max_s, policy.backoff_min_s * 2 ** (self.same_flags_retries - 1)))

    def _log_backoff(self, retry_state: RetryCallState) -> None:
        sleep = retry_state.next_action.sleep if retry_state.next_action else 0.0
        if sleep:
            log.info("attempt.backoff", seconds=sleep, attempt=retry_state.attempt_number)
            self.notify(STATUS=f"backoff {sleep:.0f}s before attempt {retry_state.attempt_number + 1}")

    def _attempt(self, overrides: Mapping[str, FlagValue | None]) -> supervisor.Outcome:
        prof = self.profile
        number = len(self.attempts) + 1
        record = Attempt(number, dict(overrides))
        self.attempts.append(record)
        plan = command.build_plan(prof, overrides, vllm_bin=self.vllm_bin, catalog=self.catalog)
        sink = supervisor.RotatingFile(prof.launcher.log_file, prof.launcher.log_max_bytes,
                                       prof.launcher.log_backups) if prof.launcher.log_file else None
        rung = plan.describe_overrides()
        self.child = child = supervisor.spawn(plan, attempt=number, secrets=self.secrets, sink=sink,
                                              echo=self.console, environ=self.environ,
                                              block_size=ladder.block_size(plan.flags))
        log.info("attempt.started", attempt=number, pid=child.pid, overrides=dict(overrides), argv=list(plan.argv))
        self.store.update(phase="starting", attempt=number, child=supervisor.describe(child), rung=dict(overrides),
                          rung_description=rung, url=plan.base_url, served_model_name=plan.served_model_name,
                          vllm_version=self.version.version, log_file=str(prof.launcher.log_file or ""))
        self.notify(STATUS=f"attempt {number}: starting vLLM ({rung})")
        api_key = self.secrets.get("VLLM_API_KEY")
        check = supervisor.ReadyCheck(
            health=lambda: health.check_health(plan.base_url).ok,
            models=lambda: _models(plan, api_key),
            completion=(lambda: _completion(plan, api_key)) if prof.launcher.health.completion_probe else None)
        outcome = supervisor.wait_ready(child, self.stop, check, on_event=self._on_event,
                                        tick=lambda: self._tick(child))
        if outcome.kind == "stopped":
            record.outcome = "stopped"
            return outcome  # _shutdown stops the child (start-up grace) and reports its exit and leftovers
        if outcome.kind == "ready":
            gated = self._capacity_gate(outcome, plan)
            if gated is None:
                record.outcome = "ready"
                self._ready(child, plan, outcome, overrides)
                return outcome
            outcome = gated
        report = self._stop_child(supervisor.FAILED_ATTEMPT_GRACE_S)
        record.outcome, record.cls, record.detail = outcome.kind, outcome.diagnosis.cls, outcome.detail
        d = outcome.diagnosis
        log.warning("attempt.failed", attempt=number, outcome=outcome.kind, failure=d.cls, reason=d.reason,
                    root_cause=d.root_cause, detail=outcome.detail, returncode=report.returncode if report else None,
                    numbers=dict(d.numbers), tail=list(outcome.tail[-8:]) if d.cls == "unknown" else None)
        self.notify(STATUS=f"attempt {number} failed: {d.cls}")
        return outcome

    def _capacity_gate(self, outcome: supervisor.Outcome, plan: command.Plan) -> supervisor.Outcome | None:
        """READY only when the capacity the log reports meets launcher.require."""
        require = self.profile.launcher.require
        numbers = dict(outcome.diagnosis.numbers)
        length = numbers.get("served_max_model_len") or plan.max_model_len
        tokens = numbers.get("kv_tokens")
        if not isinstance(tokens, int) or not length:
            return None
        reason = None
        if require.min_sessions is not None and tokens / length < require.min_sessions:
            reason = "below_min_sessions"
        elif require.min_kv_tokens is not None and tokens < require.min_kv_tokens:
            reason = "below_min_kv_tokens"
        if reason is None:
            return None
        numbers["max_model_len"] = length
        root = (f"{tokens:,} KV tokens = {tokens / length:.2f} sessions of {length:,} (launcher.require: "
                f"min_sessions {require.min_sessions}, min_kv_tokens {require.min_kv_tokens})")
        diagnosis = Diagnosis(KV_INSUFFICIENT, reason, root, numbers, "serving")
        return supervisor.Outcome("failed", outcome.attempt, diagnosis, None, outcome.tail, root)

    def _ready(self, child: supervisor.Child, plan: command.Plan, outcome: supervisor.Outcome,
               overrides: Mapping[str, FlagValue | None]) -> None:
        numbers = outcome.diagnosis.numbers
        length = numbers.get("served_max_model_len") or plan.max_model_len
        tokens = numbers.get("kv_tokens")
        sessions = round(tokens / length, 2) if isinstance(tokens, int) and length else None
        elapsed = time.monotonic() - child.started
        capacity = {"kv_tokens": tokens, "max_model_len": length, "sessions": sessions,
                    "max_concurrency": numbers.get("max_concurrency"), "available_kv_gib": numbers.get("available_kv_gib"),
                    "kv_cache_dtype": plan.kv_cache_dtype, "utilization": plan.utilization}
        self.serving = True
        self.store.update(phase="serving", capacity=capacity, ready_at=time.time(), time_to_ready_s=round(elapsed, 1),
                          child=supervisor.describe(child))
        state.save_lkg(self.store.directory, self.lkg_key, {"overrides": dict(overrides), "kv_tokens": tokens,
                                                             "max_model_len": length})
        status = "ready"
        if isinstance(tokens, int):
            status = f"ready: {tokens:,} KV tokens, {sessions} sessions of {length:,}, {plan.kv_cache_dtype}"
            if plan.utilization:
                status += f", util {plan.utilization}"
        self.notify(READY=1, STATUS=status)
        log.info("ready", attempt=child.attempt, url=plan.base_url, served_model_name=plan.served_model_name,
                 kv_tokens=tokens, sessions=sessions, max_model_len=length, time_to_ready_s=round(elapsed, 1),
                 overrides=dict(overrides))
        if self.console:
            self._summary(plan, capacity, elapsed)

    def _summary(self, plan: command.Plan, capacity: Mapping[str, Any], elapsed: float) -> None:
        decisions = self.store.data.get("decisions") or []
        why = "; ".join(f"{d['change']} ({d['class']})" for d in decisions) or "the profile as written"
        tokens, sessions = capacity.get("kv_tokens"), capacity.get("sessions")
        rows = [
            ("url", f"{plan.base_url}/v1"),
            ("model", f"{plan.served_model_name} ({self.profile.model})"),
            ("KV cache", f"{tokens:,} tokens ({plan.kv_cache_dtype})" if isinstance(tokens, int) else "not reported"),
            ("sessions", f"{sessions} full sessions of {capacity.get('max_model_len'):,} tokens" if sessions else "-"),
            ("rung", f"attempt {len(self.attempts)}: {plan.describe_overrides()} — {why}"),
            ("ready in", format_duration(elapsed)),
        ]
        public = self._public_url()
        if public:
            rows.insert(1, ("public url", public))
        if self.profile.launcher.log_file:
            rows.append(("vLLM log", str(self.profile.launcher.log_file)))
        width = max(len(k) for k, _ in rows)
        text = "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)
        logs.echo_summary(f"vllm-launch: {self.profile.name} is ready\n{text}")

    def _public_url(self) -> str | None:
        pod = self.environ.get("RUNPOD_POD_ID")
        return f"https://{pod}-{self.profile.port}.proxy.runpod.net/v1" if pod else None

    # ------------------------------------------------------------------ serving and restarts

    def _serve(self) -> supervisor.Outcome:
        child = self.child
        if child is None:
            raise Stopped  # the child was stopped while becoming ready
        policy = self.profile.launcher.health
        plan = child.plan
        return supervisor.watch(child, self.stop, health=lambda: health.check_health(plan.base_url,
                                                                                     policy.timeout_s).ok,
                                interval_s=policy.interval_s, failures=policy.failures,
                                tick=lambda: self._tick(child))

    def _restart_or_give_up(self, outcome: supervisor.Outcome) -> None:
        policy = self.profile.launcher.restart
        log.error("restart.engine_dead", attempt=outcome.attempt, detail=outcome.detail,
                  root_cause=outcome.diagnosis.root_cause, returncode=outcome.returncode)
        self._stop_child(supervisor.FAILED_ATTEMPT_GRACE_S)
        self.serving = False
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < policy.window_s] + [now]
        self.store.record_decision(attempt=outcome.attempt, change="restart with the same flags",
                                   reason=f"engine_dead: {outcome.detail}", **{"class": "engine_dead"})
        if len(self.restarts) > policy.max_restarts:
            raise LadderExhausted(f"the engine died {len(self.restarts)} times within "
                                  f"{format_duration(policy.window_s)} (launcher.restart.max {policy.max_restarts}); "
                                  f"last: {outcome.detail}")
        delay = min(policy.backoff_max_s, policy.backoff_min_s * 2 ** (len(self.restarts) - 1))
        self.store.update(phase="restarting")
        self.notify(STATUS=f"engine died; restarting in {delay:.0f}s ({len(self.restarts)}/{policy.max_restarts})")
        log.info("restart.backoff", seconds=delay, restarts=len(self.restarts))
        if self.stop.wait(delay):
            raise Stopped

    # ------------------------------------------------------------------ events, ticks, stop

    def _on_event(self, event: LogEvent) -> None:
        if event.kind == "kv_tokens":
            log.info("vllm.capacity", **{k: v for k, v in event.values.items() if v is not None})
        elif event.kind == "progress" and event.values.get("phase"):
            self.store.data["loading_phase"] = event.values["phase"]
        elif event.kind == "failure" and event.fatal == "specific":
            log.info("vllm.fatal_line", failure=event.failure, reason=event.reason, line=event.message[:300])

    def _tick(self, child: supervisor.Child) -> None:
        now = time.monotonic()
        if not self.serving and now - self.last_extend >= EXTEND_EVERY_S \
                and now - child.pump.last_output < EXTEND_EVERY_S:
            # Loading progresses: push systemd's start timeout out by one stall period.
            self.last_extend = now
            self.notify(EXTEND_TIMEOUT_USEC=int(self.profile.launcher.startup_stall_s * 1_000_000))
        interval = sdnotify.watchdog_interval(self.environ)
        if interval and now - self.last_watchdog >= interval:
            self.last_watchdog = now
            self.notify(WATCHDOG=1)
        supervisor.reap_orphans(child.popen)

    def _grace_for_stop(self) -> float:
        grace = self.profile.launcher.stop_grace_s
        return grace if self.serving else min(grace, supervisor.STARTUP_GRACE_S)

    def _stop_child(self, grace_s: float) -> supervisor.StopReport | None:
        child, self.child = self.child, None
        if child is None:
            return None
        report = supervisor.stop_tree(child, grace_s)
        if child.pump.sink is not None:
            child.pump.sink.close()
        if report.leftovers:
            log.error("shutdown.leftovers", leftovers=list(report.leftovers))
        self.store.update(child=None)
        return report

    def _shutdown(self, why: str) -> int:
        self.notify(STOPPING=1, STATUS="stopping")
        log.info("shutdown.requested", reason=why, serving=self.serving)
        grace = self._grace_for_stop()
        started = time.monotonic()
        report = self._stop_child(grace)
        self.serving = False
        self.store.update(phase="stopped", stopped_at=time.time())
        log.info("shutdown.complete", seconds=round(time.monotonic() - started, 2),
                 returncode=report.returncode if report else None,
                 leftovers=list(report.leftovers) if report else [])
        return EX_OK

    def _probe(self) -> gpuprobe.GpuProbe | None:
        """The inventory file given with --gpu-inventory, else NVML or nvidia-smi (None: no GPU)."""
        if self.inventory_path:
            return gpuprobe.FakeProbe(self.inventory_path, self.environ)
        return gpuprobe.detect(self.environ)

    def _free_fraction(self) -> float | None:
        """Free memory of the fullest visible GPU, re-read before a ladder decision."""
        if self.profile.launcher.device == "cpu":
            return None
        probe = self._probe()
        if probe is None:
            return None
        devices = probe.read().visible_devices
        if not devices:
            return None
        return min(d.free_bytes / d.total_bytes for d in devices if d.total_bytes)

    def _attempts_summary(self) -> str:
        return "; ".join(f"#{a.number} [{_describe(a.overrides)}] {a.outcome or 'running'}"
                         f"{': ' + a.cls if a.cls else ''}" for a in self.attempts)

    def notify(self, **fields: str | int) -> None:
        sdnotify.notify(fields, self.environ)


def _describe(overrides: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in overrides.items()) or "as written"


def _models(plan: command.Plan, api_key: str | None) -> tuple[bool, str, int | None]:
    probe = health.check_models(plan.base_url, plan.served_model_name, api_key)
    return probe.ok, probe.detail, probe.max_model_len


def _completion(plan: command.Plan, api_key: str | None) -> tuple[bool, str]:
    probe = health.check_completion(plan.base_url, plan.served_model_name, api_key)
    return probe.ok, probe.detail


def up(profile_path: str, *, sets: tuple[str, ...] = (), inventory_path: str | None = None,
       log_format: str = "auto") -> int:
    """`vllm-launch up PROFILE`: run until SIGTERM; the exit code says what happened."""
    logs.configure(log_format)
    prof = profile.load(profile_path, sets)
    structlog.contextvars.bind_contextvars(profile=prof.name)
    with stop_on_signals() as stop:
        daemon = Daemon(prof, stop, inventory_path=inventory_path, console=True)
        return daemon.run()
