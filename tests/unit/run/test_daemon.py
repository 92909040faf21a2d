"""The daemon's own bookkeeping around a run (the run itself is exercised in the integration tier)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from launcher.config import flags
from launcher.config.load import load, loads
from launcher.config.profile import Profile
from launcher.errors import PreflightError
from launcher.run import daemon, prelaunch, reload
from launcher.run.session import Installed, RunConfig, Session
from launcher.run.state import StateStore
from launcher.vllm.versions import semantics
from tests.helpers.profiles import bomb


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


class Statuses(list[str]):
    """The STATUS= lines a reload sends systemd."""

    def notify(self, **fields: str) -> None:
        self.append(fields["STATUS"])


@pytest.mark.parametrize(("break_it", "words"), [
    (lambda path, monkeypatch: path.write_bytes(path.read_bytes() + b"# r\xe9sum\xe9\n"), "byte 0xe9 at offset"),
    (lambda path, monkeypatch: monkeypatch.setattr(reload, "load", _raise_bug), "RuntimeError: a bug"),
    # An alias bomb: refused while composing, so the main thread is back to its watchdog pings at once.
    (lambda path, monkeypatch: path.write_text(bomb(6)), "more than 20,000 values once its aliases are expanded"),
])
def test_a_reload_that_fails_in_any_way_keeps_serving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       break_it: Any, words: str) -> None:
    """Any failure reading the new profile (a bad byte, or a bug: not only LauncherError) is reload.refused
    with one line, recorded in state; the daemon goes on with the profile it serves."""
    path = tmp_path / "p.yaml"
    path.write_text("model: /m\nvllm: {host: 127.0.0.1, port: 18999}\nlauncher: {device: cpu}\n")
    session = Session(RunConfig(load(path), {}), threading.Event(), StateStore(tmp_path))
    statuses = Statuses()
    monkeypatch.setattr(session, "notify", statuses.notify)
    break_it(path, monkeypatch)
    with capture_logs() as logs:
        assert reload.check(session) is None
    refused = [e for e in logs if e["event"] == "reload.refused"]
    assert 1 == len(refused) and words in refused[0]["reason"] and "\n" not in refused[0]["reason"]
    assert words in statuses[0]
    assert "refused" == session.store.data["reload"]["outcome"]


def installed(lkg_key: str) -> Installed:
    return Installed("vllm", semantics("0.32.0"), flags.shipped_catalog(), lkg_key=lkg_key)


def _raise_bug(*args: object) -> Profile:
    raise RuntimeError("a bug")


@pytest.mark.parametrize("overrides", [
    "abc",
    ["max-model-len", 1024],
    {"trust-remote-code": True, "api-key": "smuggled"},
    {"max-model-len": 1024, "served-model-name": ["a", "--api-key", "smuggled"]},
    {"gpu-memory-utilization": 2},
    {"kv-cache-dtype": "--trust-remote-code"},
    {"enforce-eager": "--api-key"},
    {"max-num-batched-tokens": True},
    {"max-model-len": {"a": 1}},
])
def test_a_tampered_last_known_good_is_ignored_with_a_warning(tmp_path: Path, overrides: Any) -> None:
    """The state directory is writable by the service user, and so by vLLM: its overrides pass the profile's
    validator and the flag catalogue, else the start goes on from the profile as written."""
    (tmp_path / "last_known_good.json").write_text(json.dumps({"k": {"overrides": overrides, "kv_tokens": 1}}))
    with capture_logs() as logs:
        assert daemon._last_known_good(tmp_path, installed("k")) is None
    ignored = [e for e in logs if e["event"] == "last_known_good.ignored"]
    assert 1 == len(ignored) and str(tmp_path / "last_known_good.json") in ignored[0]["error"]


def test_the_ladders_own_overrides_are_used(tmp_path: Path) -> None:
    saved = {"max-model-len": 8064, "enforce-eager": True, "gpu-memory-utilization": 0.85,
             "kv-cache-dtype": "auto", "max-num-batched-tokens": 1024}
    (tmp_path / "last_known_good.json").write_text(json.dumps({"k": {"overrides": saved, "kv_tokens": 1}}))
    found = daemon._last_known_good(tmp_path, installed("k"))
    assert found is not None and saved == found[1]
