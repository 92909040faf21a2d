"""Resuming: a candidate whose levels are all cached is answered from the cache without starting a server, and
one with some levels cached measures only the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.bench.command import Target
from launcher.bench.workload import Settings
from launcher.config.load import loads
from launcher.tune import measure, slo
from launcher.tune.cache import Level, Record, Store
from launcher.tune.candidates import Candidate
from launcher.tune.measure import CandidateRun, Plan

PLAN = Plan(spec="p.yaml", profile=loads("model: m\nvllm:\n  host: 127.0.0.1\n"),
            target=Target("p", "http://127.0.0.1:9", None, None, None), slo=slo.parse("ttft_p95<=1s"),
            workload=Settings(), rounds=1, most_users=8, deadline=None, environ={})
LIMIT = 5  # the synthetic server meets the SLO up to 5 users


def level(users: int) -> Level:
    return Level(0, users, users <= LIMIT, {"output_tokens_per_s": 10.0 * users})


class NoServer:
    def __init__(self, *_: object, **__: object) -> None:
        raise AssertionError("a server was started although every level was cached")


def test_everything_cached_starts_no_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure, "supervised", NoServer)
    record = Record("k" * 64, {(0, n): level(n) for n in (1, 2, 4, 8, 6, 5)})
    done = CandidateRun(PLAN, Candidate(), record, Store(tmp_path), on_level=lambda _: None).run()
    assert done.status == "measured" and done.answer is not None and done.answer.users == LIMIT
    assert (done.levels_measured, done.levels_reused) == (0, 6)


def test_a_partly_cached_candidate_measures_only_what_is_missing(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[int] = []
    started: list[int] = []

    class Server:
        ready = None

        def __init__(self, *_: object, **__: object) -> None:
            started.append(1)

        def __enter__(self) -> Server:
            return self

        def __exit__(self, *_: object) -> None:
            pass

        def lost(self) -> None:
            return None

    def fake_measure(self: CandidateRun, round_: int, users: int) -> Level:
        measured.append(users)
        return level(users)

    monkeypatch.setattr(measure, "supervised", Server)
    monkeypatch.setattr(CandidateRun, "start", lambda self: setattr(self, "server", Server()))
    monkeypatch.setattr(CandidateRun, "measure", fake_measure)
    store = Store(tmp_path)
    record = Record("k" * 64, {(0, n): level(n) for n in (1, 2, 4)})  # an earlier run stopped after 4 users
    done = CandidateRun(PLAN, Candidate(), record, store, on_level=lambda _: None).run()
    assert measured == [8, 6, 5] and len(started) == 1
    assert done.answer is not None and done.answer.users == LIMIT
    assert set(store.load("k" * 64).levels) == {(0, n) for n in (1, 2, 4, 8, 6, 5)}, "saved level by level"


def test_the_budget_ending_stops_before_the_next_missing_level(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure, "supervised", NoServer)
    expired = Plan(**{**{f: getattr(PLAN, f) for f in PLAN.__slots__}, "deadline": 0.0})  # type: ignore[arg-type]
    record = Record("k" * 64, {(0, 1): level(1)})
    done = CandidateRun(expired, Candidate(), record, Store(tmp_path), on_level=lambda _: None).run()
    assert done.status == "budget" and done.levels_reused == 1 and done.levels_measured == 0
