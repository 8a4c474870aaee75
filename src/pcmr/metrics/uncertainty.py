"""Uncertainty analysis: R@1 per uncertainty bin (PCME Fig. 6) and binary selection (ProbVSE Table 4)."""

from __future__ import annotations

import torch
from torch import Tensor

from pcmr.metrics._relevance import RelevanceInput, SparseRelevance, check_scores
from pcmr.metrics.ranking import per_query_metrics
from pcmr.report import Report


def recall_by_uncertainty(
    scores: Tensor,
    relevant: RelevanceInput | SparseRelevance,
    uncertainty: Tensor,
    *,
    num_bins: int = 10,
    k: int = 1,
    block_size: int | None = None,
) -> Report:
    """R@k of the queries in each of ``num_bins`` equal-size uncertainty bins (PCME §4.4, Fig. 6).

    Queries with a positive are sorted by ``uncertainty [Q]`` (ascending; e.g.
    ``Gaussian.uncertainty(...)``; ties by query index) and split into ``num_bins`` consecutive
    bins whose sizes differ by at most one. Rows ``"bin 1"`` (least uncertain) ... with
    ``uncertainty_min``, ``uncertainty_max``, ``uncertainty_mean``, ``R@k`` (percent), ``num_queries``.
    """
    scores = check_scores(scores)
    if not isinstance(uncertainty, Tensor) or uncertainty.shape != (scores.shape[0],):
        shape = tuple(uncertainty.shape) if isinstance(uncertainty, Tensor) else type(uncertainty).__name__
        raise ValueError(f"uncertainty must be a tensor [{scores.shape[0]}] (one value per query), got {shape}")
    if bool(torch.isnan(uncertainty).any()):
        raise ValueError("uncertainty contains NaN; every query needs a number")
    if not isinstance(num_bins, int) or num_bins < 1:
        raise ValueError(f"num_bins must be a positive integer, got {num_bins!r}")
    per_query = per_query_metrics(scores, relevant, precision=False, block_size=block_size)
    valid = per_query.valid
    if int(valid.sum()) < num_bins:
        raise ValueError(f"{int(valid.sum())} queries with a positive cannot fill {num_bins} bins")
    values = uncertainty.to(device=scores.device, dtype=torch.float64)[valid]
    hits = per_query.hit_probability(k)[valid]  # expected over the orders of tied scores
    order = torch.sort(values, stable=True).indices
    report = Report(title=f"R@{k} by uncertainty bin")
    for b, chunk in enumerate(torch.tensor_split(order, num_bins), start=1):
        report.add(f"bin {b}", {
            "uncertainty_min": float(values[chunk].min()),
            "uncertainty_max": float(values[chunk].max()),
            "uncertainty_mean": float(values[chunk].mean()),
            f"R@{k}": 100.0 * float(hits[chunk].mean()),
            "num_queries": float(chunk.numel()),
        })
    return report


def binary_selection_accuracy(positive_scores: Tensor, negative_scores: Tensor) -> float:
    """Accuracy (percent) of choosing the right one of two candidates (ProbVSE §5, Table 4; GCIE §3.4).

    ``positive_scores [N]``: score of each query with its correct candidate (e.g. crop A for
    caption A); ``negative_scores [N]``: with the other (e.g. the union crop C). A query is
    right when the correct candidate scores higher; an exact tie counts one half.
    """
    for name, value in (("positive_scores", positive_scores), ("negative_scores", negative_scores)):
        if not isinstance(value, Tensor) or value.dim() != 1 or not value.is_floating_point():
            raise ValueError(f"{name} must be a 1-D float tensor [N]")
        if bool(torch.isnan(value).any()):
            raise ValueError(f"{name} contains NaN; every score must be a number")
    if positive_scores.shape != negative_scores.shape or positive_scores.numel() == 0:
        raise ValueError(f"positive_scores and negative_scores must have the same non-empty shape [N], got "
                         f"{tuple(positive_scores.shape)} and {tuple(negative_scores.shape)}")
    negative_scores = negative_scores.to(positive_scores.device)
    right = (positive_scores > negative_scores).to(torch.float64)
    right += 0.5 * (positive_scores == negative_scores).to(torch.float64)
    return 100.0 * float(right.mean())
