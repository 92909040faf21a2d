"""The capacity gate a ready server must pass, and `max-model-len: auto` fitted to the whole KV pool."""

from __future__ import annotations

from launcher.config.load import loads
from launcher.config.profile import Requirements
from launcher.run import ladder
from launcher.run.readiness import capacity_gate
from launcher.run.supervisor import Ending
from launcher.vllm import command
from launcher.vllm.diagnosis import Diagnosis
from launcher.vllm.versions import semantics

AUTO = "model: m\nvllm: {host: 127.0.0.1, max-model-len: auto}\nlauncher: {device: cpu}\n"
NONE = Requirements(min_sessions=None, min_kv_tokens=None)


def ready(tokens: int, served: int) -> Ending:
    numbers = {"kv_tokens": tokens, "served_max_model_len": served}
    return Ending("ready", 1, Diagnosis("ok", None, None, numbers, "serving"))


def test_auto_fitted_to_the_whole_pool_is_started_again_one_block_lower() -> None:
    """vLLM keeps a null block: 4,096 tokens fitted to a pool of 4,096 would never schedule a full request."""
    profile = loads(AUTO)
    plan = command.build_plan(profile)
    gated = capacity_gate(NONE, ready(4096, 4096), plan, block_size=16)
    assert gated is not None and (gated.kind, gated.diagnosis.reason) == ("failed", "auto_fit_edge")
    step = ladder.next_step(profile, {}, gated.diagnosis, version=semantics("0.32.0"))
    assert dict(step.overrides) == {"max-model-len": 4080}
    assert step.change == "max-model-len auto (4096) → 4080"


def test_auto_that_leaves_the_null_block_is_served() -> None:
    plan = command.build_plan(loads(AUTO))
    assert capacity_gate(NONE, ready(8192, 4096), plan) is None
    assert capacity_gate(NONE, ready(4112, 4096), plan) is None, "one spare block is enough"


def test_an_explicit_length_is_never_cut_by_this_rule() -> None:
    plan = command.build_plan(loads(AUTO.replace("max-model-len: auto", "max-model-len: 4096")))
    assert capacity_gate(NONE, ready(4096, 4096), plan) is None
