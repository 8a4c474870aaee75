"""Uncertainty against true multiplicity, and the 2-D embedding figure (PCME §5.1, Fig. 5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from pcmr import Gaussian
from pcmr.evaluation.figures import embeddings_2d_series, multiplicity_series
from pcmr.report.plots import plot_embedding_ellipses, plot_uncertainty_multiplicity


def _data(n_img: int = 23, n_cap: int = 41, dim: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    relevance = torch.rand(n_img, n_cap, generator=g) < torch.linspace(0.02, 0.9, n_cap)  # varied multiplicity
    relevance[torch.arange(n_img), torch.arange(n_img)] = True
    images = Gaussian(torch.randn(n_img, dim, generator=g, dtype=torch.float64),
                      torch.randn(n_img, dim, generator=g, dtype=torch.float64))
    captions = Gaussian(torch.randn(n_cap, dim, generator=g, dtype=torch.float64),
                        torch.randn(n_cap, dim, generator=g, dtype=torch.float64))
    return images, captions, relevance


def test_multiplicity_series_against_a_direct_reading():
    images, captions, relevance = _data()
    out = multiplicity_series(images, captions, relevance, "log_det", num_bins=4)
    for side, g, axis in (("image", images, 1), ("caption", captions, 0)):
        counts = relevance.sum(axis).double().numpy()
        values = g.logvar.sum(1).numpy()  # log-determinant of a diagonal covariance
        np.testing.assert_allclose(out[side]["uncertainty"], values, rtol=1e-12)
        assert out[side]["multiplicity"] == counts.tolist()
        assert out[side]["rho"] == pytest.approx(spearmanr(counts, values).statistic, abs=1e-12)
        order = np.argsort(counts, kind="stable")
        first = order[: -(-len(counts) // 4)]  # np.array_split puts the larger groups first
        assert out[side]["bins"]["multiplicity"][0] == pytest.approx(counts[first].mean())
        assert out[side]["bins"]["uncertainty"][0] == pytest.approx(values[first].mean())
        assert len(out[side]["bins"]["uncertainty"]) == 4


def test_multiplicity_series_subsamples_long_galleries_evenly():
    images, captions, relevance = _data(n_img=9, n_cap=500)
    out = multiplicity_series(images, captions, relevance, "log_det", max_points=100)
    assert len(out["caption"]["uncertainty"]) == 100 and len(out["image"]["uncertainty"]) == 9
    assert out["caption"]["uncertainty"][1] == pytest.approx(float(captions.logvar[5].sum()))


def test_embedding_series_picks_the_most_specific_and_most_generic_captions():
    images, captions, relevance = _data()
    out = embeddings_2d_series(images, captions, relevance, max_captions=10)
    multiplicity = relevance.sum(0)
    picked = out["caption"]["multiplicity"]
    assert len(picked) == 10
    ranked = sorted(multiplicity.tolist())
    assert sorted(picked[:5]) == ranked[:5] and sorted(picked[5:]) == ranked[-5:]


def test_both_figures_draw_with_axes_covering_the_data(tmp_path):
    images, captions, relevance = _data()
    series = multiplicity_series(images, captions, relevance, "log_det")
    path = plot_uncertainty_multiplicity(series, tmp_path / "m.png")
    assert path.stat().st_size > 0
    path = plot_embedding_ellipses(embeddings_2d_series(images, captions, relevance), tmp_path / "e.png")
    assert path.stat().st_size > 0
