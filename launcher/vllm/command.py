"""From a profile (plus the ladder's overrides) to the exact `vllm serve` command.

Pure: no I/O, no clock, no os.environ. Secrets are not resolved here; the plan
only names the environment variables that will carry them, so a Plan can be
printed, logged and stored without leaking anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from launcher.config.flags import FlagCatalog
from launcher.config.nodes import Placement
from launcher.config.profile import DEFAULT_PORT, FlagValue, FlagViews, Profile
from launcher.config.spawnable import word_problem

Overrides = Mapping[str, FlagValue | None]  # flag → new value; None removes the flag


@dataclass(frozen=True, slots=True)
class Plan(FlagViews):
    """Exactly what gets exec'd for one attempt, and how to tell that it is ready."""

    argv: tuple[str, ...]
    env: Mapping[str, str]  # added to the launcher's environment (no secrets)
    secret_env_keys: tuple[str, ...]  # filled in at spawn time from the profile's secret refs
    flags: Mapping[str, FlagValue]  # the effective vllm flags after overrides
    overrides: Mapping[str, FlagValue | None]
    base_url: str  # where the launcher itself reaches the server
    served_model_name: str
    startup_timeout_s: float
    startup_stall_s: float
    stop_grace_s: float

    @property
    def health_url(self) -> str:
        return f"{self.base_url}/health"

    @property
    def ca_file(self) -> str | None:
        """With https: what the server's certificate is checked against (api.tls_context)."""
        return ca_file(self.flags)

    def _flags(self) -> Mapping[str, FlagValue]:
        return self.flags

    def describe_overrides(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.overrides.items()) or "as written"


@dataclass(frozen=True, slots=True)
class ChildEnv:
    """The environment rules for vLLM: what we add, and what systemd gave us that vLLM must not see."""

    strip: tuple[str, ...] = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID",
                              "LISTEN_FDNAMES")
    add: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({"PYTHONUNBUFFERED": "1"}))


CHILD_ENV = ChildEnv()


def effective_flags(profile: Profile, overrides: Overrides) -> dict[str, FlagValue]:
    """The profile's flags with overrides applied in place (new flags go last)."""
    flags: dict[str, FlagValue] = dict(profile.vllm)
    for name, value in overrides.items():
        if value is None:
            flags.pop(name, None)
        else:
            flags[name] = value
    return flags


def render_flag(name: str, value: FlagValue, catalog: FlagCatalog | None = None) -> list[str]:
    """One flag as argv words: true → --flag, false → --no-flag, lists → --flag a b, mappings → JSON."""
    if isinstance(value, bool):
        spec = catalog.lookup(name) if catalog else None
        if spec is not None and spec.takes_value:
            # A flag that takes a value never goes out bare: `--max-num-batched-tokens` followed by the next flag
            # would make vLLM read that flag as its value (or drop it, for false). vLLM judges "true" itself.
            return [f"--{name}", _scalar(value)]
        if value:
            return [f"--{name}"]
        # A store_true flag has no --no- form: leaving it out is how to say false.
        if spec is not None and not spec.negatable:
            return []
        return [f"--no-{name}"]
    if isinstance(value, tuple):
        return [f"--{name}", *(_scalar(v) for v in value)]
    if isinstance(value, Mapping):
        return [f"--{name}", json.dumps(dict(value), separators=(",", ":"), sort_keys=True)]
    return [f"--{name}", _scalar(value)]


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def ca_file(flags: Mapping[str, FlagValue]) -> str | None:
    """vLLM's ssl-ca-certs, when the profile gives one."""
    value = flags.get("ssl-ca-certs")
    return str(value) if isinstance(value, str) and value else None


def base_url(flags: Mapping[str, FlagValue], head: str | None = None) -> str:
    """Where the launcher reaches vLLM: a wildcard bind is reached over loopback; a worker rank, its head.
    https when vLLM serves TLS (ssl-certfile): every probe, /metrics read and benchmark speaks it too."""
    host = head or str(flags.get("host") or "127.0.0.1")
    port = int(flags.get("port", DEFAULT_PORT))  # type: ignore[arg-type]
    if host in ("0.0.0.0", ""):  # noqa: S104 - reading the bind address, not binding
        host = "127.0.0.1"
    elif host in ("::", "[::]"):
        host = "[::1]"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    scheme = "https" if flags.get("ssl-certfile") else "http"
    return f"{scheme}://{host}:{port}"


def drain_seconds(stop_grace_s: float) -> int:
    """What of launcher.stop_grace vLLM may spend finishing requests; the rest is for its own teardown."""
    return max(0, int(stop_grace_s - min(10.0, stop_grace_s / 4)))


# The API server's own flags: a headless worker rank serves no API, so they stay on the head.
API_FLAGS = frozenset({
    "host", "port", "uvicorn-log-level", "allowed-origins", "allowed-methods", "allowed-headers", "root-path",
    "ssl-keyfile", "ssl-certfile", "ssl-ca-certs", "enable-auto-tool-choice", "tool-call-parser",
    "reasoning-parser", "chat-template", "response-role", "enable-log-requests", "disable-log-requests",
    "disable-uvicorn-access-log", "middleware", "api-server-count", "shutdown-timeout"})


def placement_flags(placement: Placement) -> list[str]:
    """vLLM's own multi-node flags for this rank (mp), or the Ray executor on the head (ray)."""
    if placement.backend == "ray":
        return ["--distributed-executor-backend", "ray"]
    words = ["--nnodes", str(placement.count), "--node-rank", str(placement.rank),
             "--master-addr", placement.master_addr, "--master-port", str(placement.master_port)]
    return words if placement.head else [*words, "--headless"]


def build_plan(profile: Profile, overrides: Overrides | None = None, *, vllm_bin: str = "vllm",
               catalog: FlagCatalog | None = None, placement: Placement | None = None) -> Plan:
    """The argv, environment and URLs for one attempt (of this node's rank, with `placement`)."""
    overrides = dict(overrides or {})
    flags = effective_flags(profile, overrides)
    worker = placement is not None and not placement.head
    argv: list[str] = [vllm_bin, "serve", profile.model]
    for name, value in flags.items():
        if not (worker and name in API_FLAGS):
            argv.extend(render_flag(name, value, catalog))
    if placement is not None and not (placement.backend == "ray" and "distributed-executor-backend" in flags):
        argv.extend(placement_flags(placement))
    if catalog is not None and catalog.lookup("shutdown-timeout") and "shutdown-timeout" not in flags and not worker:
        # vLLM's own drain: on SIGTERM it finishes in-flight requests for this long (its default, 0, aborts
        # them). Not part of `flags`: it changes no capacity, and calibration keys on the flags.
        argv.extend(["--shutdown-timeout", str(drain_seconds(profile.launcher.stop_grace_s))])
    env = dict(CHILD_ENV.add)
    env.update(profile.env)
    secret_keys = tuple(key for key, ref in (("VLLM_API_KEY", profile.api_key), ("HF_TOKEN", profile.hf_token))
                        if ref is not None)
    served = flags.get("served-model-name", profile.model)
    served_name = str(served[0]) if isinstance(served, tuple) else str(served)
    return Plan(
        argv=tuple(argv), env=MappingProxyType(env), secret_env_keys=secret_keys,
        flags=MappingProxyType(flags), overrides=MappingProxyType(overrides),
        # A worker rank is judged by its head, which serves the API once every rank has joined.
        base_url=base_url(flags, placement.master_addr if worker and placement else None),
        served_model_name=served_name, startup_timeout_s=profile.launcher.startup_timeout_s,
        startup_stall_s=profile.launcher.startup_stall_s, stop_grace_s=profile.launcher.stop_grace_s,
    )


def exec_problem(plan: Plan, secrets: Mapping[str, str]) -> str | None:
    """Why execve(2) would refuse this plan's argv or environment (a NUL byte, a word over MAX_ARG_STRLEN),
    naming the flag or the variable, never the value; None when it can start. The profile's validation
    refuses these already: this catches what only the launch assembles (secrets, the rank's --master-addr)."""
    for index, word in enumerate(plan.argv):
        problem = word_problem(word)
        if problem:
            flag = next((w for w in reversed(plan.argv[:index + 1]) if w.startswith("--")), None)
            what = f"the value of {flag}" if flag and flag != word else f"argument {index} ({word[:40]!r})"
            return f"vllm serve's command line cannot be started: {what} {problem}"
    for origin, entries in (("env", plan.env), ("secret", secrets)):
        for name, value in entries.items():
            problem = word_problem(value, f"{name}=")
            if problem:
                what = f"env.{name}" if origin == "env" else f"the secret {name}"
                return f"vLLM's environment cannot be set: {what} {problem}"
    return None
