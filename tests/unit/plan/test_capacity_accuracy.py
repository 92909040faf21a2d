"""The capacity estimate against real start-ups, out of sample: arithmetic over data, so it belongs in pytest."""

from __future__ import annotations

import collections
import math

from launcher.plan import capacity
from tests.kv_observations import cases, fit, leave_one_source_out, observations, percentile, source_of, summary

CASES = cases()
LOSO = leave_one_source_out(CASES)


def test_enough_real_start_ups_from_enough_sources() -> None:
    assert len(observations()) >= 40
    assert len({source_of(c) for c in CASES}) >= 20
    assert {"v0", "v1", "v1-multi-gpu"} == {c.regime for c in CASES}


def test_leave_one_source_out_error() -> None:
    """Each source's start-ups predicted with terms fitted without that source."""
    median, worst = summary(LOSO.values())
    assert median <= 0.05, f"median {median:.1%}"
    assert worst <= 0.20, f"worst {worst:.1%}: " + ", ".join(f"{k} {v:.0%}" for k, v in LOSO.items() if v > 0.2)


def test_the_shipped_terms_are_the_fit_on_all_start_ups() -> None:
    """capacity.RESERVE is what `benchmarks/kv_estimator.py --fit` gives: no hand-tuned constant."""
    assert fit(CASES) == capacity.RESERVE


def test_each_fitted_term_is_decided_by_three_sources() -> None:
    """A term keeps a value only where start-ups from at least three sources exercise it."""
    exercised = {
        "non_torch_base": [c for c in CASES if c.regime != "v0"],
        "non_torch_base_v0": [c for c in CASES if c.regime == "v0"],
        "per_peer_fabric": [c for c in CASES if c.peers and c.fabric],
        "cudagraph_per_layer": [c for c in CASES if c.graph_layers],
        "fp8_moe_workspace": [c for c in CASES if c.fp8_moe],
    }
    for term, group in exercised.items():
        assert len({source_of(c) for c in group}) >= 3, term
    assert 0 == capacity.RESERVE.per_peer_pcie  # not a term: the fit over PCIe start-ups finds no cost


def test_the_printed_range_covers_the_measured_error() -> None:
    """plan's "±N %" is at least the 80th percentile of the out-of-sample error of its regime."""
    by_regime: dict[str, list[float]] = collections.defaultdict(list)
    for case in CASES:
        by_regime[case.regime].append(LOSO[case.ident])
    for regime, errors in by_regime.items():
        measured = percentile(errors, 0.8)
        assert capacity.ERROR_RANGE[regime] >= measured, regime
        assert capacity.ERROR_RANGE[regime] == math.ceil(measured * 100) / 100, regime  # rounded up, not padded
