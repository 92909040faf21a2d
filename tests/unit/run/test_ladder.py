"""The ladder: each failure class → the next change, within the profile's bounds (pure decisions)."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.config import profile
from launcher.errors import LauncherError
from launcher.run import ladder
from launcher.vllm.diagnosis import Diagnosis
from launcher.vllm.versions import semantics
from tests.helpers.profiles import load_profile

V33 = semantics("0.33.0")
V11 = semantics("0.11.0")

BASE = """\
model: /m
vllm:
  host: 127.0.0.1
  max-model-len: 32768
  gpu-memory-utilization: 0.92
  kv-cache-dtype: fp8
launcher:
  ladder:
    gpu_memory_utilization: [0.92, 0.88, 0.80]
    min_model_len: 4096
"""


def diag(cls: str, reason: str | None = None, **numbers: Any) -> Diagnosis:
    return Diagnosis(cls, reason, f"{cls} root cause", numbers)


# (profile, current overrides, diagnosis, version, expected new overrides)
STEPS: list[tuple[profile.Profile, dict[str, Any], Diagnosis, Any, dict[str, Any]]] = [
    (load_profile(BASE), {}, diag("startup_memory", free_gib=42.0, total_gib=44.4), V33, {"gpu-memory-utilization": 0.88}),
    (load_profile(BASE), {}, diag("startup_memory", free_gib=38.0, total_gib=44.4), V33, {"gpu-memory-utilization": 0.8}),
    (load_profile(BASE), {}, diag("startup_memory"), V33, {"gpu-memory-utilization": 0.88}),
    (load_profile(BASE), {"gpu-memory-utilization": 0.88}, diag("startup_memory"), V33, {"gpu-memory-utilization": 0.8}),
    (load_profile(BASE), {}, diag("fp8_unsupported"), V11, {"kv-cache-dtype": "auto"}),
    (load_profile(BASE), {}, diag("kv_insufficient", estimated_max_model_len=8064, max_model_len=32768), V33,
     {"max-model-len": 8064}),
    (load_profile(BASE), {}, diag("kv_insufficient", estimated_max_model_len=8070), V33, {"max-model-len": 8064}),
    (load_profile(BASE.replace("max-model-len: 32768", "max-model-len: 32768\n  block-size: 32")), {},
     diag("kv_insufficient", estimated_max_model_len=8070), V33, {"max-model-len": 8064}),
    (load_profile(BASE, sets={"launcher.require.min_sessions": 2}), {},
     diag("kv_insufficient", "below_min_sessions", kv_tokens=40000), V33, {"max-model-len": 20000}),
    (load_profile(BASE), {"gpu-memory-utilization": 0.88}, diag("no_cache_blocks"), V33, {"gpu-memory-utilization": 0.92}),
    (load_profile(BASE), {}, diag("no_cache_blocks"), V33, {"enforce-eager": True}),
    (load_profile(BASE), {"enforce-eager": True}, diag("no_cache_blocks"), V33,
     {"enforce-eager": True, "max-num-batched-tokens": 1024}),
    (load_profile(BASE), {}, diag("no_cache_blocks"), V11, {"max-num-batched-tokens": 1024}),
    (load_profile(BASE), {"max-model-len": 8064}, diag("engine_dead"), V33, {"max-model-len": 8064}),
    (load_profile(BASE), {}, diag("unknown"), V33, {}),
    (load_profile(BASE), {"max-model-len": 8064}, diag("compile_cache"), V33, {"max-model-len": 8064}),
    (load_profile(BASE), {}, diag("distributed_init"), V33, {}),
    (load_profile("model: /m\nvllm: {host: 127.0.0.1, gpu-memory-utilization: 0.9}\nlauncher: {device: cpu, ladder: "
          "{gpu_memory_utilization: [0.9, 0.7]}}\n"), {}, diag("startup_memory", "host_oom_killer"), V33,
     {"gpu-memory-utilization": 0.7}),
]


class TestSteps:
    @pytest.mark.parametrize(("p", "overrides", "d", "version", "expected"), STEPS)
    def test_next_change(self, p: profile.Profile, overrides: dict[str, Any], d: Diagnosis, version: Any,
                         expected: dict[str, Any]) -> None:
        """Each class takes its own remedy; every step says what changed and why."""
        step = ladder.next_step(p, overrides, d, version=version)
        assert expected == dict(step.overrides)
        assert step.reason.startswith(d.cls)
        assert step.change

    def test_no_cache_blocks_never_lowers_utilization(self) -> None:
        """Lower utilization shrinks the budget that weights already fill: never the remedy."""
        step = ladder.next_step(load_profile(BASE), {}, diag("no_cache_blocks"), version=V33)
        assert "gpu-memory-utilization" not in step.overrides

    def test_higher_rung_needs_free_memory(self) -> None:
        """A higher rung is taken only if the device has that much free."""
        step = ladder.next_step(load_profile(BASE), {"gpu-memory-utilization": 0.8}, diag("no_cache_blocks"), version=V33,
                                free_fraction=0.9)
        assert 0.88 == step.overrides["gpu-memory-utilization"]
        step = ladder.next_step(load_profile(BASE), {"gpu-memory-utilization": 0.8}, diag("no_cache_blocks"), version=V33,
                                free_fraction=0.85)
        assert {"gpu-memory-utilization": 0.8, "enforce-eager": True} == dict(step.overrides)


# (profile, overrides, diagnosis, exit code, words)
STOPS: list[tuple[profile.Profile, dict[str, Any], Diagnosis, int, str]] = [
    (load_profile(BASE), {}, diag("config", "tool_parser", tool_parser="nosuch", valid_tool_parsers=["hermes", "qwen3_coder"]),
     78, "one of: hermes, qwen3_coder"),
    (load_profile(BASE), {}, diag("config", "port_in_use"), 78, "port"),
    (load_profile(BASE), {}, diag("config", "max_model_len_above_model", max_model_len=8192, derived_max_model_len=4096), 78,
     "at most that"),
    (load_profile(BASE), {}, diag("startup_memory", free_gib=10.5, total_gib=139.8), 75, "at most 0.07"),
    (load_profile(BASE), {"gpu-memory-utilization": 0.8}, diag("startup_memory"), 75, "rungs are [0.92, 0.88, 0.8]"),
    (load_profile("model: /m\nvllm: {host: 127.0.0.1}\n"), {}, diag("startup_memory"), 75, "allows no other utilization"),
    (load_profile(BASE, sets={"launcher.ladder.drop_fp8_kv_if_unsupported": "false"}), {}, diag("fp8_unsupported"), 78,
     "drop_fp8_kv_if_unsupported"),
    (load_profile(BASE), {}, diag("kv_insufficient", estimated_max_model_len=1920, needed_gib=4.0, available_kv_gib=0.2), 78,
     "below launcher.ladder.min_model_len 4096"),
    (load_profile("model: /m\nvllm: {host: 127.0.0.1, max-model-len: 32768}\n"), {},
     diag("kv_insufficient", estimated_max_model_len=8064), 78, "does not allow cutting the context"),
    (load_profile(BASE), {"enforce-eager": True, "max-num-batched-tokens": 1024}, diag("no_cache_blocks"), 78,
     "quantized weights"),
    (load_profile(BASE), {}, diag("config", "missing_dependency", package="torchvision"), 78, "pip install torchvision"),
    (load_profile(BASE), {}, diag("startup_memory", "host_oom_killer"), 75, "does not shrink host memory"),
    (load_profile(BASE), {}, diag("kv_insufficient", max_num_seqs=256, mamba_cache_blocks=189, estimated_max_model_len=8064),
     78, "set max-num-seqs to at most 189"),
]


class TestStops:
    @pytest.mark.parametrize(("p", "overrides", "d", "code", "words"), STOPS)
    def test_stop_with_the_arithmetic(self, p: profile.Profile, overrides: dict[str, Any], d: Diagnosis, code: int,
                                      words: str) -> None:
        """Config errors stop at once (78); a ladder with nothing left is exhausted (75): launcher errors both."""
        with pytest.raises(LauncherError) as caught:
            ladder.next_step(p, overrides, d, version=V33)
        assert code == caught.value.exit_code
        assert words in str(caught.value)

    def test_a_change_already_tried_is_exhausted(self) -> None:
        with pytest.raises(ladder.Exhausted, match="already tried"):
            ladder.next_step(load_profile(BASE), {}, diag("fp8_unsupported"), version=V11, tried=[{"kv-cache-dtype": "auto"}])


class TestRemedyText:
    @pytest.mark.parametrize(("d", "words"), [
        (diag("kv_insufficient", estimated_max_model_len=8064), "max-model-len → 8064"),
        (diag("kv_insufficient", max_num_seqs=256, mamba_cache_blocks=189), "max-num-seqs at most 189"),
        (diag("startup_memory", free_gib=10.5, total_gib=139.8), "at most 0.07"),
        (diag("no_cache_blocks"), "never a lower utilization"),
        (diag("fp8_unsupported"), "kv-cache-dtype → auto"),
        (diag("engine_dead"), "restart"),
        (diag("ok"), "none"),
        (diag("compile_cache"), "torch.compile cache aside"),
        (diag("distributed_init"), "NCCL_SOCKET_IFNAME"),
        (diag("config", "missing_dependency", package="timm"), "pip install timm"),
        (diag("startup_memory", "host_oom_killer"), "OOM killer"),
    ])
    def test_generic_remedies(self, d: Diagnosis, words: str) -> None:
        assert words in ladder.describe_remedy(d)

    def test_a_log_that_ends_while_starting_names_the_deadlines_that_end_a_hang(self) -> None:
        """No line tells a log cut while vLLM starts from a start-up that hung: the remedy says which settings end a
        hang live; a served log says only that nothing failed."""
        starting = ladder.describe_remedy(Diagnosis("ok", None, None, {}, "starting"))
        assert "launcher.startup_stall" in starting and "launcher.startup_timeout" in starting
        assert ladder.describe_remedy(Diagnosis("ok", None, None, {}, "serving")) == "none: no failure in this log"


class TestOncePerRun:
    """A step a run takes once: the compile cache moved aside, a group's retry. A second time stops with 75."""

    @pytest.mark.parametrize(("cls", "once", "words"), [
        ("compile_cache", ladder.MOVE_COMPILE_CACHE, "VLLM_DISABLE_COMPILE_CACHE"),
        ("distributed_init", ladder.RETRY_DISTRIBUTED, "NCCL_SOCKET_IFNAME"),
    ])
    def test_the_second_time_stops(self, cls: str, once: str, words: str) -> None:
        step = ladder.next_step(load_profile(BASE), {}, diag(cls), version=V33)
        assert once == step.once
        with pytest.raises(ladder.Exhausted) as caught:
            ladder.next_step(load_profile(BASE), {}, diag(cls), version=V33, done=[once])
        assert 75 == caught.value.exit_code
        assert words in str(caught.value)

    def test_flags_tried_before_do_not_block_the_first_move(self) -> None:
        """The move is the change: an earlier same-flags retry of an unknown failure does not count against it."""
        step = ladder.next_step(load_profile(BASE), {}, diag("compile_cache"), version=V33, tried=[{}])
        assert ladder.MOVE_COMPILE_CACHE == step.once

    def test_other_classes_take_no_once_step(self) -> None:
        assert ladder.next_step(load_profile(BASE), {}, diag("startup_memory"), version=V33).once is None
