"""Where a start-up's time went: each phase's seconds, from the events of one log and when each was read.

`PhaseClock.feed(event, t)` takes the classifier's events with a time in seconds: for a log file the line's own
timestamp (`line_time`: vLLM's `INFO 11-29 15:41:29`, or an ISO one from `docker logs -t`), live the moment the
pump read the line. vLLM's own durations win where it prints them (`Loading weights took`, `torch.compile takes
… s in total`, `Graph capturing finished in … secs`, `init engine (profile, create kv cache, warmup model) took`);
the others are the time from the phase's first line to the next phase's (or to the marker that ends it).
Memory profiling and the KV cache's allocation are what the engine's initialisation spent outside torch.compile,
graph capture and warm-up. With TP/PP every rank prints its own durations: the slowest rank's count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from launcher.vllm.signatures import EventKind, LogEvent

# The order the console and `diagnose` show them in.
PHASES = ("download", "weights", "compile", "profiling", "cuda_graphs", "warmup", "api_server")
WORDS = {"download": "download", "weights": "weights", "compile": "compile", "profiling": "profiling and KV cache",
         "cuda_graphs": "graphs", "warmup": "warm-up", "api_server": "API server"}
# Reported durations: the event value that carries it, and the phase it measures.
_REPORTED = {"weights_s": "weights", "model_loading_s": "weights", "compile_s": "compile",
             "cuda_graphs_s": "cuda_graphs"}
# Events that close the phase under way without opening another.
_CLOSES = {EventKind.MODEL_LOADING: "weights", EventKind.STARTUP_COMPLETE: "api_server"}
_VLLM_TIME = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,](\d+))? ")
_ISO_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")


def line_time(line: str) -> float | None:
    """Seconds of the line's own timestamp (vLLM prints no year: a leap year stands in), or None."""
    head = line[:300]
    found = _VLLM_TIME.search(head)
    if found is not None:
        year, (month, day, hour, minute, second, fraction) = 2000, found.groups()
    else:
        iso = _ISO_TIME.search(head)
        if iso is None:
            return None
        year, month, day, hour, minute, second, fraction = int(iso.group(1)), *iso.groups()[1:]
    try:
        moment = datetime(year, int(month), int(day), int(hour), int(minute), int(second))
    except ValueError:
        return None
    return moment.timestamp() + (float("0." + fraction) if fraction else 0.0)


def phase_of(event: LogEvent) -> str | None:
    """The phase a line says the start-up is in (None: it says nothing of one)."""
    kind = event.kind
    if kind == EventKind.PROGRESS:
        phase = event.values.get("phase")
        return phase if isinstance(phase, str) else None
    if kind == EventKind.INFO and "compile_cache" in event.values:  # a cache hit (a miss is a progress line)
        return "compile"
    if kind in (EventKind.AVAILABLE_KV, EventKind.KV_TOKENS, EventKind.GPU_BLOCKS, EventKind.MEMORY_BUDGET):
        return "profiling"
    if kind == EventKind.SERVER_STARTING:
        return "api_server"
    return None


def timed(event: LogEvent) -> bool:
    """The event moves the clock: a phase's line, a duration vLLM reports, or a marker that ends a phase."""
    return event.kind in _TIMING_KINDS or phase_of(event) is not None


_TIMING_KINDS = frozenset({EventKind.INFO, EventKind.MODEL_LOADING, EventKind.STARTUP_COMPLETE})


@dataclass(slots=True)
class PhaseClock:
    """The fold: feed every event with its time, read `seconds()` and `compile_cache` at any moment."""

    timed: dict[str, float] = field(default_factory=dict)  # seconds between transitions
    reported: dict[str, float] = field(default_factory=dict)  # vLLM's own durations
    compile_cache: str | None = None  # "hit" or "miss"
    engine_init_s: float | None = None
    current: str | None = None
    since: float | None = None
    first: float | None = None
    last: float | None = None

    def feed(self, event: LogEvent, t: float | None) -> None:
        """One event and its time (None: a line without a timestamp, a progress bar's, stands at the last one)."""
        t = self.last if t is None else t
        if t is not None:
            self.first = t if self.first is None else self.first
            self.last = t
        values = event.values
        for key, phase in _REPORTED.items():
            value = values.get(key)
            if isinstance(value, int | float):
                self.reported[phase] = max(self.reported.get(phase, 0.0), float(value))
        cache = values.get("compile_cache")
        if cache in ("hit", "miss") and self.compile_cache != "miss":
            self.compile_cache = str(cache)  # one rank that compiled makes the start-up a miss
        init = values.get("engine_init_s")
        if isinstance(init, int | float):
            self.engine_init_s = max(self.engine_init_s or 0.0, float(init))
            self._close(t)
        if t is None:
            return
        closes = _CLOSES.get(event.kind)
        if (closes is not None and self.current == closes) or event.message.startswith("Warming up done"):
            self._close(t)
            return
        opened = phase_of(event)
        if opened is not None and opened != self.current and (opened != "api_server" or "api_server" not in self.timed):
            self._close(t)
            self.current, self.since = opened, t

    def _close(self, t: float | None) -> None:
        if self.current is not None and self.since is not None and t is not None:
            self.timed[self.current] = self.timed.get(self.current, 0.0) + max(0.0, t - self.since)
        self.current = self.since = None

    def seconds(self, now: float | None = None) -> dict[str, float]:
        """Each phase's seconds so far, in PHASES order (the phase under way counts up to `now`, or the last line)."""
        timed = dict(self.timed)
        end = now if now is not None else self.last
        if self.current is not None and self.since is not None and end is not None:
            timed[self.current] = timed.get(self.current, 0.0) + max(0.0, end - self.since)
        merged = {**timed, **self.reported}
        if self.engine_init_s is not None:
            inside = sum(merged.get(phase, 0.0) for phase in ("compile", "cuda_graphs", "warmup"))
            if self.engine_init_s >= inside:
                merged["profiling"] = self.engine_init_s - inside
        return {phase: round(merged[phase], 2) for phase in PHASES if phase in merged}

    def total(self, now: float | None = None) -> float | None:
        """Seconds from the first timed line to `now` (or the last one)."""
        end = now if now is not None else self.last
        return None if self.first is None or end is None else round(max(0.0, end - self.first), 2)

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        return {"seconds": self.seconds(now), "compile_cache": self.compile_cache, "total_s": self.total(now)}


def short(phases: dict[str, float], compile_cache: str | None = None, limit: int = 4) -> str:
    """`weights 12s, compile 30s (cache hit), graphs 8s`: the longest phases, in start-up order. A name that is no
    phase (a tampered state file) is left out."""
    known = [phase for phase in phases if phase in WORDS]
    kept = sorted(sorted(known, key=lambda phase: -phases[phase])[:limit], key=PHASES.index)
    parts = []
    for phase in kept:
        text = f"{WORDS[phase]} {phases[phase]:.0f}s"
        if phase == "compile" and compile_cache:
            text += f" (cache {compile_cache})"
        parts.append(text)
    return ", ".join(parts)


# The buckets of the start-up phase histogram (the exporter's vllm_launch_startup_phase_seconds): a cached compile
# takes seconds, a cold 70B download and compile tens of minutes.
BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


def observe(histogram: dict[str, Any], phases: dict[str, float]) -> dict[str, Any]:
    """`histogram` (phase → {"buckets": cumulative counts per BUCKETS bound, "count", "sum"}) with one start-up's
    phases added: what the exporter serves as a Prometheus histogram, kept in state so that it outlives a scrape."""
    updated = dict(histogram)
    for phase, seconds in phases.items():
        old = updated.get(phase)
        old = old if isinstance(old, dict) else {}
        buckets = old.get("buckets")
        counts = [int(n) for n in buckets] if isinstance(buckets, list) and len(buckets) == len(BUCKETS) else \
            [0] * len(BUCKETS)
        counts = [n + (1 if seconds <= bound else 0) for n, bound in zip(counts, BUCKETS, strict=True)]
        updated[phase] = {"buckets": counts, "count": int(old.get("count") or 0) + 1,
                          "sum": round(float(old.get("sum") or 0.0) + seconds, 2)}
    return updated
