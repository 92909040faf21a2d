"""What preflight finds: problems with a severity and a fix, and the flag changes it makes."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from launcher.config.profile import FlagValue
from launcher.gpu.catalog import GpuSpec
from launcher.gpu.inventory import GpuInventory
from launcher.units import GIB


class Severity(enum.StrEnum):
    ERROR = "error"  # the launch is doomed: preflight refuses it
    WARNING = "warning"  # worth saying; the launch goes on


ERROR = Severity.ERROR
WARNING = Severity.WARNING


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding: what is wrong, how bad, and what to do."""

    code: str
    severity: Severity
    message: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity, "message": self.message, "fix": self.fix}


@dataclass(frozen=True, slots=True)
class PreflightResult:
    """The inventory, the problems, and the flags preflight changed (with a line saying why)."""

    inventory: GpuInventory
    problems: tuple[Problem, ...]
    overrides: Mapping[str, FlagValue]
    changes: tuple[str, ...]
    gpu: GpuSpec | None

    @property
    def blocking(self) -> bool:
        return any(p.severity == ERROR for p in self.problems)

    def to_dict(self) -> dict[str, Any]:
        return {"inventory": self.inventory.to_dict(), "problems": [p.to_dict() for p in self.problems],
                "overrides": dict(self.overrides), "changes": list(self.changes), "blocking": self.blocking}


@dataclass(slots=True)
class Findings:
    """The evaluation in progress (private and mutable; the result is frozen)."""

    problems: list[Problem] = field(default_factory=list)
    overrides: dict[str, FlagValue] = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)
    utilization: float | None = None  # after a rung change
    kv_factor: int = 1  # KV bytes per token multiplier after dropping FP8

    def add(self, severity: Severity, code: str, message: str, fix: str) -> None:
        self.problems.append(Problem(code, severity, message, fix))

    def result(self, inventory: GpuInventory, gpu: GpuSpec | None) -> PreflightResult:
        return PreflightResult(inventory, tuple(self.problems), MappingProxyType(dict(self.overrides)),
                               tuple(self.changes), gpu)


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"
