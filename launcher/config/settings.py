"""Every key of a profile's `launcher:` section, declared once: its type, default, bounds, the fix a bad
value gets, and the sentence that documents it.

This table drives the validator (config/launcher_section.py reads each key through it), the defaults the
rest of the launcher falls back on (`default`), the JSON Schema (`docs/profile.schema.json`) and the
profile reference (`docs/profile.md`), both written by scripts/profile_docs.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from launcher.units import parse_duration, parse_size

# What a value is; config/setting_kinds.py checks each kind, config/schema.py describes it.
SettingKind = Literal[
    "section",     # a mapping of the keys declared under it
    "choice",      # one of `choices`
    "path",        # a file path (text)
    "size",        # bytes: 100MiB, 2GiB or a number
    "count",       # a whole number ≥ bounds[0]
    "duration",    # seconds: 30s, 10m, 1h or a number
    "boolean",
    "positive",    # a number above 0
    "tokens",      # a token count: 32768, 32K (32,768) or 32k (32,000)
    "fractions",   # utilizations in (0, 1], distinct, highest first
    "delays",      # [first, longest] durations
    "address",     # a host address (text)
    "prom_path",   # a path ending in .prom
]


@dataclass(frozen=True, slots=True)
class Setting:
    """One `launcher:` key. `name` is dotted below `launcher:` (`health.completion_interval`)."""

    name: str
    kind: SettingKind
    default: object  # as a profile writes it ("5m"); None: unset unless the profile says
    fix: str  # the one-line fix a bad value gets
    doc: str  # what the key does, for docs/profile.md and the schema's description
    bounds: tuple[float | None, float | None] = (None, None)  # inclusive; None: open
    choices: tuple[str, ...] = ()
    range_fix: str = ""  # the fix for a value outside bounds, when it says more than `fix`

    @property
    def key(self) -> str:
        """The key as a message names it: launcher.health.completion_interval."""
        return f"launcher.{self.name}"

    @property
    def leaf(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def section(self) -> str:
        """The enclosing section below launcher: ("" for a top key of launcher:)."""
        return self.name.rpartition(".")[0]


def _duration_fix(name: str, default: str) -> str:
    return f"write e.g. {name}: {default}"


def _count_fix(name: str, minimum: int) -> str:
    return f"write e.g. {name}: {max(minimum, 1)}"


SETTINGS: tuple[Setting, ...] = (
    Setting("device", "choice", "gpu", "write device: cpu for vLLM's CPU backend, else leave it out",
            "Where vLLM runs: `gpu`, or `cpu` for vLLM's CPU backend (the demo); on `cpu` the GPU checks become "
            "a host-memory check.", choices=("gpu", "cpu")),
    Setting("vllm_bin", "path", None, "write vllm_bin: /opt/vllm/bin/vllm",
            "The `vllm` executable to launch; unset: `vllm` on PATH."),
    Setting("log_file", "path", None, "write log_file: /var/log/vllm-launch/model.log",
            "Where vLLM's output is written too, rotated at log_max_size with log_backups kept; unset: no file."),
    Setting("log_max_size", "size", "100MiB", "write e.g. log_max_size: 100MiB",
            "The size at which log_file is rotated."),
    Setting("log_backups", "count", 3, _count_fix("log_backups", 0),
            "How many rotated copies of log_file are kept.", bounds=(0, None)),
    Setting("startup_timeout", "duration", "60m", _duration_fix("startup_timeout", "60m"),
            "The outer bound of one start-up attempt."),
    Setting("startup_stall", "duration", "10m", _duration_fix("startup_stall", "10m"),
            "An attempt with no output and no download growth for this long fails (vLLM repeating that a process "
            "waits on another is no output)."),
    Setting("stop_grace", "duration", "30s", _duration_fix("stop_grace", "30s"),
            "SIGTERM to SIGKILL once serving (at most 5 s during start-up); vLLM drains within it."),
    Setting("gpu_release_timeout", "duration", "60s", _duration_fix("gpu_release_timeout", "60s"),
            "A relaunch waits this long for the last attempt's GPU memory to be given back, then exits 75."),
    # A failure line waits at least this long for its confirmation (vLLM retries a Hub lookup after 2 s)
    # and at most this long (a fatal error that hangs vLLM must still end the attempt).
    Setting("confirm_window", "duration", "5s", _duration_fix("confirm_window", "5s"),
            "A failure line with no traceback waits this long for vLLM to confirm it (an exit, or no progress) "
            "before the attempt ends on it; progress in the window acquits the line.", bounds=(1.0, 120.0),
            range_fix="write e.g. confirm_window: 5s (how long a failure line waits for vLLM to confirm it)"),
    Setting("agent_probe", "choice", "auto",
            "write agent_probe: auto (on with enable-auto-tool-choice), required or off",
            "Before READY, prove that a coding agent can talk to the server: a chat completion through the chat "
            "template and a tool round trip (`tool_choice: auto`) whose call must come back parsed. `auto`: when "
            "`enable-auto-tool-choice` is set; `required`: always; `off`: never. A call written as text is a "
            "configuration failure (exit 78) naming the parser that reads it.",
            choices=("auto", "required", "off")),
    Setting("max_attempts", "count", 6, _count_fix("max_attempts", 1),
            "How many start-up attempts the ladder may make before the launcher gives up.", bounds=(1, None)),
    Setting("ladder", "section", None, "write launcher.ladder: as indented `name: value` lines",
            "How far the failure ladder may move the profile away from what it says."),
    Setting("ladder.gpu_memory_utilization", "fractions", None, "write e.g. [0.92, 0.88]",
            "The utilization rungs, highest first; vllm.gpu-memory-utilization, when given, must be one of "
            "them (the first rung is used without it). Unset: the utilization is never changed.",
            bounds=(0.0, 1.0)),
    Setting("ladder.drop_fp8_kv_if_unsupported", "boolean", True,
            "write drop_fp8_kv_if_unsupported: true or drop_fp8_kv_if_unsupported: false",
            "On a GPU without FP8 KV cache support, retry with kv-cache-dtype auto."),
    Setting("ladder.min_model_len", "tokens", None, "write e.g. min_model_len: 32768",
            "The context may be cut down to here when the KV cache cannot hold one max-model-len request; "
            "at most max-model-len. Unset: the context is never cut.", bounds=(1, None)),
    Setting("require", "section", None, "write launcher.require: as indented `name: value` lines",
            "A readiness gate on the capacity vLLM reports: below it the attempt fails as kv_insufficient."),
    Setting("require.min_sessions", "positive", None,
            "write e.g. min_sessions: 2 (full max-model-len sessions that must fit)",
            "How many full max-model-len sessions the KV cache must hold."),
    Setting("require.min_kv_tokens", "count", None, _count_fix("min_kv_tokens", 1),
            "How many tokens the KV cache must hold.", bounds=(1, None)),
    Setting("restart", "section", None, "write launcher.restart: as indented `name: value` lines",
            "Restarts of an engine that dies after READY; same-flag retries back off too."),
    Setting("restart.max", "count", 5, _count_fix("max", 0),
            "At most this many restarts within window; one more and the launcher gives up.", bounds=(0, None)),
    Setting("restart.window", "duration", "1h", _duration_fix("window", "1h"),
            "The window in which restart.max counts restarts."),
    Setting("restart.backoff", "delays", ["5s", "5m"], "write e.g. backoff: [5s, 5m]",
            "The first and the longest delay before a restart; each restart doubles the delay."),
    Setting("health", "section", None, "write launcher.health: as indented `name: value` lines",
            "Health probes while serving."),
    Setting("health.interval", "duration", "10s", _duration_fix("interval", "10s"),
            "How often /health is probed."),
    Setting("health.failures", "count", 3, _count_fix("failures", 1),
            "This many failed probes in a row count the engine as dead: it is restarted.", bounds=(1, None)),
    Setting("health.timeout", "duration", "5s", _duration_fix("timeout", "5s"),
            "How long one /health probe may take."),
    Setting("health.completion_probe", "boolean", False,
            "write completion_probe: true or completion_probe: false",
            "Also a 1-token completion before READY."),
    Setting("health.completion_interval", "duration", "5m", _duration_fix("completion_interval", "5m"),
            "While serving, a 1-token completion this often (0: never): /health answers 200 while the engine is "
            "wedged; a completion that fails or outlasts completion_timeout counts as a failed probe."),
    Setting("health.completion_timeout", "duration", "60s", _duration_fix("completion_timeout", "60s"),
            "How long the 1-token completion may take."),
    Setting("metrics", "section", None, "write launcher.metrics: as indented `name: value` lines",
            "The launcher's own Prometheus metrics, off unless given: exactly one of port or textfile."),
    Setting("metrics.port", "count", None, _count_fix("port", 1),
            "Serve the metrics on address:port (a port of its own, not vLLM's).", bounds=(1, 65535)),
    Setting("metrics.address", "address", "127.0.0.1",
            "write address: 127.0.0.1 (loopback, the default) or the address a scraper reaches",
            "The address the metrics port listens on."),
    Setting("metrics.textfile", "prom_path", None,
            "node_exporter reads only *.prom files: write e.g. textfile: /var/lib/node_exporter/vllm.prom",
            "Rewrite this file on every change instead, for node_exporter's textfile collector."),
)

BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting:
    return BY_NAME[name]


def keys_of(section: str) -> tuple[str, ...]:
    """The key names directly under `launcher.<section>` ("": under launcher:), in declared order."""
    return tuple(s.leaf for s in SETTINGS if s.section == section)


def default(name: str) -> object:
    """The default as the launcher uses it: durations in seconds, sizes in bytes, pairs as tuples."""
    item = BY_NAME[name]
    value = item.default
    if value is None:
        return None
    if item.kind == "duration":
        return parse_duration(value)
    if item.kind == "size":
        return parse_size(value)
    if item.kind == "delays" and isinstance(value, list):
        return tuple(parse_duration(v) for v in value)
    return value


def default_seconds(name: str) -> float:
    """A duration's default in seconds (typed for the dataclass and run-time defaults that use it)."""
    value = default(name)
    if not isinstance(value, float):
        raise TypeError(f"launcher.{name} is not a duration")
    return value
