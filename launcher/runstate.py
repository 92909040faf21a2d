"""What state.json says, as types: every key the daemon writes (`Written`), the phase, the capacity, the
decisions; and the one reader of it (`State`).

The daemon writes state.json (run/state.py) through `Written`, so that a key written anywhere is declared
here once with its type; `status`, the metrics exporter and `bench --compare` read it here. The state
directory is writable by the service user, and so by vLLM: every field read is checked for its type, and a
field of the wrong type reads as absent, never as a crash or a wrong answer.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from launcher.safefile import Unreadable
from launcher.statedir import read_json


class Phase(enum.StrEnum):
    """Where one `up` run is (state.json's `phase`, the metrics' `phase` label, systemd's STATUS=)."""

    PREFLIGHT = "preflight"  # checking the GPU, the port, the leftovers of an earlier run
    STARTING = "starting"  # an attempt is under way
    SERVING = "serving"  # READY: /health, /v1/models (and the completion probe) answered
    RESTARTING = "restarting"  # the engine died while serving; backing off before the next start
    RELOADING = "reloading"  # SIGHUP with a changed profile: stopping vLLM to start it with the new one
    FAILED = "failed"  # the run ended on an error (exhausted ladder, config error)
    STOPPED = "stopped"  # SIGTERM/SIGINT: stopped cleanly

    @classmethod
    def parse(cls, value: object) -> Phase | None:
        try:
            return cls(value) if isinstance(value, str) else None
        except ValueError:
            return None


FINAL_PHASES = frozenset({Phase.STOPPED, Phase.FAILED})

# The ranges a field of state.json can hold (status does arithmetic on them: a kv_tokens of 10**400 was an
# OverflowError). Outside them a field reads as absent, like a field of the wrong type.
MAX_COUNT = 2**53  # an exact float: any count, token total or counter
MAX_TOKENS = 2**50  # KV tokens, a context length
MAX_PID = 2**31 - 1  # pid_t
MAX_ATTEMPT = 10**6
MAX_SECONDS = 1e10  # a duration: three centuries
MAX_TIME = 1e11  # a wall-clock time: the year 5138
MAX_GIB = 1e9


@dataclass(frozen=True, slots=True)
class Capacity:
    """The KV cache of the served rung, as vLLM's log reported it at READY."""

    kv_tokens: int | None = None
    max_model_len: int | None = None
    sessions: float | None = None  # full max-model-len sessions the KV cache holds
    max_concurrency: float | None = None
    available_kv_gib: float | None = None
    kv_cache_dtype: str | None = None
    utilization: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_dict(cls, data: object) -> Capacity | None:
        if not isinstance(data, Mapping):
            return None
        return cls(kv_tokens=_int(data.get("kv_tokens"), MAX_TOKENS), max_model_len=_int(data.get("max_model_len"),
                                                                                         MAX_TOKENS),
                   sessions=_number(data.get("sessions"), MAX_COUNT),
                   max_concurrency=_number(data.get("max_concurrency"), MAX_COUNT),
                   available_kv_gib=_number(data.get("available_kv_gib"), MAX_GIB),
                   kv_cache_dtype=_str(data.get("kv_cache_dtype")), utilization=_number(data.get("utilization"), 1.0))


@dataclass(frozen=True, slots=True)
class Decision:
    """One thing the daemon changed and why: a ladder step, a restart, a start from last-known-good."""

    attempt: int
    cls: str  # the failure class it answers ("class" in state.json)
    change: str
    reason: str
    time: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"time": self.time, "attempt": self.attempt, "class": self.cls, "change": self.change,
                "reason": self.reason}

    @classmethod
    def from_dict(cls, data: object) -> Decision | None:
        if not isinstance(data, Mapping):
            return None
        return cls(_int(data.get("attempt"), MAX_ATTEMPT) or 0, _str(data.get("class")) or "unknown",
                   _str(data.get("change")) or "", _str(data.get("reason")) or "",
                   _number(data.get("time"), MAX_TIME) or 0.0)


class Written(TypedDict, total=False):
    """Every key of state.json, with the type its writer gives it: `StateStore.update(**fields)` takes these and
    no other, so mypy checks each writer against this one declaration, and `State.from_dict` reads them back
    (tests/unit/run/test_state.py keeps the two in step). Dicts nest what `status --json` shows as it is."""

    # The run: who, what, since when (daemon.run)
    profile: str
    source: str
    profile_digest: str
    pid: int
    started_at: float
    stopped_at: float
    restart_window_s: float
    sets: list[str]  # --set overrides kept for status's drift; env values never (their keys go to env_sets)
    env_sets: list[str]
    phase: Phase
    error: str | None
    ladder_exhausted: bool
    updated_at: float
    # The attempt under way or serving (attempt._started, startup._ready)
    attempt: int
    child: dict[str, Any] | None  # supervisor.describe: PIDs and start times, never the environment
    rung: dict[str, Any]
    rung_description: str
    url: str | None
    tls: str | None
    served_model_name: str | None
    vllm_version: str | None
    log_file: str
    loading_phase: str
    capacity: dict[str, Any] | None  # Capacity.to_dict
    ready_at: float
    time_to_ready_s: float
    fp8_kv: bool | None
    agent: dict[str, Any]  # the agent probe's verdict and evidence
    startup_phases: dict[str, Any]  # where the served start-up's time went: PhaseClock.to_dict
    attempts: list[dict[str, Any]]  # every attempt of the run (the latest MAX_DECISIONS): rung, outcome, its cost
    phase_histogram: dict[str, dict[str, Any]]  # phases.observe over every attempt: the exporter's histogram
    warnings: list[dict[str, Any]]
    tool_parser_errors: int
    # What the daemon decided (StateStore.record_decision, the ladder, reload)
    decisions: list[dict[str, Any]]  # Decision.to_dict, the latest MAX_DECISIONS
    decisions_dropped: int
    counts: dict[str, dict[str, int]]
    ladder_once: list[str]
    compile_cache: dict[str, Any]
    reload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AttemptCost:
    """One attempt of the run as state.json records it: what it ran, how it ended, and what it cost."""

    number: int
    rung: str
    outcome: str
    cls: str
    seconds: float | None
    phases: Mapping[str, float]

    @classmethod
    def from_dict(cls, data: object) -> AttemptCost | None:
        if not isinstance(data, Mapping) or _int(data.get("number"), MAX_ATTEMPT) is None:
            return None
        return cls(_int(data.get("number"), MAX_ATTEMPT) or 0, _str(data.get("rung")) or "as written",
                   _str(data.get("outcome")) or "running", _str(data.get("class")) or "",
                   _number(data.get("seconds"), MAX_SECONDS), _seconds(data.get("phases")))


@dataclass(frozen=True, slots=True)
class PhaseBuckets:
    """One phase's histogram (vllm/phases.py's observe): cumulative counts per bound, the count and the sum."""

    buckets: tuple[int, ...]
    count: int
    sum: float


@dataclass(frozen=True, slots=True)
class State:
    """state.json of one profile, read and checked. `raw` is the file as written, for `status --json`."""

    profile: str | None
    pid: int | None
    phase: Phase | None
    url: str | None
    served_model_name: str | None
    attempt: int | None
    capacity: Capacity | None
    decisions: tuple[Decision, ...]
    counts: Mapping[str, Mapping[str, int]]  # counter (restarts, ladder_steps) → failure class → count
    rung: Mapping[str, Any]
    vllm_version: str | None
    time_to_ready_s: float | None
    error: str | None
    raw: Mapping[str, Any]
    fp8_kv: bool | None = None  # every GPU of the run can hold an FP8 KV cache (None: not known, e.g. the CPU backend)
    restart_window_s: float | None = None  # the profile's launcher.restart.window
    agent_verdict: str | None = None  # the agent probe's verdict (pass, fail, inconclusive; run/agentprobe.py)
    tool_parser_errors: int | None = None  # tool-call parser errors vLLM logged since the served vLLM started
    phases: Mapping[str, float] = field(default_factory=dict)  # where the served start-up's time went
    compile_cache: str | None = None  # that start-up's torch.compile cache: hit or miss
    attempts: tuple[AttemptCost, ...] = ()
    phase_histogram: Mapping[str, PhaseBuckets] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> State:
        decisions = data.get("decisions")
        rung = data.get("rung")
        startup = data.get("startup_phases")
        startup = startup if isinstance(startup, Mapping) else {}
        cache, attempts = startup.get("compile_cache"), data.get("attempts")
        return cls(
            profile=_str(data.get("profile")), pid=_int(data.get("pid"), MAX_PID, least=1),
            phase=Phase.parse(data.get("phase")),
            url=_str(data.get("url")), served_model_name=_str(data.get("served_model_name")),
            attempt=_int(data.get("attempt"), MAX_ATTEMPT), capacity=Capacity.from_dict(data.get("capacity")),
            decisions=tuple(d for d in map(Decision.from_dict, decisions if isinstance(decisions, list) else [])
                            if d is not None),
            counts=_counts(data.get("counts")), rung=dict(rung) if isinstance(rung, Mapping) else {},
            vllm_version=_str(data.get("vllm_version")), time_to_ready_s=_number(data.get("time_to_ready_s"), MAX_SECONDS),
            error=_str(data.get("error")), raw=dict(data),
            fp8_kv=fp8 if isinstance(fp8 := data.get("fp8_kv"), bool) else None,
            restart_window_s=_number(data.get("restart_window_s"), MAX_SECONDS),
            agent_verdict=_verdict(data.get("agent")), tool_parser_errors=_int(data.get("tool_parser_errors")),
            phases=_seconds(startup.get("seconds")), compile_cache=cache if cache in ("hit", "miss") else None,
            attempts=tuple(a for a in map(AttemptCost.from_dict, attempts if isinstance(attempts, list) else [])
                           if a is not None),
            phase_histogram=_histogram(data.get("phase_histogram")))


def _verdict(agent: object) -> str | None:
    verdict = agent.get("verdict") if isinstance(agent, Mapping) else None
    return verdict if verdict in ("pass", "fail", "inconclusive") else None


def read_state(path: Path, unreadable: Callable[[Unreadable], None] | None = None) -> State | None:
    """state.json at `path`, or None when it is missing or unreadable (a link, a FIFO, too large, nested too
    deep, not a JSON object: `unreadable` is told why)."""
    data = read_json(path, unreadable)
    return State.from_dict(data) if data is not None else None


def _int(value: object, most: int = MAX_COUNT, least: int = 0) -> int | None:
    """An integer in [least, most]; anything else (a bool, a float, 10**400) reads as absent."""
    if isinstance(value, int) and not isinstance(value, bool) and least <= value <= most:
        return value
    return None


def _number(value: object, most: float = MAX_COUNT, least: float = 0.0) -> float | None:
    """A finite number in [least, most], as a float; anything else (NaN, inf, 1e308) reads as absent."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    if isinstance(value, int) and not -MAX_COUNT <= value <= MAX_COUNT:  # float() of 10**400 overflows
        return None
    number = float(value)
    return number if math.isfinite(number) and least <= number <= most else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _seconds(value: object) -> dict[str, float]:
    """phase → seconds; a phase of the wrong type or range is left out."""
    if not isinstance(value, Mapping):
        return {}
    return {str(k): n for k, v in value.items() if (n := _number(v, MAX_SECONDS)) is not None}


def _histogram(value: object) -> dict[str, PhaseBuckets]:
    if not isinstance(value, Mapping):
        return {}
    found: dict[str, PhaseBuckets] = {}
    for phase, data in value.items():
        if not isinstance(data, Mapping) or not isinstance(buckets := data.get("buckets"), list):
            continue
        counts = [_int(n) for n in buckets]
        count, total = _int(data.get("count")), _number(data.get("sum"), MAX_COUNT)
        if count is None or total is None or None in counts:
            continue
        found[str(phase)] = PhaseBuckets(tuple(n or 0 for n in counts), count, total)
    return found


def _counts(value: object) -> dict[str, dict[str, int]]:
    if not isinstance(value, Mapping):
        return {}
    return {str(counter): {str(cls): n for cls, n in by_class.items() if _int(n) is not None}
            for counter, by_class in value.items() if isinstance(by_class, Mapping)}
