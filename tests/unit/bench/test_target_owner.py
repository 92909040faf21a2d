"""`bench PROFILE` sends the profile's API key only to the vLLM our daemon runs for it, when one does."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from launcher.bench.client import ServerError
from launcher.bench.command import resolve_target
from launcher.errors import Outcome
from launcher.run.processes import boot_id, start_time

LISTEN = "import socket, sys, time\ns = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n" \
         "print('up', flush=True); time.sleep(60)\n"


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, str], Path, int]]:
    """A process our daemon recorded as its child (state.json: same boot, PID, start time) and a profile."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-c", LISTEN, str(port)], stdout=subprocess.PIPE, text=True)
    state = tmp_path / "state" / "p"
    state.mkdir(parents=True)
    known = {str(child.pid): start_time(psutil.Process(child.pid))}
    (state / "state.json").write_text(json.dumps({"phase": "serving", "child": {
        "pid": child.pid, "boot_id": boot_id(), "known": known}}))
    profile = tmp_path / "p.yaml"
    profile.write_text(f"model: m\nvllm: {{host: 127.0.0.1, port: {port}}}\napi_key: {{env: K}}\n")
    environ = {"VLLM_LAUNCH_STATE_DIR": str(tmp_path / "state"), "K": "the-key"}
    try:
        yield child, environ, profile, port
    finally:
        child.kill()
        child.wait()


def test_the_recorded_child_listening_is_ours(recorded: tuple[subprocess.Popen[str], dict[str, str], Path, int]
                                              ) -> None:
    child, environ, profile, _ = recorded
    assert child.stdout is not None and child.stdout.readline().strip() == "up"
    assert resolve_target(str(profile), environ).api_key == "the-key"


def test_a_stranger_on_the_port_of_a_served_profile_is_refused_naming_it(
        recorded: tuple[subprocess.Popen[str], dict[str, str], Path, int]) -> None:
    """Our recorded child is alive but the port is held by another process: the key is never sent."""
    child, environ, profile, port = recorded
    child.kill()
    child.wait()
    stranger = subprocess.Popen([sys.executable, "-c", LISTEN, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert stranger.stdout is not None and stranger.stdout.readline().strip() == "up"
        # The record now names a live process of ours again, one that does not hold the port.
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        state = Path(environ["VLLM_LAUNCH_STATE_DIR"]) / "p" / "state.json"
        state.write_text(json.dumps({"phase": "serving", "child": {
            "pid": sleeper.pid, "boot_id": boot_id(),
            "known": {str(sleeper.pid): start_time(psutil.Process(sleeper.pid))}}}))
        try:
            with pytest.raises(ServerError) as found:
                resolve_target(str(profile), environ)
        finally:
            sleeper.kill()
            sleeper.wait()
        assert found.value.outcome is Outcome.CONFIG
        assert f"held by PID {stranger.pid} (" in str(found.value) and "nothing was sent" in str(found.value)
    finally:
        stranger.kill()
        stranger.wait()
