"""Two `vllm serve` command lines compared flag by flag."""

from __future__ import annotations

import pytest

from launcher.vllm.argv_drift import FlagDrift, argv_drift, serve_flags

RUNNING = ["/opt/venv/bin/python3", "/opt/venv/bin/vllm", "serve", "Qwen/Qwen3-8B", "--port", "8000",
           "--max-model-len", "32768", "--enforce-eager", "--served-model-name", "qwen", "qwen3"]


def test_the_words_after_serve_are_the_model_and_the_flags() -> None:
    """The interpreter of vLLM's entry script comes before `serve` in /proc/PID/cmdline: not compared."""
    assert serve_flags(RUNNING) == {"model": "Qwen/Qwen3-8B", "port": "8000", "max-model-len": "32768",
                                    "enforce-eager": "on", "served-model-name": "qwen qwen3"}
    assert serve_flags(["vllm", "serve", "m", "--max-model-len=4096", "--seed", "-1"]) == {
        "model": "m", "max-model-len": "4096", "seed": "-1"}
    assert serve_flags(["python", "-c", "import time; time.sleep(30)"]) is None


def test_the_same_command_line_has_no_drift_whatever_runs_it() -> None:
    assert argv_drift(RUNNING, ["vllm", *RUNNING[2:]]) == []


def test_each_changed_added_and_removed_flag_is_named_with_both_values() -> None:
    profile = ["vllm", "serve", "Qwen/Qwen3-8B", "--port", "8000", "--max-model-len", "65536",
               "--served-model-name", "qwen", "qwen3", "--kv-cache-dtype", "fp8"]
    assert argv_drift(RUNNING, profile) == [
        FlagDrift("max-model-len", "32768", "65536"),
        FlagDrift("kv-cache-dtype", None, "fp8"),
        FlagDrift("enforce-eager", "on", None),
    ]


def test_a_new_model_is_drift_and_ignored_flags_are_not() -> None:
    profile = ["vllm", "serve", "Qwen/Qwen3-14B", "--port", "8000", "--max-model-len", "32768",
               "--served-model-name", "qwen", "qwen3", "--nnodes", "2"]
    assert argv_drift(RUNNING, profile, ignore=["nnodes", "enforce-eager"]) == [
        FlagDrift("model", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B")]


@pytest.mark.parametrize("other", [["docker", "ps"], []])
def test_a_command_line_that_is_not_vllm_serve_is_no_comparison(other: list[str]) -> None:
    assert argv_drift(other, RUNNING) is None
    assert argv_drift(RUNNING, other) is None


def test_drift_reads_as_json() -> None:
    assert FlagDrift("max-model-len", "1024", None).to_dict() == {"flag": "max-model-len", "running": "1024",
                                                                 "profile": None}
