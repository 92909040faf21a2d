"""Drift for `status`: the profile file on disk rendered now against the running vLLM's own command line,
and the command that applies the difference.

The running side is /proc/PID/cmdline of the child state.json recorded, trusted only while that PID is
alive with the recorded start time on the same boot (PIDs are reused). The profile side is what a reload
would start with the rung in force: command.build_plan over the profile file, the --set overrides the
daemon recorded, state.json's `rung`, and the flag list of the vLLM that runs (its cached catalog, else
the shipped one).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from launcher.config.flags import FlagCatalog, shipped_catalog
from launcher.config.load import load
from launcher.config.profile import FlagValue, Profile
from launcher.errors import LauncherError
from launcher.run import processes
from launcher.statedir import cache_dir
from launcher.vllm import command, install
from launcher.vllm.argv_drift import FlagDrift, argv_drift

MAX_CMDLINE = 1 << 20  # a command line is at most ARG_MAX (2 MiB on Linux); a profile's is a few KiB
# Flags that come from `nodes:` and this node's rank, which state.json does not record: not compared.
PLACEMENT_FLAGS = ("nnodes", "node-rank", "master-addr", "master-port", "headless", "distributed-executor-backend")
# A reload refuses a new port or host (the port lock is the daemon's): those need a restart.
RESTART_FLAGS = frozenset({"port", "host"})
UNIT = re.compile(r"/(vllm-launch@[^/]+\.service)(?:/|$)")


@dataclass(frozen=True, slots=True)
class Drift:
    """The differing flags and how to apply them; `unknown` says why no comparison could be made."""

    flags: list[FlagDrift] = field(default_factory=list)
    apply: str | None = None
    unknown: str | None = None


def running_drift(data: Mapping[str, Any], argv: list[str] | None,
                  environ: Mapping[str, str] | None = None) -> Drift | None:
    """The drift of a live daemon's vLLM, whose command line is `argv` (child_cmdline); None when its vLLM is
    not running (nothing to compare)."""
    if argv is None:
        return None
    try:
        wanted, ignore = profile_argv(data, environ)
    except Exception as exc:  # whatever the file holds, status reports it and goes on, as a reload would
        reason = str(exc) if isinstance(exc, LauncherError) else f"{type(exc).__name__}: {exc}"
        return Drift(unknown=f"the profile does not load ({' '.join(reason.split())}); a reload would refuse it")
    flags = argv_drift(argv, wanted, ignore=ignore)
    if flags is None:
        return Drift(unknown="the running process's command line has no `serve` (it is not vLLM's)")
    return Drift(flags, apply_command(data, restart=bool(RESTART_FLAGS & {d.flag for d in flags})) if flags else None)


def child_cmdline(child: object) -> list[str] | None:
    """The recorded child's command line, while it is the same process (PID, start time, boot)."""
    if not isinstance(child, Mapping) or child.get("boot_id") != processes.boot_id():
        return None
    pid, started = child.get("pid"), child.get("start_time")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(started, int | float):
        return None
    try:
        if abs(processes.start_time(psutil.Process(pid)) - started) >= 0.01:
            return None
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read(MAX_CMDLINE)
    except (OSError, psutil.Error):
        return None
    if not raw:
        return None  # a zombie, exited and not yet reaped, has no command line: not running
    return [word.decode(errors="replace") for word in raw.split(b"\0")[:-1 if raw.endswith(b"\0") else None]]


def profile_argv(data: Mapping[str, Any], environ: Mapping[str, str] | None = None
                 ) -> tuple[list[str], tuple[str, ...]]:
    """What the profile file renders now with the rung in force, and the flags not to compare (a multi-node
    profile's placement); raises LauncherError when it does not load."""
    prof = _recorded_profile(data)
    rung = data.get("rung")
    overrides = {str(k): _flag_value(v) for k, v in rung.items()} if isinstance(rung, Mapping) else {}
    plan = command.build_plan(prof, overrides, catalog=_catalog(data.get("vllm_version"), environ))
    return list(plan.argv), PLACEMENT_FLAGS if prof.nodes is not None else ()


def _recorded_profile(data: Mapping[str, Any]) -> Profile:
    """The profile file state.json names, with the --set overrides the daemon recorded, as it reads it now."""
    source, sets = data.get("source"), data.get("sets")
    if not isinstance(source, str) or not source:
        raise LauncherError("state.json names no profile file (`source`)")
    sets = [s for s in sets if isinstance(s, str)] if isinstance(sets, list) else []
    return load(_as_the_daemon_sees_it(Path(source), data.get("pid")), sets)


def metrics_url(data: Mapping[str, Any], url: str | None) -> tuple[str | None, str | None]:
    """(the url to read /metrics from, why state.json's `url` is not read): only the server the profile file
    gives (its host and port, as the daemon reaches it), never wherever a state file points."""
    if not url:
        return None, None
    try:
        wanted = command.base_url(_recorded_profile(data).vllm)
    except Exception as exc:  # whatever the file holds: the url is then not trusted, and status says why
        reason = str(exc) if isinstance(exc, LauncherError) else f"{type(exc).__name__}: {exc}"
        return None, f"state.json's url {url[:200]} is not read: the profile does not load ({' '.join(reason.split())})"
    if url != wanted:
        return None, f"state.json's url {url[:200]} is not the profile's {wanted}: /metrics not read"
    return url, None


def _as_the_daemon_sees_it(path: Path, pid: object) -> Path:
    """A relative `source` is relative to the daemon's working directory, where its reload reads it."""
    if path.is_absolute() or not isinstance(pid, int) or pid <= 0:
        return path
    try:
        return Path(f"/proc/{pid}/cwd").readlink() / path
    except OSError:
        return path


def _flag_value(value: Any) -> FlagValue | None:
    return tuple(value) if isinstance(value, list) else value  # JSON has lists where a flag has a tuple


def _catalog(version: object, environ: Mapping[str, str] | None) -> FlagCatalog:
    """The flags of the vLLM the daemon found (cached when it asked it), else the shipped list; status never
    runs vLLM itself (`--help=all` takes seconds)."""
    if isinstance(version, str) and version:
        cached = install.cached_catalog(version, cache_dir(environ))
        if cached is not None:
            return cached
    return shipped_catalog()


def apply_command(data: Mapping[str, Any], restart: bool = False) -> str:
    """`systemctl reload` when the daemon is its unit's process (its cgroup names vllm-launch@NAME.service),
    else SIGHUP to its PID; a new port or host needs a restart instead."""
    pid, name, source = data.get("pid"), data.get("profile"), data.get("source")
    unit = _systemd_unit(pid)
    if unit is not None:
        return f"systemctl {'restart' if restart else 'reload'} {unit}"
    if restart:
        return f"vllm-launch down {shlex.quote(str(name))} && vllm-launch up {shlex.quote(str(source))}"
    return f"kill -HUP {pid}"


def _systemd_unit(pid: object) -> str | None:
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        return unit_in_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
    except OSError:
        return None


def unit_in_cgroup(text: str) -> str | None:
    """The vllm-launch@ unit a /proc/PID/cgroup text places the process in (cgroup v2 `0::/…`, or a v1
    hierarchy's line), as systemctl's arguments: `--user` under a user manager, the name shell-quoted as
    systemd escapes it (`\\x2d` for a dash in an instance name)."""
    for line in text.splitlines():
        match = UNIT.search(line)
        if match:
            user = "/user@" in line[:match.start()]
            return ("--user " if user else "") + shlex.quote(match.group(1))
    return None
