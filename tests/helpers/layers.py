"""The package's stages, lowest first: a module imports only from its own stage or a lower one
(tests/unit/test_architecture.py), and CONTRIBUTING.md's Layout names them (tests/unit/test_layout.py)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "launcher"
LAYERS = {"ground": 0, "config": 1, "gpu": 1, "vllm": 2, "plan": 3, "run": 4, "deploy": 4, "observe": 5, "bench": 5,
          "tune": 6, "cli": 7}
