"""A configuration failure: the ladder's Stop and `diagnose`'s remedy say the same line, its reason's row."""

from __future__ import annotations

import pytest

from launcher.config.load import loads
from launcher.run import ladder
from launcher.vllm.config_reasons import FIXES, ConfigReason, config_fix
from launcher.vllm.diagnosis import Diagnosis
from launcher.vllm.signatures import CONFIG
from launcher.vllm.versions import semantics

PROFILE = loads("model: /m\nvllm:\n  host: 127.0.0.1\n")


@pytest.mark.parametrize("reason", [*FIXES, None, "not_a_reason"])
def test_stop_and_remedy_come_from_one_row(reason: ConfigReason | str | None) -> None:
    d = Diagnosis(CONFIG, reason, "vLLM's own line", {"tool_parser": "x", "valid_tool_parsers": ["hermes"],
                                                      "package": "timm", "world_size": 2, "gpus": 1})
    with pytest.raises(ladder.Stop) as caught:
        ladder.next_step(PROFILE, {}, d, version=semantics("0.33.0"))
    assert config_fix(d) == str(caught.value)
    assert f"stop (exit 78), never retried: {config_fix(d)}" == ladder.describe_remedy(d)
    assert f"stop (exit 78): {config_fix(d)}" == ladder.describe_remedy(d, PROFILE)
