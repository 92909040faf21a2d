"""`status` says when the profile file on disk no longer matches what the running vLLM was started with: the
flags that differ and the command that applies them. The running vLLM is a real process whose command line
is a `vllm serve` one; the daemon a real process holding the profile's lock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.config.load import loads
from launcher.observe import drift
from launcher.observe.status import status_command
from tests.helpers.standins import PROFILE, SERVED, serving, stand_in_vllm


def status(environ: dict[str, str], capsys: pytest.CaptureFixture[str]) -> tuple[str, dict[str, Any]]:
    assert 0 == status_command("qwen3", environ=environ)
    text = capsys.readouterr().out
    assert 0 == status_command("qwen3", as_json=True, environ=environ)
    return text, json.loads(capsys.readouterr().out)


def test_a_vllm_that_runs_the_profile_has_no_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serving(tmp_path) as environ:
        text, report = status(environ, capsys)
    assert "  drift      none: vLLM runs what the profile file says" in text.splitlines()
    assert (report["alive"], report["drift"], report["drift_apply"]) == (True, [], None)


def test_an_edited_profile_is_drift_with_the_command_that_applies_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serving(tmp_path) as environ:
        (tmp_path / "qwen3.yaml").write_text(PROFILE.replace("max-model-len: 1024", "max-model-len: 2048, "
                                                             "enforce-eager: true"))
        text, report = status(environ, capsys)
        pid = environ["DAEMON_PID"]
    assert report["drift"] == [{"flag": "max-model-len", "running": "1024", "profile": "2048"},
                               {"flag": "enforce-eager", "running": None, "profile": "on"}]
    assert report["drift_apply"] == f"kill -HUP {pid}"  # not under systemd: SIGHUP is the reload
    lines = text.splitlines()
    assert f"  drift      the profile file changed since vLLM started; apply with: kill -HUP {pid}" in lines
    assert "  drift      max-model-len: running 1024, profile 2048" in lines
    assert "  drift      enforce-eager: running unset, profile on" in lines


def test_a_new_port_needs_a_restart_not_a_reload(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serving(tmp_path) as environ:
        (tmp_path / "qwen3.yaml").write_text(PROFILE.replace("port: 8000", "port: 8001"))
        _, report = status(environ, capsys)
    assert report["drift"] == [{"flag": "port", "running": "8000", "profile": "8001"}]
    assert report["drift_apply"] == f"vllm-launch down qwen3 && vllm-launch up {tmp_path / 'qwen3.yaml'}"


def test_the_sets_the_daemon_was_started_with_are_applied(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    running = [w if w != "1024" else "4096" for w in SERVED]
    with serving(tmp_path, running, sets=["vllm.max-model-len=4096"]) as environ:
        _, report = status(environ, capsys)
    assert report["drift"] == []


def test_a_profile_that_no_longer_loads_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serving(tmp_path) as environ:
        (tmp_path / "qwen3.yaml").write_text("vllm: {port: 8000}\n")
        text, report = status(environ, capsys)
    assert report["drift"] is None and "a reload would refuse it" in report["drift_unknown"]
    assert any(line.startswith("  drift      unknown: the profile does not load (") and "model" in line
               for line in text.splitlines())


def test_a_vllm_pid_that_is_another_process_now_is_not_compared(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The recorded start time does not match: the PID was reused, and its command line says nothing."""
    with serving(tmp_path) as environ:
        path = tmp_path / "state" / "qwen3" / "state.json"
        data = json.loads(path.read_text())
        data["child"]["start_time"] -= 5
        path.write_text(json.dumps(data))
        text, report = status(environ, capsys)
    assert report["alive"] is True and (report["drift"], report["drift_unknown"]) == (None, None)
    assert "drift" not in text


def test_a_vllm_that_has_exited_is_not_compared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with stand_in_vllm(SERVED) as gone:
        pass
    assert gone.returncode is not None
    with serving(tmp_path) as environ:
        path = tmp_path / "state" / "qwen3" / "state.json"
        data = json.loads(path.read_text())
        data["child"]["pid"] = gone.pid
        path.write_text(json.dumps(data))
        _, report = status(environ, capsys)
    assert report["drift"] is None


@pytest.mark.parametrize(("cgroup", "unit"), [
    ("0::/system.slice/system-vllm\\x2dlaunch.slice/vllm-launch@qwen3.service\n", "vllm-launch@qwen3.service"),
    ("12:pids:/system.slice/system-vllm\\x2dlaunch.slice/vllm-launch@a\\x2db.service\n1:name=systemd:/\n",
     "'vllm-launch@a\\x2db.service'"),
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/vllm-launch@qwen3.service\n",
     "--user vllm-launch@qwen3.service"),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
    ("0::/\n", None),  # a container
])
def test_the_unit_comes_from_the_daemons_cgroup(cgroup: str, unit: str | None) -> None:
    assert drift.unit_in_cgroup(cgroup) == unit


def test_the_daemon_records_its_sets_but_never_an_env_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """status renders the profile as a reload would (with the --set overrides); env.* values may be secrets."""
    import threading

    from launcher.errors import PreflightError
    from launcher.run import daemon, prelaunch

    def stop_here(previous: object) -> None:
        raise PreflightError("stop before launching anything")

    monkeypatch.setenv("VLLM_LAUNCH_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(prelaunch, "stop_recorded_leftovers", stop_here)
    profile = loads("model: /m\nvllm: {host: 127.0.0.1, port: 18999}\nlauncher: {device: cpu}\n", name="p")
    with pytest.raises(PreflightError):
        daemon.run(profile, threading.Event(), console=False,
                   sets=("vllm.max-model-len=4096", "env.WANDB_API_KEY=hunter2"))
    text = (tmp_path / "p" / "state.json").read_text()
    assert json.loads(text)["sets"] == ["vllm.max-model-len=4096"]
    assert "hunter2" not in text
