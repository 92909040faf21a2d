"""`nodes:`: one profile across nodes; each rank's argv, and every bad input as one line naming the key."""

from __future__ import annotations

import pytest

from launcher.config import nodes
from launcher.config.load import loads
from launcher.errors import ConfigError, ProfileError
from launcher.vllm import command
from tests.helpers.profiles import TWO_NODES as TWO


def where(text: str = TWO, rank: int | None = None, environ: dict[str, str] | None = None) -> nodes.Placement:
    profile = loads(text)
    assert profile.nodes is not None
    return nodes.placement(profile.nodes, profile.source, rank, environ or {})


def test_the_head_serves_the_api_and_the_worker_runs_headless() -> None:
    profile = loads(TWO)
    assert profile.gpus_needed == 4, "TP 4 × PP 2 over 2 nodes: 4 GPUs on each"
    head = command.build_plan(profile, placement=where(rank=0))
    assert head.argv[-8:] == ("--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port",
                              "29600")
    assert "--port" in head.argv and "--tool-call-parser" in head.argv
    worker = command.build_plan(profile, placement=where(rank=1))
    assert worker.argv[-9:] == ("--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port",
                                "29600", "--headless")
    assert not {"--port", "--host", "--tool-call-parser", "--enable-auto-tool-choice"} & set(worker.argv)
    assert worker.base_url == "http://10.0.0.1:8000", "a worker is judged by its head's /health"


def test_the_rank_and_the_head_come_from_the_environment() -> None:
    assert where(rank=None, environ={"VLLM_LAUNCH_NODE_RANK": "1"}).rank == 1
    lws = TWO.replace("master_addr: 10.0.0.1", "master_addr: {env: LWS_LEADER_ADDRESS}")
    found = where(lws, environ={"LWS_WORKER_INDEX": "1", "LWS_LEADER_ADDRESS": "vllm-0.vllm"})
    assert (found.rank, found.master_addr, found.head) == (1, "vllm-0.vllm", False)
    assert where(rank=1, environ={"VLLM_LAUNCH_NODE_RANK": "0"}).rank == 1, "--node-rank wins"


def test_ray_runs_the_ray_executor_on_the_head() -> None:
    profile = loads(TWO.replace("master_port: 29600}", "master_port: 29600, backend: ray}"))
    assert profile.nodes is not None
    plan = command.build_plan(profile, placement=nodes.placement(profile.nodes, "p", 0, {}))
    assert plan.argv[-2:] == ("--distributed-executor-backend", "ray") and "--nnodes" not in plan.argv


@pytest.mark.parametrize(("text", "key", "words"), [
    (TWO.replace("count: 2", "count: 1"), "nodes.count", "expected 2 or more nodes"),
    (TWO.replace("master_port: 29600", "master_port: 29600, backend: slurm"), "nodes.backend", "mp or ray"),
    (TWO.replace("master_port: 29600", "master_port: 70000"), "nodes.master_port", "port number"),
    (TWO.replace("nodes: {", "nodes: {color: red, "), "nodes.color", "unknown key"),
    (TWO.replace("pipeline-parallel-size: 2", "pipeline-parallel-size: 1").replace("count: 2", "count: 3"),
     "nodes.count", "do not share out over 3 nodes"),
    (TWO.replace("pipeline-parallel-size: 2", "pipeline-parallel-size: 2, data-parallel-size: 2"), "nodes",
     "data parallel across nodes"),
])
def test_a_bad_nodes_section_is_one_line_naming_the_key(text: str, key: str, words: str) -> None:
    with pytest.raises(ProfileError) as error:
        loads(text)
    assert error.value.key == key and words in str(error.value) and error.value.exit_code == 78


@pytest.mark.parametrize(("rank", "environ", "words"), [
    (2, {}, "node rank 2 is outside 0..1"),
    (None, {}, "pass --node-rank N"),
    (None, {"VLLM_LAUNCH_NODE_RANK": "one"}, "is not a node rank"),
])
def test_a_rank_that_cannot_be_is_78(rank: int | None, environ: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError) as error:
        where(rank=rank, environ=environ)
    assert words in str(error.value) and error.value.exit_code == 78


def test_a_missing_head_address_names_the_key() -> None:
    with pytest.raises(ProfileError) as error:
        where(TWO.replace("master_addr: 10.0.0.1, ", ""), rank=0)
    assert error.value.key == "nodes.master_addr" and "LWS_LEADER_ADDRESS" in str(error.value)
