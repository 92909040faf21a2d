"""The daemon's own bookkeeping around a run (the run itself is exercised in the integration tier)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from launcher.config.load import loads
from launcher.errors import PreflightError
from launcher.run import daemon, prelaunch


def test_an_earlier_runs_processes_stay_on_record_until_they_are_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If stopping the leftovers fails (or the daemon dies meanwhile), the next run still knows them."""
    monkeypatch.setenv("VLLM_LAUNCH_STATE_DIR", str(tmp_path))
    record = {"pid": 4242, "pgid": 4242, "start_time": 1.0, "boot_id": "b", "attempt": 1, "known": {"4242": 1.0}}
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "state.json").write_text(json.dumps({"phase": "serving", "child": record}))

    def stuck(previous: object) -> None:
        raise PreflightError("processes of an earlier run cannot be stopped: 4242 python3")

    monkeypatch.setattr(prelaunch, "stop_recorded_leftovers", stuck)
    profile = loads("model: /m\nvllm: {host: 127.0.0.1, port: 18999}\nlauncher: {device: cpu}\n", name="p")
    with pytest.raises(PreflightError):
        daemon.run(profile, threading.Event(), console=False)
    state = json.loads((tmp_path / "p" / "state.json").read_text())
    assert record == state["child"] and "failed" == state["phase"]
