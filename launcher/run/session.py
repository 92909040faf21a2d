"""What one `up` run shares between its stages: the frozen run configuration and installed vLLM, the store, the
notifier, and the run's own history (its attempts, restarts, the server that is ready).

Nothing of one attempt lives here: an attempt's child and its clocks are the attempt's (run/attempt.py,
run/upkeep.py) until it is READY, and then the `Ready` record's. The stage modules (prelaunch, startup,
serving) are functions over the session, and the daemon strings them together.
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

from launcher.config.flags import FlagCatalog
from launcher.config.nodes import Placement
from launcher.config.profile import FlagValue, Profile
from launcher.gpu.inventory import GpuProbe
from launcher.plan.facts import gpu_probe
from launcher.run import state
from launcher.run.gpurelease import Baseline
from launcher.run.sdnotify import Notifier
from launcher.run.supervisor import Child
from launcher.runstate import Capacity
from launcher.vllm.command import Plan
from launcher.vllm.phases import short
from launcher.vllm.versions import VersionSemantics


class Stopped(Exception):
    """SIGTERM/SIGINT arrived: unwind and stop cleanly (exit 0). `live`: the child of an attempt that was
    starting when the signal came, handed to the daemon's shutdown, which stops it with the start-up grace."""

    def __init__(self, live: Child | None = None) -> None:
        super().__init__("stop requested")
        self.live = live


@dataclass
class Attempt:
    """The record of one attempt for logs, state and the exhausted-ladder message: what it ran, how it ended, and
    what it cost (a ladder rung costs a whole start-up: its seconds and where they went)."""

    number: int
    overrides: Mapping[str, FlagValue | None]
    outcome: str = ""
    cls: str = ""
    detail: str = ""
    seconds: float | None = None  # from the launch to the verdict
    phases: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """As state.json keeps it (runstate.AttemptCost reads it back)."""
        return {"number": self.number, "rung": describe_overrides(self.overrides), "outcome": self.outcome or "running",
                "class": self.cls, "seconds": self.seconds, "phases": dict(self.phases)}

    def cost(self) -> str:
        """`41s: weights 12s, compile 25s`, or "" before the verdict."""
        if self.seconds is None:
            return ""
        return f"{self.seconds:.0f}s" + (f": {short(dict(self.phases))}" if self.phases else "")


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
    """An attempt that reached READY: what startup.start returns, and the only way the run is serving. It holds
    the attempt's child from then on: whoever ends the serving (a death, a reload, the shutdown) stops it."""

    attempt: int
    overrides: Mapping[str, FlagValue | None]
    plan: Plan
    capacity: Capacity
    child: Child


@dataclass
class Session:
    """The mutable state of one run. Each field has one writer: the daemon (`config`, `installed`, `ready`),
    the attempt (`attempts`), serving (`restarts`), prelaunch (`gpu_baseline`) and upkeep (`stopped_pids`)."""

    config: RunConfig
    stop: threading.Event
    store: state.StateStore
    reload: threading.Event = field(default_factory=threading.Event)  # SIGHUP: read the profile again
    notifier: Notifier = field(init=False)  # systemd's notify socket and watchdog, from the run's environment
    installed: Installed | None = None
    ready: Ready | None = None  # set by the daemon from startup.start; None while starting or restarting
    gpu_baseline: Baseline | None = None  # GPU memory used before our first launch (None: no GPU)
    stopped_pids: frozenset[int] = frozenset()  # every process of the last tree stopped: its GPU memory is ours
    attempts: list[Attempt] = field(default_factory=list)  # every attempt of the run, numbered from 1
    restarts: list[float] = field(default_factory=list)  # when the engine died while serving (monotonic)

    def __post_init__(self) -> None:
        self.notifier = Notifier(self.config.environ)

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
        self.notifier.notify(**fields)

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds` (a backoff), pinging the watchdog; True at once when a stop is asked for."""
        deadline = time.monotonic() + seconds
        while True:
            self.notifier.ping_watchdog()
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
                self.notifier.ping_watchdog()
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
                         f"{': ' + a.cls if a.cls else ''}{f' ({a.cost()})' if a.cost() else ''}"
                         for a in self.attempts)


def describe_overrides(overrides: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in overrides.items()) or "as written"
