"""What one `up` run shares between its stages: the frozen run configuration and installed vLLM, and the
small mutable state around them (the child, the attempts, the store, systemd notifications).

`Session` is the only mutable object of the run/ folder besides the child itself; the stage
modules (prelaunch, startup, serving) are functions over it, and the daemon strings them together.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import structlog

from launcher.config.flags import FlagCatalog
from launcher.config.nodes import Placement
from launcher.config.profile import FlagValue, Profile
from launcher.gpu.inventory import GpuProbe
from launcher.plan.facts import gpu_probe
from launcher.run import sdnotify, state, supervisor
from launcher.run.gpurelease import Baseline
from launcher.run.logpump import RotatingFile
from launcher.run.processes import reap_orphans
from launcher.runstate import Capacity
from launcher.vllm.command import Plan
from launcher.vllm.versions import VersionSemantics

log = structlog.get_logger("vllm_launch")

EXTEND_EVERY_S = 10.0
# How often the tree of a running vLLM is walked for processes new to us (a walk reads all of /proc).
REMEMBER_EVERY_S = 1.0


class Stopped(Exception):
    """SIGTERM/SIGINT arrived: unwind and stop cleanly (exit 0)."""


@dataclass
class Attempt:
    """The record of one attempt for logs, state and the exhausted-ladder message."""

    number: int
    overrides: Mapping[str, FlagValue | None]
    outcome: str = ""
    cls: str = ""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RunConfig:
    """What this `up` was asked to run: the profile and how the daemon was started. Nothing changes it; a
    reload replaces it whole (daemon._reload)."""

    profile: Profile
    environ: Mapping[str, str]
    inventory_path: str | None = None
    console: bool = True
    verbose: bool = False  # -v: vLLM's raw lines on the console even when they also go to launcher.log_file
    sets: tuple[str, ...] = ()  # the --set overrides, applied again by a reload
    placement: Placement | None = None  # this node's rank of a multi-node profile (config/nodes.py)

    @property
    def worker(self) -> bool:
        """A headless worker rank: no API of its own; its head's /health says whether the group serves."""
        return self.placement is not None and not self.placement.head


class GpuIdentity(NamedTuple):
    """The GPU preflight saw, as the last-known-good and calibration records key it."""

    name: str
    devices: int  # how many GPUs the run sees
    driver: str | None


NO_GPU = GpuIdentity("none", 0, None)


@dataclass(frozen=True, slots=True)
class Installed:
    """The vLLM this run starts and the GPU it starts on, resolved before the first attempt (and again after
    a reload): its binary, what its version means, the flags it accepts, the secrets it gets."""

    vllm_bin: str
    semantics: VersionSemantics
    catalog: FlagCatalog
    secrets: Mapping[str, str] = field(default_factory=dict)
    gpu: GpuIdentity = NO_GPU
    lkg_key: str = ""


@dataclass(frozen=True, slots=True)
class Ready:
    """An attempt that reached READY: what startup.start returns, and the only way the run is serving."""

    attempt: int
    overrides: Mapping[str, FlagValue | None]
    plan: Plan
    capacity: Capacity


@dataclass
class Session:
    """The mutable state of one run. Each field has one writer: the daemon (`config`, `installed`, `ready`),
    startup and the attempt (`attempts`, `same_flags_retries`), serving (`restarts`), prelaunch (`gpu_baseline`)
    and this module (`child`, `stopped_pids`, the clocks)."""

    config: RunConfig
    stop: threading.Event
    store: state.StateStore
    reload: threading.Event = field(default_factory=threading.Event)  # SIGHUP: read the profile again
    installed: Installed | None = None
    ready: Ready | None = None  # set by the daemon from startup.start; None while starting or restarting
    gpu_baseline: Baseline | None = None  # GPU memory used before our first launch (None: no GPU)
    stopped_pids: frozenset[int] = frozenset()  # every process of the last attempt: its GPU memory is ours
    attempts: list[Attempt] = field(default_factory=list)
    restarts: list[float] = field(default_factory=list)
    child: supervisor.Child | None = None
    last_remember: float = 0.0
    last_extend: float = 0.0
    last_watchdog: float = 0.0
    same_flags_retries: int = 0

    @property
    def profile(self) -> Profile:
        return self.config.profile

    @property
    def environ(self) -> Mapping[str, str]:
        return self.config.environ

    @property
    def vllm(self) -> Installed:
        if self.installed is None:
            raise RuntimeError("the installed vLLM is resolved before any attempt")
        return self.installed

    @property
    def serving(self) -> bool:
        return self.ready is not None

    def notify(self, **fields: str | int) -> None:
        sdnotify.notify(fields, self.environ)

    def tick(self, child: supervisor.Child, download_growth: float = 0.0) -> None:
        """In every wait of the run: the watchdog, systemd's start timeout while loading progresses (output, or
        a download's growth at `download_growth`), orphans reaped, the process record kept current."""
        now = time.monotonic()
        last_progress = max(child.pump.last_output, download_growth)
        if not self.serving and now - self.last_extend >= EXTEND_EVERY_S and now - last_progress < EXTEND_EVERY_S:
            # Loading progresses: push systemd's start timeout out by one stall period.
            self.last_extend = now
            self.notify(EXTEND_TIMEOUT_USEC=int(self.profile.launcher.startup_stall_s * 1_000_000))
        self.ping_watchdog()
        reaped = reap_orphans(child.popen)
        if reaped:
            log.info("child.reaped", pids=reaped)
        if now - self.last_remember >= REMEMBER_EVERY_S:
            self.last_remember = now
            self.remember(child)
            errors = child.pump.tool_parser_errors
            if errors != self.store.data.get("tool_parser_errors", 0):
                self.store.update(tool_parser_errors=errors)

    def remember(self, child: supervisor.Child) -> None:
        """Every process of vLLM's tree, and every one of it the daemon adopted as subreaper, goes on record
        (state.json too: should the daemon die, the next `up` or `down` stops them)."""
        child.remember_descendants()
        if len(child.known) > child.on_record:
            child.on_record = len(child.known)
            self.store.update(child=supervisor.describe(child))

    def ping_watchdog(self) -> None:
        """WATCHDOG=1 at half systemd's interval, from every wait of the run (not only the serving loop)."""
        interval = sdnotify.watchdog_interval(self.environ)
        now = time.monotonic()
        if interval and now - self.last_watchdog >= interval:
            self.last_watchdog = now
            self.notify(WATCHDOG=1)

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds` (a backoff), pinging the watchdog; True at once when a stop is asked for."""
        deadline = time.monotonic() + seconds
        while True:
            self.ping_watchdog()
            left = deadline - time.monotonic()
            if left <= 0:
                return self.stop.is_set()
            if self.stop.wait(min(left, 0.5)):
                return True

    def run_command(self, args: list[str], *, timeout: float | None = None, **_: Any
                    ) -> subprocess.CompletedProcess[str]:
        """subprocess.run(capture_output=True, text=True) that a SIGTERM interrupts: the pre-launch probes
        (`vllm --version`, `vllm serve --help=all`) import torch and take many seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True) as proc:
            while True:
                try:
                    out, err = proc.communicate(timeout=0.2)
                    return subprocess.CompletedProcess(args, proc.returncode, out, err)
                except subprocess.TimeoutExpired:
                    pass
                self.ping_watchdog()
                late = deadline is not None and time.monotonic() >= deadline
                if self.stop.is_set() or late:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.communicate()
                    if late:
                        raise subprocess.TimeoutExpired(args, timeout or 0.0)
                    raise Stopped

    def check_stop(self) -> None:
        if self.stop.is_set():
            raise Stopped

    def grace_for_stop(self) -> float:
        grace = self.profile.launcher.stop_grace_s
        return grace if self.serving else min(grace, supervisor.STARTUP_GRACE_S)

    def spawn(self, plan: Plan, *, attempt: int, sink: RotatingFile | None, block_size: int) -> supervisor.Child:
        """Start vLLM for one attempt; the session holds the child until stop_child."""
        echo = self.config.console and (self.config.verbose or self.profile.launcher.log_file is None)
        self.child = supervisor.spawn(plan, attempt=attempt, secrets=self.vllm.secrets, sink=sink, echo=echo,
                                      environ=self.environ, block_size=block_size)
        return self.child

    def stop_child(self, grace_s: float) -> supervisor.StopReport | None:
        child, self.child = self.child, None
        if child is None:
            return None
        self.stopped_pids = frozenset(child.known)
        report = supervisor.stop_tree(child, grace_s, tick=self.ping_watchdog)
        if child.pump.sink is not None:
            child.pump.sink.close()
        if report.leftovers:
            log.error("shutdown.leftovers", leftovers=list(report.leftovers))
        self.store.update(child=None)
        return report

    def probe(self) -> GpuProbe | None:
        """The inventory file given with --gpu-inventory, else NVML or nvidia-smi (None: no GPU)."""
        return gpu_probe(self.config.inventory_path, self.environ)

    def free_fraction(self) -> float | None:
        """Free memory of the fullest visible GPU, re-read before a ladder decision."""
        if self.profile.launcher.device == "cpu":
            return None
        probe = self.probe()
        if probe is None:
            return None
        devices = probe.read().visible_devices
        if not devices:
            return None
        return min(d.free_bytes / d.total_bytes for d in devices if d.total_bytes)

    def attempts_summary(self) -> str:
        return "; ".join(f"#{a.number} [{describe_overrides(a.overrides)}] {a.outcome or 'running'}"
                         f"{': ' + a.cls if a.cls else ''}" for a in self.attempts)


def describe_overrides(overrides: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in overrides.items()) or "as written"
