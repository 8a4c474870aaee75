"""Abstention and sigma at any dimension: the risk-coverage series against a per-query loop, the exact
PCA projection of Gaussians against sampling and a float64 reference, and both figures through
``evaluate_embeddings``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from pcmr import Gaussian
from pcmr.evaluation import evaluate_embeddings
from pcmr.evaluation.figures import (
    abstention_columns,
    abstention_series,
    multiplicity_strata,
    pca_ellipse_series,
    project_gaussians,
)
from pcmr.report.plots import ellipse_axes, save_figures


def _gaussians(seed: int, num: int, dim: int, logvar_dim: int | None = None) -> Gaussian:
    generator = torch.Generator().manual_seed(seed)
    mean = torch.randn(num, dim, generator=generator, dtype=torch.float64)
    logvar = torch.randn(num, logvar_dim or dim, generator=generator, dtype=torch.float64) * 0.5 - 1
    return Gaussian(mean, logvar)


def _r_precision(row: np.ndarray, relevant: np.ndarray) -> float:
    r = int(relevant.sum())
    order = sorted(range(len(row)), key=lambda g: (-row[g], g))
    return sum(bool(relevant[g]) for g in order[:r]) / r


def test_abstention_series_matches_a_per_query_loop() -> None:
    rng = np.random.default_rng(0)
    scores = torch.tensor(rng.normal(size=(23, 31)))
    relevance = torch.tensor(rng.uniform(size=(23, 31)) < 0.15)
    relevance[0] = False  # a query without a positive is left out
    relevance[:, 0] = True
    images, captions = _gaussians(1, 23, 5), _gaussians(2, 31, 5)
    series = abstention_series(scores, relevance, images, captions, "log_det")
    uncertainty = images.uncertainty("log_det").numpy()
    queries = [q for q in range(23) if relevance[q].any()]
    risk = np.array([1 - _r_precision(scores[q].numpy(), relevance[q].numpy()) for q in queries])
    order = sorted(queries, key=lambda q: uncertainty[q])
    curve = np.cumsum([risk[queries.index(q)] for q in order]) / np.arange(1, len(order) + 1)
    side = series["i2t"]
    np.testing.assert_allclose(side["risk"], curve, atol=1e-12)
    assert side["aurc"] == pytest.approx(curve.mean()) and side["random"] == pytest.approx(risk.mean())
    assert side["oracle"] <= side["aurc"] and side["oracle"] <= side["aurc_margin"]
    columns = abstention_columns(series)
    assert columns["i2t_aurc"] == pytest.approx(100 * curve.mean())
    assert {"t2i_aurc_margin", "t2i_aurc_multiplicity", "i2t_uncertainty_S", "i2t_uncertainty_R2"} <= set(columns)
    # within multiplicity strata: the size-weighted AURC inside each group of equal multiplicity
    counts = np.array([int(relevance[q].sum()) for q in queries])
    strata = multiplicity_strata(counts)
    total = weight = 0
    for value in set(strata.tolist()):
        members = [i for i in range(len(queries)) if strata[i] == value]
        if len(members) >= 2:
            inner = sorted(members, key=lambda i: uncertainty[queries[i]])
            total += np.mean(np.cumsum(risk[inner]) / np.arange(1, len(inner) + 1)) * len(members)
            weight += len(members)
    assert side["aurc_within"] == pytest.approx(total / weight)


def test_multiplicity_strata_keep_ties_together() -> None:
    assert multiplicity_strata(np.array([3, 1, 3, 2])).tolist() == [2, 0, 2, 1]
    counts = np.array([1, 1, 1, 2, 2, 5, 6, 7, 8, 9, 10, 11])
    strata = multiplicity_strata(counts, max_strata=3)
    for value in np.unique(counts):
        assert len(set(strata[counts == value].tolist())) == 1
    assert strata.max() <= 2 and np.all(np.diff(strata[np.argsort(counts)]) >= 0)


@pytest.mark.parametrize("logvar_dim", [None, 1])
def test_pca_projection_is_exact(logvar_dim: int | None) -> None:
    gaussian = _gaussians(3, 4, 7, logvar_dim)
    axes = torch.linalg.qr(torch.randn(7, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(4)))[0]
    center = torch.randn(7, dtype=torch.float64)
    mean, covariance = project_gaussians(gaussian, center, axes)
    variance = gaussian.logvar.exp().expand(-1, 7).numpy()
    for n in range(4):  # float64 reference: W^T diag(var) W
        expected = axes.numpy().T @ np.diag(variance[n]) @ axes.numpy()
        np.testing.assert_allclose(covariance[n].numpy(), expected, rtol=1e-12, atol=1e-15)
    samples = gaussian.mean[0] + torch.randn(200_000, 7, dtype=torch.float64,
                                             generator=torch.Generator().manual_seed(5)) * gaussian.std[0]
    projected = (samples - center) @ axes
    np.testing.assert_allclose(projected.mean(0).numpy(), mean[0].numpy(), atol=0.02)
    np.testing.assert_allclose(np.cov(projected.numpy().T), covariance[0].numpy(), atol=0.01)


def test_ellipse_axes_of_a_tilted_covariance() -> None:
    angle = math.radians(30)
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    covariance = rotation @ np.diag([4.0, 1.0]) @ rotation.T
    width, height, degrees = ellipse_axes(covariance)
    assert (width, height) == pytest.approx((4.0, 2.0))
    assert degrees % 180 == pytest.approx(30.0)


def test_evaluate_writes_abstention_and_pca(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    images, captions = _gaussians(7, 40, 6), _gaussians(8, 80, 6)
    relevance = torch.tensor(rng.uniform(size=(40, 80)) < 0.1)
    relevance[torch.arange(40), torch.arange(40)] = True
    relevance[torch.arange(40), torch.arange(40, 80)] = True
    report = evaluate_embeddings(images.to(torch.float32), captions.to(torch.float32), relevance, similarities=["cosine", "elk"],
                                 rerankers=["nns", "is"])
    nns = [row for row in report.rows if row["rerank"] == "nns"]
    assert all(0 <= row["i2t_aurc"] <= 100 and "t2i_uncertainty_S" in row for row in nns)
    assert all("i2t_aurc" not in row for row in report.rows if row["rerank"] != "nns")
    assert set(report.figures["risk_coverage"]["series"]) == {"cosine", "elk"}
    pca = report.figures["embeddings_pca"]
    assert len(pca["caption"]["mean"]) == 16 and len(pca["image"]["covariance"]) == 8
    paths = save_figures({k: report.figures[k] for k in ("risk_coverage", "embeddings_pca")}, tmp_path)
    assert all(path.read_bytes()[:4] == b"\x89PNG" for path in paths.values())


def test_a_point_model_reports_the_deterministic_references(tmp_path: Path) -> None:
    """The mu-only baseline has no sigma, but its top-1 margin and the multiplicity oracle are the
    references a probabilistic model's sigma is compared against: its nns rows carry those columns
    (the same values the reference function computes), and no sigma column."""
    from pcmr.evaluation.figures import reference_abstention_series

    rng = np.random.default_rng(7)
    images = Gaussian(torch.tensor(rng.normal(size=(30, 6)), dtype=torch.float32))
    captions = Gaussian(torch.tensor(rng.normal(size=(60, 6)), dtype=torch.float32))
    relevance = torch.tensor(rng.uniform(size=(30, 60)) < 0.15)
    relevance[torch.arange(30), torch.arange(30)] = True
    report = evaluate_embeddings(images, captions, relevance, similarities=["cosine"], rerankers=["nns", "is"])
    nns = next(row for row in report.rows if row["rerank"] == "nns")
    scores = torch.nn.functional.normalize(images.mean, dim=1) @ torch.nn.functional.normalize(captions.mean, dim=1).T
    expected = abstention_columns(reference_abstention_series(scores, relevance))
    assert set(expected) == {f"{d}_{c}" for d in ("i2t", "t2i") for c in (
        "aurc_margin", "aurc_multiplicity", "aurc_margin_within", "random_within", "aurc_random",
        "excess_aurc_margin")}
    for d in ("i2t", "t2i"):  # the excess over no abstention: the margin's AURC minus the mean risk
        assert expected[f"{d}_excess_aurc_margin"] == pytest.approx(
            expected[f"{d}_aurc_margin"] - expected[f"{d}_aurc_random"], abs=1e-9)
    for column, value in expected.items():
        assert nns[column] == pytest.approx(value, abs=1e-6)
    assert "i2t_aurc" not in nns and "t2i_uncertainty_S" not in nns
    assert all("i2t_aurc_margin" not in row for row in report.rows if row["rerank"] != "nns")
    assert "risk_coverage" not in report.figures


def test_no_pca_figure_for_points() -> None:
    points = Gaussian(torch.randn(20, 4), None)
    report = evaluate_embeddings(points, Gaussian(torch.randn(20, 4), None), torch.eye(20, dtype=torch.bool),
                                 similarities=["cosine"], rerankers=["nns"])
    assert "embeddings_pca" not in report.figures


def test_pca_series_picks_specific_and_generic_captions() -> None:
    images, captions = _gaussians(9, 10, 5), _gaussians(10, 30, 5)
    relevance = torch.zeros(10, 30, dtype=torch.bool)
    for c in range(30):
        relevance[: 1 + c % 10, c] = True
    series = pca_ellipse_series(images, captions, relevance, max_captions=6)
    assert series["caption"]["multiplicity"] == [1, 1, 1, 10, 10, 10]
    assert sum(series["explained"]) <= 1.0 + 1e-9
