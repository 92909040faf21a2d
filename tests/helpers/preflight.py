"""What preflight's tests share besides the guide profile (tests.helpers.profiles.guide_profile): vLLM 0.32's
semantics, the shipped GPU inventories, one problem of a result."""

from __future__ import annotations

from pathlib import Path

from launcher.gpu.inventory import GpuInventory
from launcher.gpu.inventory_file import FakeProbe
from launcher.plan.problems import PreflightResult, Problem
from launcher.vllm.versions import semantics

INVENTORIES = Path(__file__).resolve().parents[1] / "data" / "inventories"
V32 = semantics("0.32.0")


def inventory(name: str, environ: dict[str, str] | None = None) -> GpuInventory:
    """A shipped inventory file (tests/data/inventories) read as the GPU probe reads it."""
    return FakeProbe(INVENTORIES / name, environ or {}).read()


def problem(result: PreflightResult, code: str) -> Problem:
    return next(p for p in result.problems if p.code == code)
