"""`up` on the GPU path in the integration tier: an inventory file (--gpu-inventory) in place of NVML, which
the fake vLLM's engine edits as a real one takes memory on the device."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.integration.harness import Launcher

INVENTORIES = Path(__file__).resolve().parents[1] / "data" / "inventories"


def inventory(tmp: Path, name: str) -> Path:
    """A JSON copy of a shipped inventory (the fake edits JSON with the standard library only)."""
    path = tmp / f"{Path(name).stem}.json"
    path.write_text(json.dumps(yaml.safe_load((INVENTORIES / name).read_text())))
    return path


def start(launch: Callable[..., Launcher], tmp: Path, text: str, inv: str, scenarios: list[dict[str, object]],
          **kwargs: object) -> Launcher:
    """`launch` the profile `text` on a copy of inventory `inv`, shared by the daemon and the fake vLLM."""
    path = inventory(tmp, inv)
    env = {"FAKE_VLLM_INVENTORY": str(path), **kwargs.pop("extra_env", {})}  # type: ignore[dict-item]
    return launch(text, scenarios=scenarios, args=("--gpu-inventory", str(path)), extra_env=env, **kwargs)
