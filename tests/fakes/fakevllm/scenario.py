"""Which scenario rule applies to a launch, and its keys read into typed fields with their defaults.

The keys and their meaning are listed in the package docstring (fakevllm/__init__.py).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakevllm.common import DATA, parse_size, state_dir

IgnoreTerm = bool | str  # True, False or "startup"


def choose_rule(argv: list[str]) -> dict[str, Any]:
    """The first rule of $FAKE_VLLM_SCENARIOS whose `when` occurs in argv (and whose max_uses is not used up);
    without a scenario file, the legacy FAKE_VLLM_* variables."""
    text = " ".join(argv)
    path = os.environ.get("FAKE_VLLM_SCENARIOS")
    if not path:
        return rule_from_environment(os.environ)
    rules = json.loads(Path(path).read_text())
    state = state_dir() or Path(path).parent
    for index, rule in enumerate(rules):
        if rule.get("when") and rule["when"] not in text:
            continue
        if rule.get("max_uses") is not None:
            counter = state / f"fake-vllm-rule-{index}.uses"
            uses = int(counter.read_text()) if counter.exists() else 0
            if uses >= rule["max_uses"]:
                continue
            counter.write_text(str(uses + 1))
        return dict(rule)
    raise SystemExit(f"fake vllm: no scenario matches {text!r}")


def rule_from_environment(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {
        "log": env.get("FAKE_VLLM_LOG"), "after": env.get("FAKE_VLLM_AFTER"),
        "exit_code": int(env.get("FAKE_VLLM_EXIT", "1")),
        "ignore_term": {"1": True, "true": True, "startup": "startup", "0": False, "false": False}.get(
            env.get("FAKE_VLLM_IGNORE_TERM", "").lower()),
        "grandchild": {"1": True, "setsid": "setsid"}.get(env.get("FAKE_VLLM_GRANDCHILD", "")),
        "time_scale": float(env.get("FAKE_VLLM_TIME_SCALE", "0.01")),
    }
    return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class Before:
    """Something done just before the first replayed line matching `pattern` (None: before the first line)."""

    pattern: re.Pattern[str] | None

    def at_start(self) -> bool:
        return self.pattern is None

    def matches(self, line: str) -> bool:
        return self.pattern is not None and self.pattern.search(line) is not None


@dataclass(frozen=True)
class ProgressBar:
    before: Before
    steps: int
    interval_s: float


@dataclass(frozen=True)
class Download:
    before: Before
    size: int
    seconds: float
    chunks: int


@dataclass(frozen=True)
class Scenario:
    log: Path | None
    after: str | None
    exit_code: int
    ignore_term: IgnoreTerm
    grandchild: bool | str
    die_after_s: float | None
    time_scale: float
    max_delay_s: float
    engine_cleanup_s: float
    engine_dead_linger_s: float
    wedge_after_s: float | None
    gpu_memory: int | None
    release_delay_s: float
    progress_bar: ProgressBar | None
    download: Download | None
    completion_s: float = 0.0
    tokens_per_s: float = 200.0
    prefill_s_per_1k: float = 0.0
    token_s: float = 0.0
    batch_slowdown: float = 0.0
    linger_s: float = 20.0
    crash_lines: bool = True
    mark_line: int | None = None
    hide: str | None = None  # a regex: replayed lines it matches are not printed (a logging level that hides them)
    tool_reply: str = "parsed"  # how a chat with tools is answered (fakevllm/server.py tool_answer)

    @classmethod
    def from_rule(cls, rule: dict[str, Any]) -> Scenario:
        log = Path(rule["log"]) if rule.get("log") else None
        if log is not None and not log.is_absolute():
            log = DATA / "logs" / log
        return cls(
            log=log, after=rule.get("after"), exit_code=int(rule.get("exit_code", 1)),
            ignore_term=rule.get("ignore_term", "startup"), grandchild=rule.get("grandchild") or False,
            die_after_s=_seconds(rule.get("die_after_s")), time_scale=float(rule.get("time_scale", 0.01)),
            max_delay_s=float(rule.get("max_delay_s", 0.2)),
            engine_cleanup_s=float(rule.get("engine_cleanup_s", 0.3)),
            engine_dead_linger_s=float(rule.get("engine_dead_linger_s", 0.5)),
            wedge_after_s=_seconds(rule.get("wedge_after_s")),
            gpu_memory=parse_size(rule["gpu_memory"]) if rule.get("gpu_memory") is not None else None,
            release_delay_s=float(rule.get("release_delay_s", 0.0)),
            progress_bar=_progress_bar(rule.get("progress_bar")), download=_download(rule.get("download")),
            completion_s=float(rule.get("completion_s", 0.0)), tokens_per_s=float(rule.get("tokens_per_s", 200.0)),
            prefill_s_per_1k=float(rule.get("prefill_s_per_1k", 0.0)), token_s=float(rule.get("token_s", 0.0)),
            batch_slowdown=float(rule.get("batch_slowdown", 0.0)),
            linger_s=float(rule.get("linger_s", 20.0)), crash_lines=bool(rule.get("crash_lines", True)),
            mark_line=int(rule["mark_line"]) if rule.get("mark_line") is not None else None,
            hide=str(rule["hide"]) if rule.get("hide") else None,
            tool_reply=str(rule.get("tool_reply", "parsed")),
        )

    def lines(self) -> list[str]:
        found = self.log.read_text(errors="replace").splitlines() if self.log else []
        hidden = re.compile(self.hide) if self.hide else None
        return [line for line in found if hidden is None or not hidden.search(line)]


def _seconds(value: object) -> float | None:
    return None if value is None else float(str(value))


def _before(spec: dict[str, Any]) -> Before:
    pattern = spec.get("before") or ""
    return Before(re.compile(pattern) if pattern else None)


def _progress_bar(spec: object) -> ProgressBar | None:
    if not isinstance(spec, dict):
        return None
    return ProgressBar(_before(spec), max(1, int(spec.get("steps", 4))), float(spec.get("interval_s", 0.05)))


def _download(spec: object) -> Download | None:
    if not isinstance(spec, dict):
        return None
    return Download(_before(spec), parse_size(spec.get("bytes", 1024**2)), float(spec.get("seconds", 1.0)),
                    max(1, int(spec.get("chunks", 4))))
