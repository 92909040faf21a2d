"""What the daemon writes: state.json of one profile (StateStore), and the last-known-good records.

State dir: $VLLM_LAUNCH_STATE_DIR, else $STATE_DIRECTORY (systemd's StateDirectory=),
else $XDG_STATE_HOME/vllm-launch (~/.local/state/vllm-launch), one folder per
profile (statedir.py). Files are written atomically with mode 0600 and never hold a secret. The reader of
state.json is runstate.py; `status` and `down` are launcher/observe/.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Unpack

import structlog

from launcher.runstate import Decision, Written
from launcher.statedir import read_json, write_json_atomic

log = structlog.get_logger("vllm_launch")

# A daemon that serves for months keeps the latest decisions and counts the rest (state stays small).
MAX_DECISIONS = 50
MAX_WARNINGS = 20  # failure lines a start-up survived (acquitted), newest last


class StateStore:
    """state.json of one profile: updated in place, rewritten atomically on every change; listeners (the
    metrics) see every change."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "state.json"
        self.data: dict[str, Any] = {}  # what state.json holds: the keys of runstate.Written
        self.listeners: list[Callable[[Mapping[str, Any]], None]] = []
        self.write_failed = False

    def note(self, **fields: Unpack[Written]) -> None:
        """Record `fields` without writing the file: a fact too frequent to rewrite state.json for (the loading
        phase of every progress line), written with the next update."""
        self.data.update(fields)

    def update(self, **fields: Unpack[Written]) -> None:
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
