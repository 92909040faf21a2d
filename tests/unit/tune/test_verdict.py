"""Which candidate wins: the most users at the SLO, by more than the rounds disagree, else the baseline stays."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launcher.config.load import load
from launcher.errors import UsageError
from launcher.tune import report
from launcher.tune.cache import Level
from launcher.tune.candidates import Candidate
from launcher.tune.measure import Measured
from launcher.tune.search import Answer
from launcher.tune.write import tuned_text, write_profile


def scored(overrides: tuple[tuple[str, str], ...], rounds: dict[int, tuple[int, float]], status: str = "measured"
           ) -> report.Scored:
    """A candidate whose round r found rounds[r] = (users, output tok/s at the common answer)."""
    users = min(u for u, _ in rounds.values())
    answer = Answer(users, tuple(u for u, _ in rounds.values()), False, ())
    levels = {(r, users): Level(r, users, True, {"output_tokens_per_s": tps}) for r, (_, tps) in rounds.items()}
    return report.score(Measured(Candidate(overrides), status, answer=answer), levels)


BASE = ()
SEQS = (("max-num-seqs", "64"),)


def test_more_users_than_the_spread_wins() -> None:
    verdict = report.decide([scored(BASE, {0: (10, 100.0), 1: (11, 100.0)}), scored(SEQS, {0: (16, 150.0), 1: (17, 150.0)})])
    assert verdict.kind == "winner" and verdict.best is not None and verdict.best.measured.candidate.overrides == SEQS
    assert verdict.gains() == {"users": 1.6, "output_tokens_per_s": 1.5}


def test_a_gain_within_the_spread_between_rounds_leaves_the_profile_as_written() -> None:
    verdict = report.decide([scored(BASE, {0: (10, 100.0), 1: (14, 104.0)}), scored(SEQS, {0: (12, 101.0), 1: (13, 102.0)})])
    assert verdict.kind == "baseline_is_best"
    assert "already as good as any candidate tried" in verdict.summary


def test_the_same_users_and_more_tokens_beyond_their_spread_wins() -> None:
    verdict = report.decide([scored(BASE, {0: (8, 100.0), 1: (8, 102.0)}), scored(SEQS, {0: (8, 130.0), 1: (8, 128.0)})])
    assert verdict.kind == "winner"


def test_the_baseline_best_of_all_is_said() -> None:
    verdict = report.decide([scored(BASE, {0: (20, 100.0)}), scored(SEQS, {0: (10, 80.0)})])
    assert verdict.kind == "baseline_is_best" and verdict.best is verdict.baseline


def test_nothing_meets_the_slo() -> None:
    empty = report.score(Measured(Candidate(), "measured", answer=Answer(0, (0,), False, ())), {})
    assert report.decide([empty]).kind == "no_candidate_meets_slo"


def test_a_candidate_that_died_serves_nobody_whatever_it_measured_before() -> None:
    verdict = report.decide([scored(BASE, {0: (4, 50.0)}), scored(SEQS, {0: (40, 500.0)}, status="died")])
    assert verdict.kind == "baseline_is_best"


PROFILE = """# my profile
model: Qwen/Qwen3-8B
vllm:
  max_num_seqs: 32
  max-model-len: 32768
api_key: {env: VLLM_API_KEY}
"""


def test_the_written_profile_carries_the_flags_and_the_evidence(tmp_path: Path) -> None:
    original = tmp_path / "qwen3.yaml"
    original.write_text(PROFILE)
    out = write_profile(str(tmp_path / "qwen3-tuned.yaml"), str(original),
                        ("vllm.max-num-seqs=64", "vllm.max-num-batched-tokens=8192"), ["SLO ttft_p95 <= 2000 ms"])
    text = out.read_text()
    assert text.startswith("# Tuned by vllm-launch tune on ") and "# SLO ttft_p95 <= 2000 ms" in text
    vllm = yaml.safe_load(text)["vllm"]
    assert vllm == {"max-model-len": 32768, "max-num-seqs": 64, "max-num-batched-tokens": 8192}, \
        "the profile's own spelling of a flag is replaced, not kept beside the new value"
    assert load(out).vllm["max-num-seqs"] == 64
    assert original.read_text() == PROFILE


def test_an_existing_file_is_never_written_over(tmp_path: Path) -> None:
    original = tmp_path / "p.yaml"
    original.write_text(PROFILE)
    taken = tmp_path / "taken.yaml"
    taken.write_text("mine")
    with pytest.raises(UsageError, match="exists"):
        write_profile(str(taken), str(original), ("vllm.max-num-seqs=64",), [])
    assert taken.read_text() == "mine"


def test_a_tuned_profile_that_would_not_load_is_not_written(tmp_path: Path) -> None:
    original = tmp_path / "p.yaml"
    original.write_text(PROFILE)
    with pytest.raises(UsageError, match="would not load"):
        write_profile(str(tmp_path / "bad.yaml"), str(original), ("vllm.max-num-seqs=not-a-number",), [])
    assert not (tmp_path / "bad.yaml").exists() and not list(tmp_path.glob(".bad.yaml*"))


def test_the_tuned_text_keeps_every_other_key() -> None:
    text = tuned_text(PROFILE, "p.yaml", ("vllm.max-num-seqs=64",), [])
    assert yaml.safe_load(text)["api_key"] == {"env": "VLLM_API_KEY"}


def test_the_pareto_front_keeps_what_nothing_beats_on_both_axes() -> None:
    points = [(50.0, 100.0), (40.0, 160.0), (45.0, 150.0), (30.0, 150.0), (20.0, 200.0), (50.0, 90.0), (40.0, 160.0)]
    assert report.pareto_front(points) == [(20.0, 200.0), (40.0, 160.0), (45.0, 150.0), (50.0, 100.0)]


def test_a_plain_secret_in_env_is_never_copied_into_the_tuned_profile(tmp_path: Path) -> None:
    """tune --write copies the original profile: an AWS key or a proxy password written in its env: would be
    copied with it, so the copy is refused, naming the key and not the value."""
    for extra, key in (("env: {AWS_SECRET_ACCESS_KEY: wJalrXUtnFEMI}\n", "env.AWS_SECRET_ACCESS_KEY"),
                       ("env: {HTTPS_PROXY: 'http://bob:hunter42@proxy:3128'}\n", "env.HTTPS_PROXY")):
        original = tmp_path / "p.yaml"
        original.write_text(PROFILE + extra)
        with pytest.raises(UsageError) as caught:
            write_profile(str(tmp_path / "tuned.yaml"), str(original), ("vllm.max-num-seqs=64",), [])
        assert key in str(caught.value) and "wJalrXUtnFEMI" not in str(caught.value)
        assert "hunter42" not in str(caught.value) and not (tmp_path / "tuned.yaml").exists()
