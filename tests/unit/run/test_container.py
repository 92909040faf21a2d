"""Container mode's inputs: the profile and overrides from the pod's environment, caches on its volume."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.errors import UsageError
from launcher.run import container


def test_the_profile_and_overrides_come_from_the_environment() -> None:
    env = {"VLLM_LAUNCH_PROFILE": "/workspace/qwen3.yaml",
           "VLLM_LAUNCH_SET": "vllm.max-model-len=32768; vllm.gpu-memory-utilization=0.9;"}
    assert ("/workspace/qwen3.yaml", ("vllm.max-model-len=32768", "vllm.gpu-memory-utilization=0.9",
                                      "vllm.port=9000")) == container.arguments(None, ("vllm.port=9000",), env)
    assert "configs/x.yaml" == container.arguments("configs/x.yaml", (), env)[0]  # the argument wins
    with pytest.raises(UsageError, match="VLLM_LAUNCH_PROFILE"):
        container.arguments(None, (), {})


def test_caches_go_to_the_pods_volume_unless_set(tmp_path: Path) -> None:
    assert {} == container.cache_environment({}, tmp_path / "absent")
    env = container.cache_environment({"HF_HOME": "/data/hf"}, tmp_path)
    assert "HF_HOME" not in env
    assert str(tmp_path / ".cache" / "vllm") == env["VLLM_CACHE_ROOT"]


def test_container_mode_is_detected() -> None:
    assert container.enabled({"RUNPOD_POD_ID": "x"}, False)
    assert container.enabled({}, True)
    assert not container.enabled({}, False)  # not PID 1 under pytest


def test_the_page_names_the_failure_and_the_fix() -> None:
    permanent = container.Failure("vLLM has no tool-call-parser 'hermes'", 78)
    later = container.Failure("no attempt became ready", 75)
    assert "can never work as configured" in permanent.page() and "hermes" in permanent.page()
    assert "will try again" in later.page() and not later.permanent
