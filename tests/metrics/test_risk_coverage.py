"""Risk-coverage curves and AURC against brute force over tie orders, ProbVLM's S and R² against scipy,
and the top-1 margin."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.stats
import torch

from pcmr.metrics.risk_coverage import risk_coverage, top1_margin, uncertainty_recall_agreement


def _brute_force_curve(risk: np.ndarray, uncertainty: np.ndarray) -> np.ndarray:
    """The mean over every order of the queries consistent with ``uncertainty`` (ties in any order)
    of the running mean risk of the answered queries."""
    curves = []
    for perm in itertools.permutations(range(risk.size)):
        keys = uncertainty[list(perm)]
        if np.all(np.diff(keys) >= 0):  # an order that answers less uncertain queries first
            answered = risk[list(perm)]
            curves.append(np.cumsum(answered) / np.arange(1, risk.size + 1))
    return np.mean(curves, axis=0)


@pytest.mark.parametrize("seed", range(8))
def test_curve_is_the_expectation_over_tie_orders(seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 7))
    risk = rng.integers(0, 3, size) / 2.0
    uncertainty = rng.integers(0, 3, size).astype(np.float64)  # many ties
    result = risk_coverage(torch.tensor(risk), torch.tensor(uncertainty))
    np.testing.assert_allclose(result.risk, _brute_force_curve(risk, uncertainty), rtol=0, atol=1e-12)
    assert result.aurc == pytest.approx(result.risk.mean())
    assert result.random == pytest.approx(risk.mean())
    assert result.oracle <= result.aurc + 1e-12
    np.testing.assert_allclose(result.coverage, np.arange(1, size + 1) / size)


def test_constant_uncertainty_is_the_random_order() -> None:
    risk = np.array([1.0, 0.0, 0.5, 0.25, 1.0])
    result = risk_coverage(risk, np.zeros(5))
    np.testing.assert_allclose(result.risk, np.full(5, risk.mean()))
    assert result.aurc == pytest.approx(result.random)


def test_perfect_uncertainty_reaches_the_oracle() -> None:
    risk = np.array([0.9, 0.1, 0.5, 0.0])
    assert risk_coverage(risk, risk * 3 + 1).aurc == pytest.approx(risk_coverage(risk, risk).oracle)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="same queries"):
        risk_coverage(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        risk_coverage(np.array([2.0]), np.zeros(1))
    with pytest.raises(ValueError, match="NaN"):
        risk_coverage(np.array([0.5]), np.array([np.nan]))


@pytest.mark.parametrize("seed", range(5))
def test_uncertainty_recall_agreement_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    uncertainty = rng.normal(size=103)
    hits = (rng.uniform(size=103) > 1 / (1 + np.exp(-uncertainty))).astype(np.float64)
    result = uncertainty_recall_agreement(hits, uncertainty, num_bins=7)
    order = np.argsort(uncertainty, kind="stable")
    recall = [hits[c].mean() for c in np.array_split(order, 7)]
    assert result["S"] == pytest.approx(scipy.stats.spearmanr(np.arange(7), recall).statistic, rel=1e-12)
    assert result["R2"] == pytest.approx(scipy.stats.linregress(np.arange(7), recall).rvalue ** 2, rel=1e-9)
    assert np.isnan(uncertainty_recall_agreement(np.ones(20), uncertainty[:20], num_bins=4)["R2"])


def test_top1_margin() -> None:
    scores = torch.tensor([[0.1, 0.9, 0.4], [2.0, 2.0, -1.0]])
    torch.testing.assert_close(top1_margin(scores), torch.tensor([0.5, 0.0]))
    with pytest.raises(ValueError, match="G >= 2"):
        top1_margin(torch.zeros(3, 1))
