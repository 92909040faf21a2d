"""How one level is measured: the requests that fill the percentile, and a seed per level that every candidate
shares."""

from __future__ import annotations

from dataclasses import replace

import pytest

from launcher.bench import agent_tools
from launcher.bench.command import Target
from launcher.bench.workload import Settings
from launcher.config.load import loads
from launcher.tune import slo
from launcher.tune.command import Request, workload_key_of, workload_settings
from launcher.tune.measure import MeasureSetup, level_settings, warmup_settings

PROFILE = loads("model: m\nvllm:\n  host: 127.0.0.1\n")


def plan(text: str, workload: str = "agent") -> MeasureSetup:
    return MeasureSetup(spec="p.yaml", profile=PROFILE, target=Target("p", "http://127.0.0.1:8000", None, None, None),
                slo=slo.parse(text), workload=workload_settings(workload, Settings(warmup=1, seed=7)), rounds=2,
                most_users=64, deadline=None, environ={})


def test_a_level_sends_enough_requests_for_the_percentile_spread_over_its_users() -> None:
    p95 = plan("ttft_p95<=2s")
    for users in (1, 3, 7, 40, 64):
        s = level_settings(p95, 0, users)
        assert s.users == users and s.users * s.turns >= 40 and s.duration_s is None
        assert s.turns == 1 or s.users * (s.turns - 1) < 40, "no more turns than needed"


def test_every_level_has_its_own_seed_and_candidates_share_them() -> None:
    p = plan("ttft_p50<=1s")
    seeds = {(r, u): level_settings(p, r, u).seed for r in (0, 1) for u in (1, 2, 4, 8)}
    assert len(set(seeds.values())) == len(seeds), "no level replays another's prompts into the prefix cache"
    assert seeds == {(r, u): level_settings(plan("ttft_p50<=1s"), r, u).seed for r, u in seeds}


def test_a_fresh_server_is_warmed_by_a_run_no_level_shares_a_seed_with() -> None:
    p = plan("ttft_p50<=1s")
    warm = warmup_settings(p)
    assert warm.users > 1 and warm.turns >= 1 and warm.warmup == 0
    assert warm.seed not in {level_settings(p, r, u).seed for r in range(10) for u in range(1, 257)}
    assert all(level_settings(p, 0, u).warmup == 0 for u in (1, 2, 8)), "levels are all measured warm"


def test_the_workloads() -> None:
    agent, random = plan("ttft_p50<=1s").workload, plan("ttft_p50<=1s", "random").workload
    assert agent.shared_prefix == 512 and agent.conversation_turns is None and agent.ignore_eos
    assert random.shared_prefix == 0 and random.conversation_turns == 1 and random.ignore_eos


def test_the_agent_workload_sends_the_tools_and_a_cached_level_depends_on_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    agent, random = plan("ttft_p50<=1s").workload, plan("ttft_p50<=1s", "random").workload
    assert (agent.tools, random.tools) == ("agent", "none"), "random shares nothing, tools included"
    request = Request(profile="p.yaml", slo=slo.parse("ttft_p50<=1s"))
    key = workload_key_of(request, agent)
    assert key["tools"] == "agent" and key["tool_set"] == agent_tools.DIGEST
    assert workload_key_of(request, replace(agent, tools="none"))["tool_set"] is None
    monkeypatch.setattr(agent_tools, "DIGEST", "another-set")
    assert workload_key_of(request, agent) != key, "a level measured with another tool set is not reused"
