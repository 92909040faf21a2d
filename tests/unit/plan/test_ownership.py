"""Which local vLLM processes are ours: only with proof (our own tree, our systemd unit's cgroup). An engine that
merely looks orphaned (a notebook's LLM(), `vllm bench throughput`, a Ray replica, whoever adopted it) is listed
as a stranger's and never stopped."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from launcher.plan.hostfacts import HostFacts
from launcher.plan.ownership import IN_OUR_TREE, IN_OUR_UNIT, cgroup_of, local_vllm, unit_cgroup
from launcher.plan.preflight import evaluate
from tests.helpers.preflight import V32, inventory, problem
from tests.helpers.profiles import guide_profile as profile

OWN_PID = 42


class FakeProc:
    def __init__(self, pid: int, name: str, ppid: int, uid: int = 1000, status: str = "sleeping",
                 cmdline: list[str] | None = None) -> None:
        self.info = {"pid": pid, "name": name, "ppid": ppid, "uids": SimpleNamespace(real=uid), "status": status,
                     "cmdline": [name] if cmdline is None else cmdline}


PROCESSES = [
    FakeProc(1, "tini", 0, uid=0),
    FakeProc(OWN_PID, "vllm-launch", 1),
    FakeProc(100, "bash", 1),
    FakeProc(200, "VLLM::EngineCore", 1),  # looks orphaned: its API server is gone, or it never had one
    FakeProc(201, "VLLM::Worker_TP0", 200),  # a worker of that engine
    FakeProc(300, "vllm", 100, cmdline=["/venv/bin/python3", "/venv/bin/vllm", "serve", "Qwen/Qwen3-8B"]),  # serving
    FakeProc(301, "VLLM::EngineCore", 300),  # its engine: a running server, not a word about it
    FakeProc(400, "VLLM::EngineCore", 1, uid=1001),  # another user's
    FakeProc(500, "VLLM::EngineCore", 4711),  # parent gone without re-parenting seen
    FakeProc(600, "VLLM::EngineCore", 1, status="zombie"),
    FakeProc(700, "python3", 100, cmdline=["python3", "notebook.py"]),  # a notebook's offline LLM() ...
    FakeProc(701, "VLLM::EngineCore", 700),  # ... and its engine
    FakeProc(800, "VLLM::EngineCore", OWN_PID),  # adopted by us as subreaper (an earlier run of this `up`)
    FakeProc(801, "VLLM::Worker_TP0", 800),
    FakeProc(900, "systemd", 1, cmdline=["/usr/lib/systemd/systemd", "--user"]),
    FakeProc(901, "VLLM::EngineCore", 900),  # adopted by `systemd --user`: anybody's
    FakeProc(920, "python3", 1, cmdline=["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server"]),
    FakeProc(921, "VLLM::EngineCore", 920),  # the engine of a server started as a module
    FakeProc(922, "VLLM::APIServer_0", 920),
    FakeProc(923, "VLLM::EngineCore", 922),
    FakeProc(950, "VLLM::Engine\x1b[2J\ncore", 1),  # a title is the process's own text
]


def split(cgroups: dict[int, str] | None = None) -> tuple[list[tuple[int, str]], list[int]]:
    found = local_vllm(process_iter=lambda attrs: PROCESSES, uid=1000, own_pid=OWN_PID,
                       cgroup=(cgroups or {}).get)
    return [(p.pid, p.why) for p in found.ours], [p.pid for p in found.strangers]


class TestOnlyProofMakesOurs:
    def test_an_engine_whose_parent_is_not_vllm_is_a_strangers(self) -> None:
        """Orphan-looking engines (init's, `systemd --user`'s, a notebook's) are strangers; our own tree is ours."""
        ours, strangers = split()
        assert [(800, IN_OUR_TREE), (801, IN_OUR_TREE)] == ours
        assert [200, 201, 500, 701, 901, 950] == strangers

    def test_our_systemd_units_cgroup_is_proof(self) -> None:
        """Under systemd the unit's own cgroup holds only the unit's processes: an engine in it is ours."""
        unit = "/system.slice/system-vllm\\x2dlaunch.slice/vllm-launch@qwen3.service"
        ours, strangers = split({OWN_PID: unit, 200: unit, 201: unit, 701: "/user.slice/user-1000.slice/session-3.scope"})
        assert [(200, IN_OUR_UNIT), (201, IN_OUR_UNIT), (800, IN_OUR_TREE), (801, IN_OUR_TREE)] == ours
        assert [500, 701, 901, 950] == strangers

    @pytest.mark.parametrize("shared", ["/", "/user.slice/user-1000.slice/session-3.scope",
                                        "/user.slice/user-1000.slice/user@1000.service", ""])
    def test_a_cgroup_anybody_shares_proves_nothing(self, shared: str) -> None:
        """A container's root, a login session or the user manager hold anybody's processes."""
        assert unit_cgroup(shared) is None
        ours, _ = split({OWN_PID: shared, 200: shared, 701: shared})
        assert [800, 801] == [pid for pid, _ in ours]

    def test_a_strangers_title_is_sanitised(self) -> None:
        found = local_vllm(process_iter=lambda attrs: PROCESSES, uid=1000, own_pid=OWN_PID, cgroup=lambda pid: None)
        assert "VLLM::Engine core" == next(p.name for p in found.strangers if p.pid == 950)

    def test_our_own_cgroup_is_read(self) -> None:
        assert (cgroup_of(os.getpid()) or "").startswith("/")
        assert cgroup_of(1 << 30) is None  # no such process


def test_preflight_lists_strangers_and_says_they_are_left_alone() -> None:
    """The warning names each (PID, sanitised title, why) and never says it will be stopped."""
    found = local_vllm(process_iter=lambda attrs: PROCESSES, uid=1000, own_pid=OWN_PID, cgroup=lambda pid: None)
    result = evaluate(profile(), inventory("l40s.yaml"), host=HostFacts(strangers=found.strangers), version=V32)
    listed = problem(result, "vllm_processes_not_ours")
    assert "warning" == listed.severity
    assert "pid 701 VLLM::EngineCore: parent PID 700, not a vLLM server and not ours" in listed.message
    assert listed.message.endswith("are left alone") and "stopped" not in listed.message
