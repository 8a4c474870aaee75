"""Confidence intervals and verdicts of pcmr.study.stats against scipy.stats and hand-made cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from pcmr.study.stats import Interval, mean_interval, paired_interval, t_cdf, t_quantile, verdict


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 7, 9, 13, 29, 100, 2.5])
@pytest.mark.parametrize("p", [0.5, 0.6, 0.9, 0.95, 0.975, 0.995, 0.9999, 0.025, 1e-4])
def test_t_quantile_matches_scipy(df: float, p: float) -> None:
    expected = float(sps.t.ppf(p, df))
    assert t_quantile(p, df) == pytest.approx(expected, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("df", [1, 2, 5, 30])
@pytest.mark.parametrize("t", [-40.0, -3.1, -0.2, 0.0, 0.7, 2.0, 12.0])
def test_t_cdf_matches_scipy(df: int, t: float) -> None:
    assert t_cdf(t, df) == pytest.approx(float(sps.t.cdf(t, df)), rel=1e-11, abs=1e-14)


def test_t_functions_reject_bad_arguments() -> None:
    for p in (0.0, 1.0, -0.1, 1.5, True):
        with pytest.raises(ValueError, match="p must be"):
            t_quantile(p, 3)
    for df in (0, -1, math.inf, True):
        with pytest.raises(ValueError, match="degrees of freedom"):
            t_quantile(0.9, df)


@pytest.mark.parametrize("values", [[3.0, 4.5], [1.0, 2.0, 4.0], [10.2, 9.7, 11.1, 10.0, 10.5, 9.1, 10.9]])
@pytest.mark.parametrize("level", [0.95, 0.9, 0.99])
def test_mean_interval_matches_scipy(values: list[float], level: float) -> None:
    got = mean_interval(values, level)
    low, high = sps.t.interval(level, len(values) - 1, loc=np.mean(values), scale=sps.sem(values))
    assert got.n == len(values)
    assert got.mean == pytest.approx(np.mean(values), rel=1e-13)
    assert got.std == pytest.approx(np.std(values, ddof=1), rel=1e-12)
    assert (got.low, got.high) == (pytest.approx(low, rel=1e-10), pytest.approx(high, rel=1e-10))


def test_paired_interval_matches_scipy_ttest_rel() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(5, 2, 6), rng.normal(4, 2, 6)
    got = paired_interval(a.tolist(), b.tolist())
    ci = sps.ttest_rel(a, b).confidence_interval(0.95)
    assert got.mean == pytest.approx(float(np.mean(a - b)), rel=1e-12)
    assert (got.low, got.high) == (pytest.approx(ci.low, rel=1e-10), pytest.approx(ci.high, rel=1e-10))


def test_intervals_of_few_values() -> None:
    single = mean_interval([2.5])
    assert single.n == 1 and single.mean == 2.5 and math.isnan(single.low) and math.isnan(single.high)
    empty = mean_interval([])
    assert empty.n == 0 and math.isnan(empty.mean)
    constant = paired_interval([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])  # every difference 1: zero-width interval
    assert (constant.low, constant.high) == (1.0, 1.0)
    with pytest.raises(ValueError, match="same length"):
        paired_interval([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        mean_interval([1.0, math.nan])


def _interval(low: float, high: float, n: int = 3) -> Interval:
    return Interval(n=n, mean=(low + high) / 2, std=1.0, half_width=(high - low) / 2, level=0.95)


@pytest.mark.parametrize(("low", "high", "expect", "margin", "expected"), [
    (0.5, 2.0, "greater", 0.0, "holds"),
    (-2.0, -0.1, "greater", 0.0, "reversed"),
    (-1.0, 1.0, "greater", 0.0, "inconclusive"),
    (0.0, 1.0, "greater", 0.0, "inconclusive"),  # touching zero is not "entirely on the expected side"
    (-0.5, 1.0, "greater", 1.0, "holds"),  # a >= b - 1 (non-inferiority)
    (-3.0, -1.5, "greater", 1.0, "reversed"),
    (-2.0, -0.5, "less", 0.0, "holds"),
    (0.2, 0.9, "less", 0.0, "reversed"),
    (-0.3, 0.4, "less", 0.0, "inconclusive"),
    (-0.4, 0.4, "equal", 0.5, "holds"),
    (-0.6, 0.4, "equal", 0.5, "inconclusive"),
    (0.6, 1.2, "equal", 0.5, "reversed"),
    (-2.0, -0.7, "equal", 0.5, "reversed"),
])
def test_verdict_rule(low: float, high: float, expect: str, margin: float, expected: str) -> None:
    assert verdict(_interval(low, high), expect, margin) == expected


def test_verdict_needs_two_pairs_and_valid_arguments() -> None:
    assert verdict(mean_interval([5.0]), "greater") == "inconclusive"
    with pytest.raises(ValueError, match="expect must be"):
        verdict(_interval(0, 1), "bigger")
    with pytest.raises(ValueError, match="margin > 0"):
        verdict(_interval(0, 1), "equal", 0.0)
    with pytest.raises(ValueError, match="margin must be"):
        verdict(_interval(0, 1), "greater", -1.0)
