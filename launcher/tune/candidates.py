"""TEMPORARY stand-in until the candidates module lands."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Candidate:
    """One configuration: the profile as written plus these `vllm.<flag>` overrides (the baseline has none)."""

    overrides: tuple[tuple[str, str], ...] = ()

    @property
    def baseline(self) -> bool:
        return not self.overrides

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.overrides) or "baseline"

    def sets(self) -> tuple[str, ...]:
        return tuple(f"vllm.{k}={v}" for k, v in self.overrides)
