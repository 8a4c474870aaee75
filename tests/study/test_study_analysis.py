"""Per-run analysis scalars of pcmr.study.analysis against numpy / scipy and explicit loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats as sps

from pcmr.study.analysis import (
    average_ranks,
    binary_selection,
    least_squares_slope,
    relevant_count_correlation,
    spearman,
)


def test_least_squares_slope_matches_polyfit() -> None:
    rng = np.random.default_rng(0)
    x = np.linspace(0.0, 0.8, 9)
    y = 3.0 * x + rng.normal(0, 0.1, 9)
    assert least_squares_slope(x.tolist(), y.tolist()) == pytest.approx(np.polyfit(x, y, 1)[0], rel=1e-12)
    assert math.isnan(least_squares_slope([1.0, 1.0], [0.0, 2.0]))
    with pytest.raises(ValueError, match="same length"):
        least_squares_slope([1.0, 2.0], [1.0])


def test_average_ranks_match_scipy_rankdata() -> None:
    values = [3.0, 1.0, 3.0, 2.0, 3.0, -1.0, 2.0]
    np.testing.assert_allclose(average_ranks(values), sps.rankdata(values))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spearman_with_ties_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=37)
    y = rng.integers(1, 5, size=37).astype(float)  # many ties, as counts of relevant items have
    assert spearman(x, y) == pytest.approx(sps.spearmanr(x, y).statistic, rel=1e-12)
    assert math.isnan(spearman(x, np.ones(37)))


def test_relevant_count_correlation_against_counts() -> None:
    generator = torch.Generator().manual_seed(0)
    relevance = torch.rand(11, 17, generator=generator) < 0.3
    image_u, caption_u = torch.randn(11, generator=generator), torch.randn(17, generator=generator)
    got = relevant_count_correlation(relevance, image_u, caption_u)
    image_counts = [sum(bool(relevance[i, c]) for c in range(17)) for i in range(11)]
    caption_counts = [sum(bool(relevance[i, c]) for i in range(11)) for c in range(17)]
    assert got["image"] == pytest.approx(sps.spearmanr(image_u.numpy(), image_counts).statistic, rel=1e-12)
    assert got["caption"] == pytest.approx(sps.spearmanr(caption_u.numpy(), caption_counts).statistic, rel=1e-12)
    assert relevant_count_correlation(relevance, None, caption_u) == {"caption": got["caption"]}
    with pytest.raises(ValueError, match="caption_uncertainty"):
        relevant_count_correlation(relevance, image_u, caption_u[:3])


def test_binary_selection_by_hand() -> None:
    # two triplets; images [crop A x2, crop B x2, union x2], captions [A x2, "A and B" x2]
    roles = {"crop_a": [0, 1], "crop_b": [2, 3], "union": [4, 5], "caption_a": [0, 1], "caption_ab": [2, 3]}
    scores = torch.zeros(6, 4, dtype=torch.float64)
    scores[0, 0], scores[0, 2] = 0.9, 0.1  # crop A 0: caption A wins (right)
    scores[1, 1], scores[1, 3] = 0.2, 0.2  # crop A 1: tie (one half)
    scores[4, 2], scores[4, 0] = 0.8, 0.3  # union 0: "A and B" wins (right)
    scores[5, 3], scores[5, 1] = 0.1, 0.6  # union 1: caption A wins (wrong)
    got = binary_selection(scores, roles)
    assert got["i2t_crop_a"] == pytest.approx(75.0)
    assert got["i2t_union"] == pytest.approx(50.0)
    # caption A 0: crop A 0.9 vs union 0.3 -> right; caption A 1: crop A 0.2 vs union 0.6 -> wrong
    assert got["t2i_caption_a"] == pytest.approx(50.0)
    # "A and B" 0: union 0.8 vs crop A 0.1 -> right; 1: union 0.1 vs crop A 0.2 -> wrong
    assert got["t2i_caption_ab"] == pytest.approx(50.0)
    with pytest.raises(ValueError, match="roles lacks"):
        binary_selection(scores, {"crop_a": [0]})
