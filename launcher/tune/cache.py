"""What `tune` has measured, kept in the profile's state directory so that a rerun measures only what is missing.

One file per candidate under `<state dir>/<profile>/tune/`, named by a digest of everything a measurement
depends on: the profile's bytes, the candidate's flags, the workload, the SLO, the vLLM version and the
GPU. Change any of them and the old measurements are simply not found (nothing is invalidated by hand).
A file holds each measured level (round, users, met, figures) and, for a candidate that could not start
or died, that verdict and its diagnosis.

The directory is the launcher's own (0700, checked private before use), but a file in it is still read
as hostile: bounded in size, strict JSON, every field type-checked; a file that fails is ignored (its
levels are measured again), never trusted in part.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from launcher import safefile
from launcher.statedir import check_private_dir, write_json_atomic

FORMAT = 1
WHAT = "the tune cache"
MAX_FILE_BYTES = 4 * 2**20
FIGURES = ("ttft_p95_ms", "tpot_p95_ms", "output_tokens_per_s", "output_tokens_per_s_per_user", "requests", "failed")


@dataclass(frozen=True, slots=True)
class Level:
    """One measured level: `users` concurrent users in `round`, and what came of it."""

    round: int
    users: int
    met: bool
    figures: dict[str, float] = field(default_factory=dict)  # FIGURES, as measured
    broken: tuple[str, ...] = ()  # what missed the SLO, when it missed


@dataclass
class Record:
    """Everything known about one candidate under one key."""

    key: str
    levels: dict[tuple[int, int], Level] = field(default_factory=dict)
    verdict: str | None = None  # None: measurable; "infeasible" (did not start) or "died" (while measured)
    diagnosis: str | None = None  # with a verdict: the failure class and its evidence, one line

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "key": self.key, "verdict": self.verdict, "diagnosis": self.diagnosis,
                "levels": [{**asdict(level), "broken": list(level.broken)} for level in self.levels.values()]}


def key_of(*, profile_bytes: bytes, overrides: tuple[tuple[str, str], ...], workload: Mapping[str, Any], slo: str,
           vllm_version: str, gpu: str) -> str:
    """The digest a measurement is filed under (sha256 of its canonical JSON)."""
    material = {"profile": hashlib.sha256(profile_bytes).hexdigest(), "overrides": sorted(overrides),
                "workload": dict(sorted(workload.items())), "slo": slo, "vllm": vllm_version, "gpu": gpu}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()


class Store:
    def __init__(self, directory: Path, *, private: bool = False) -> None:
        self.directory = directory
        self.private_dir = private  # checked before every write: a link put there while tune runs is refused

    @classmethod
    def private(cls, directory: Path) -> Store:
        """The store in `directory`, created 0700 and trusted only as the state directory is: not a link, this
        user's, and nobody else can write it (else tune, maybe run as root, would write wherever it points);
        ConfigError otherwise."""
        with contextlib.suppress(OSError):  # a failure shows in the check below
            directory.mkdir(mode=0o700, exist_ok=True)
        check_private_dir(directory, WHAT, follow=False)
        return cls(directory, private=True)

    def path(self, key: str) -> Path:
        return self.directory / f"{key[:32]}.json"

    def load(self, key: str) -> Record:
        """The record under `key`, or an empty one (nothing cached, or a file that cannot be trusted: a link,
        a FIFO, too large; measured again)."""
        try:
            raw = safefile.read_bytes(self.path(key), MAX_FILE_BYTES, follow=False)
        except safefile.Unreadable:
            return Record(key)
        parsed = _record(raw, key)
        return parsed if parsed is not None else Record(key)

    def save(self, record: Record) -> None:
        if self.private_dir:
            check_private_dir(self.directory, WHAT, follow=False)
        write_json_atomic(self.path(record.key), record.to_json())


def _record(raw: bytes, key: str) -> Record | None:
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_refuse)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
        return None
    verdict, diagnosis, levels = data.get("verdict"), data.get("diagnosis"), data.get("levels")
    if verdict not in (None, "infeasible", "died") or not isinstance(diagnosis, str | None) \
            or not isinstance(levels, list):
        return None
    record = Record(key, verdict=verdict, diagnosis=None if diagnosis is None else diagnosis[:500])
    for item in levels:
        level = _level(item)
        if level is None:
            return None
        record.levels[(level.round, level.users)] = level
    return record


def _level(item: object) -> Level | None:
    if not isinstance(item, dict):
        return None
    round_, users, met, figures, broken = (item.get(k) for k in ("round", "users", "met", "figures", "broken"))
    if not (_count(round_) and _count(users) and users >= 1 and isinstance(met, bool)):
        return None
    if not isinstance(figures, dict) or set(figures) - set(FIGURES) or not all(_number(v) for v in figures.values()):
        return None
    if not isinstance(broken, list) or not all(isinstance(b, str) for b in broken):
        return None
    return Level(round_, users, met, {k: float(v) for k, v in figures.items()}, tuple(b[:300] for b in broken[:20]))


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**6


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _refuse(name: str) -> None:
    raise ValueError(f"{name} is not JSON")
