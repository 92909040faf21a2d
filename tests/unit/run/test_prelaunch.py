"""Before the first launch: a Ray cluster that must be all there (backend: ray), the port, our leftovers."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from structlog.testing import capture_logs

from launcher.config.load import loads
from launcher.errors import ConfigError, PreflightError
from launcher.plan import facts
from launcher.plan.hostfacts import HostFacts
from launcher.run import prelaunch, processes
from launcher.run.state import StateStore
from launcher.vllm.versions import semantics

STATUS = """======== Autoscaler status: 2026-12-01 10:00:00 ========
Node status
---------------------------------------------------------------
Active:
 1 node_3f2e
 1 node_9a1c
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Usage:
 0.0/64.0 CPU
 0.0/8.0 GPU
 0B/400.00GiB memory
"""
RAY = """\
model: m
vllm: {host: 127.0.0.1, tensor-parallel-size: 4, pipeline-parallel-size: 2}
nodes: {count: 2, master_addr: 10.0.0.1, backend: ray}
"""


def runner(stdout: str = STATUS, code: int = 0, missing: bool = False) -> Any:
    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if missing:
            raise FileNotFoundError(2, "No such file or directory", "ray")
        return subprocess.CompletedProcess(argv, code, stdout, "ray: no cluster" if code else "")
    return run


def test_ray_status_is_read_for_nodes_and_gpus() -> None:
    assert (2, 8.0) == prelaunch.ray_cluster(STATUS)
    assert (0, 0.0) == prelaunch.ray_cluster("")


def test_a_complete_ray_cluster_passes() -> None:
    prelaunch.check_ray(loads(RAY), runner())


@pytest.mark.parametrize(("run", "error", "words"), [
    (runner(STATUS.replace(" 1 node_9a1c\n", "")), PreflightError, "has 1 node(s) and 8 GPU(s)"),
    (runner(STATUS.replace("0.0/8.0 GPU", "0.0/4.0 GPU")), PreflightError, "needs 2 nodes and 8 GPUs"),
    (runner(code=1), PreflightError, "`ray status` failed"),
    (runner(missing=True), ConfigError, "`ray` is not installed"),
])
def test_a_ray_cluster_that_is_not_all_there_says_what_is_missing(run: Any, error: type[Exception],
                                                                   words: str) -> None:
    with pytest.raises(error) as found:
        prelaunch.check_ray(loads(RAY), run)
    assert words in str(found.value)


def test_an_earlier_runs_live_processes_are_stopped() -> None:
    """A process recorded by an earlier run (same boot, PID and start time) is ours: it is stopped."""
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = processes.start_time(psutil.Process(leftover.pid))
        previous = {"child": {"boot_id": processes.boot_id(), "known": {str(leftover.pid): started}}}
        prelaunch.stop_recorded_leftovers(previous)
        assert leftover.wait(timeout=10) is not None
    finally:
        leftover.kill()
        leftover.wait()


def up_session(tmp_path: Path, text: str) -> Any:
    """What prelaunch.preflight reads of a session: the profile, the run's config, the installed vLLM, the store."""
    return SimpleNamespace(profile=loads(text), environ={"PATH": "", "HF_HOME": str(tmp_path / "hf")},
                           config=SimpleNamespace(inventory_path=None, placement=None),
                           vllm=SimpleNamespace(vllm_bin="vllm", catalog=None, semantics=semantics("0.33.0")),
                           store=StateStore(tmp_path), gpu_baseline=None)


def test_up_without_a_gpu_refuses_with_the_one_no_gpu_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither NVML nor nvidia-smi: `up` refuses in the words plan and preflight use (facts.NO_GPU); the model
    that cannot be found is logged as the reason there is no estimate, not swallowed."""
    monkeypatch.setattr(facts, "detect", lambda environ: None)
    monkeypatch.setattr(prelaunch, "host_facts", lambda profile, environ: HostFacts.none())  # no leftovers to stop
    with capture_logs() as logs, pytest.raises(PreflightError) as refused:
        prelaunch.preflight(up_session(tmp_path, "model: nobody/nothing\nvllm: {host: 127.0.0.1}\n"))
    assert f"no_driver: {facts.NO_GPU} → " in str(refused.value)
    reasons = [e["reason"] for e in logs if e["event"] == "preflight.no_estimate"]
    assert 1 == len(reasons) and "no config.json for nobody/nothing" in reasons[0]


def test_up_on_the_cpu_backend_probes_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_probe(environ: object) -> None:
        raise AssertionError("probed the GPUs of a CPU-backend profile")
    monkeypatch.setattr(facts, "detect", no_probe)
    monkeypatch.setattr(prelaunch, "host_facts", lambda profile, environ: HostFacts.none())
    session = up_session(tmp_path, "model: nobody/nothing\nvllm: {host: 127.0.0.1}\nlauncher: {device: cpu}\n")
    overrides, gpu = prelaunch.preflight(session)
    assert ({}, ("cpu", 1, None)) == (overrides, tuple(gpu))
    assert session.store.data["fp8_kv"] is None, "no compute capability to judge FP8 KV by on the CPU backend"


# A `vllm serve` stand-in started in its own session: it starts an "engine" in that session and prints both PIDs.
LEADER = ("import subprocess, sys, time\n"
          "engine = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
          "print(engine.pid, flush=True)\n"
          "time.sleep(60)\n")


@pytest.mark.parametrize(("leader_gone", "recorded_shift", "ours"), [
    (True, 0.0, True),  # the engine outlived the leader we started: ours
    (True, 5.0, False),  # the engine started before the recorded leader did: not its
    (False, -5.0, False),  # a live leader that started at another time: the id was reused, the session is not ours
])
def test_an_orphan_in_the_session_of_our_earlier_vllm_is_stopped(leader_gone: bool, recorded_shift: float,
                                                                 ours: bool) -> None:
    """The leader of the session we started is gone and its engine was never on record: the session id (kept across
    re-parenting) and the leader's start time in state prove it ours. A record that does not fit proves nothing."""
    leader = subprocess.Popen([sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert leader.stdout is not None
    engine = psutil.Process(int(leader.stdout.readline()))
    try:
        started = processes.start_time(psutil.Process(leader.pid))
        if leader_gone:
            leader.kill()
            leader.wait()
        previous = {"child": {"boot_id": processes.boot_id(), "pid": leader.pid, "pgid": leader.pid,
                              "start_time": started + recorded_shift, "known": {}}}
        with capture_logs() as logs:
            prelaunch.stop_recorded_leftovers(previous)
        stopped = [e["pids"] for e in logs if e["event"] == "preflight.leftovers"]
        if ours:
            engine.wait(timeout=10)
            assert [[str(engine.pid)]] == stopped
        else:
            assert engine.is_running() and [] == stopped
    finally:
        with contextlib.suppress(psutil.Error):
            engine.kill()
        leader.kill()
        leader.wait()
