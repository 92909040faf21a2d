"""Resuming: a candidate whose levels are all cached is answered from the cache without starting a server, and
one with some levels cached measures only the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.bench.client import ServerError
from launcher.bench.command import Target
from launcher.bench.workload import Settings
from launcher.config.load import loads
from launcher.errors import Outcome
from launcher.tune import measure, slo
from launcher.tune.cache import Level, Record, Store
from launcher.tune.candidates import Candidate
from launcher.tune.measure import CandidateRun, MeasureSetup

SETUP = MeasureSetup(spec="p.yaml", profile=loads("model: m\nvllm:\n  host: 127.0.0.1\n"),
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
    done = CandidateRun(SETUP, Candidate(), record, Store(tmp_path), on_level=lambda _: None).run()
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
    done = CandidateRun(SETUP, Candidate(), record, store, on_level=lambda _: None).run()
    assert measured == [8, 6, 5] and len(started) == 1
    assert done.answer is not None and done.answer.users == LIMIT
    assert set(store.load("k" * 64).levels) == {(0, n) for n in (1, 2, 4, 8, 6, 5)}, "saved level by level"


def test_the_budget_ending_stops_before_the_next_missing_level(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure, "supervised", NoServer)
    expired = MeasureSetup(**{**{f: getattr(SETUP, f) for f in SETUP.__slots__}, "deadline": 0.0})  # type: ignore[arg-type]
    record = Record("k" * 64, {(0, 1): level(1)})
    done = CandidateRun(expired, Candidate(), record, Store(tmp_path), on_level=lambda _: None).run()
    assert done.status == "budget" and done.levels_reused == 1 and done.levels_measured == 0


def failing_start(outcome: Outcome, settled: bool = False) -> type:
    class Refused:
        ready = None

        def __init__(self, *_: object, **__: object) -> None:
            pass

        def __enter__(self) -> None:
            raise ServerError("vllm-launch up p.yaml exited 75 before serving: port 8000 is held", outcome,
                              settled=settled)

        def __exit__(self, *_: object) -> None:
            pass

    return Refused


@pytest.mark.parametrize(("outcome", "settled", "cached"), [
    (Outcome.TEMPFAIL, False, False),  # a port or lock held, memory returned late: the next run tries again
    (Outcome.TEMPFAIL, True, True),  # the ladder tried every rung the profile allows: decided by the flags
    (Outcome.CONFIG, False, True),  # exit 78: the profile and flags can never start
])
def test_only_a_failure_to_start_that_the_flags_decide_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  outcome: Outcome, settled: bool, cached: bool) -> None:
    monkeypatch.setattr(measure, "supervised", failing_start(outcome, settled))
    store = Store(tmp_path)
    candidate = Candidate((("max-num-seqs", "64"),))
    done = CandidateRun(SETUP, candidate, Record("k" * 64), store, on_level=lambda _: None).run()
    assert "port 8000 is held" in (done.reason or "")
    assert done.status == ("infeasible" if cached else "transient")
    assert store.load("k" * 64).verdict == ("infeasible" if cached else None)


def test_supervised_says_whether_the_ladder_decided_a_75(tmp_path: Path) -> None:
    """`up` exits 75 both for an exhausted ladder and for a port held: its state says which."""
    import sys

    from launcher.bench.command import supervised

    for exhausted in (True, False):
        server = supervised("p.yaml", loads("model: m\nvllm:\n  host: 127.0.0.1\n", name="p"), (),
                            {"VLLM_LAUNCH_STATE_DIR": str(tmp_path)}, ready_timeout_s=60)
        state = {"pid": 0, "phase": "failed", "error": "no rung left", "ladder_exhausted": exhausted}
        write = (f"import json, os, sys; state = {state!r}; state['pid'] = os.getpid(); "
                 f"os.makedirs({str(tmp_path / 'p')!r}, exist_ok=True); "
                 f"open({str(tmp_path / 'p' / 'state.json')!r}, 'w').write(json.dumps(state)); sys.exit(75)")
        server.argv = [sys.executable, "-c", write]
        with pytest.raises(ServerError) as caught:
            server.__enter__()
        assert (caught.value.outcome, caught.value.settled) == (Outcome.TEMPFAIL, exhausted)
