"""Container mode's inputs: the profile and overrides from the pod's environment, caches on its volume."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.errors import UsageError
from launcher.run import container, daemon


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


def test_a_profile_with_a_bad_byte_keeps_the_pod_up_saying_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Latin-1 byte in the pod's profile: the page says where (exit 78, permanent), nothing crashes."""
    path = tmp_path / "pod.yaml"
    path.write_bytes(b"model: Org/Model\nvllm: {host: 127.0.0.1}\n# r\xe9sum\xe9\n")
    shown: list[container.Failure] = []

    def stay_up(failure: container.Failure, stop: object, host: str, port: int, wait_s: float | None) -> bool:
        shown.append(failure)
        return True  # SIGTERM

    monkeypatch.setattr(container, "stay_up", stay_up)
    monkeypatch.setattr(container, "cache_environment", lambda environ: {})
    assert 0 == daemon.up(str(path), container_mode=True)
    assert 1 == len(shown) and shown[0].permanent
    assert f"{path}:3: byte 0xe9 at offset" in shown[0].message


def test_an_unexpected_error_keeps_the_pod_up_and_tries_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only the launcher's own errors: anything that escapes shows on the page (not permanent: it retries)."""
    shown: list[container.Failure] = []

    def stay_up(failure: container.Failure, stop: object, host: str, port: int, wait_s: float | None) -> bool:
        shown.append(failure)
        return len(shown) == 2  # the second try, after the backoff, then SIGTERM

    def broken(*args: object) -> None:
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(container, "stay_up", stay_up)
    monkeypatch.setattr(container, "cache_environment", lambda environ: {})
    monkeypatch.setattr(daemon, "load", broken)
    assert 0 == daemon.up(str(tmp_path / "pod.yaml"), container_mode=True)
    assert ["RuntimeError: a bug over two lines"] * 2 == [f.message for f in shown]
    assert not shown[0].permanent
