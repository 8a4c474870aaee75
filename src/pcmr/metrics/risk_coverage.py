"""Does abstaining on uncertain queries help? Risk-coverage curves, AURC and uncertainty-recall agreement.

A retrieval system that may answer "uncertain" instead of a ranked list is judged by its
**risk-coverage curve** (Geifman and El-Yaniv, "Selective classification for deep neural networks",
NeurIPS 2017; Geifman et al., ICLR 2019 for AURC): the queries are answered from the least to the most
uncertain; after the ``k`` least uncertain of ``Q`` queries, the coverage is ``k / Q`` and the risk is the
mean risk of those ``k``. The risk of one query here is ``1 - R-Precision`` (or ``1 - hit@1``), so the
curve reads "precision of the answered queries when the most uncertain are withheld". **AURC** is the
mean of the risk over ``k = 1..Q`` (the area under the discrete curve): lower is better; a random order
gives the overall mean risk, the oracle order (queries sorted by their own risk) the lowest possible.

Queries with equal uncertainty have no order between them: the curve is the expected one over their
orders, i.e. within a tie group each answered query carries the group's mean risk.

:func:`uncertainty_recall_agreement` is the check of ProbVLM (Upadhyay et al., ICCV 2023): queries are
binned by uncertainty into equal-size bins, and the Spearman correlation ``S`` and the coefficient of
determination ``R²`` of a least-squares line are taken between the bin level (1 = least uncertain)
and the bin's recall.

:func:`top1_margin` gives the deterministic confidence signal a point model has: the gap between a
query's best and second-best score (a small gap = uncertain).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from pcmr.metrics.correlation import spearman

__all__ = ["RiskCoverage", "risk_coverage", "top1_margin", "uncertainty_recall_agreement"]


@dataclass(frozen=True)
class RiskCoverage:
    """A risk-coverage curve: ``coverage [Q]`` (``k / Q``, ascending), ``risk [Q]`` (mean risk of the ``k``
    least uncertain queries), ``aurc`` (mean of ``risk``), and the two references on the same queries:
    ``random`` (the overall mean risk) and ``oracle`` (AURC of the queries sorted by their own risk)."""

    coverage: np.ndarray
    risk: np.ndarray
    aurc: float
    random: float
    oracle: float


def _vector(value: Tensor | np.ndarray, name: str) -> np.ndarray:
    array = value.detach().double().cpu().numpy() if isinstance(value, Tensor) else np.asarray(value, np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array [Q], got shape {tuple(array.shape)}")
    if np.isnan(array).any():
        raise ValueError(f"{name} contains NaN; every query needs a number")
    return array


def _curve(risk: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Mean risk of the ``k`` queries of smallest ``key``, ``k = 1..Q``, ties averaged."""
    order = np.argsort(key, kind="stable")
    sorted_key, sorted_risk = key[order], risk[order]
    starts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
    counts = np.diff(np.r_[starts, sorted_key.size])
    # each tie group carries its mean: the expectation over its orders
    sorted_risk = np.repeat(np.add.reduceat(sorted_risk, starts) / counts, counts)
    return np.cumsum(sorted_risk) / np.arange(1, sorted_key.size + 1)


def risk_coverage(risk: Tensor | np.ndarray, uncertainty: Tensor | np.ndarray) -> RiskCoverage:
    """The risk-coverage curve of answering queries from the least to the most ``uncertainty``.

    Args:
        risk: ``[Q]`` per-query risk in [0, 1] (e.g. ``1 - R-Precision``).
        uncertainty: ``[Q]`` per-query uncertainty (higher = withheld first).
    """
    risks, keys = _vector(risk, "risk"), _vector(uncertainty, "uncertainty")
    if risks.shape != keys.shape:
        raise ValueError(f"risk and uncertainty must cover the same queries, got {risks.size} and {keys.size}")
    if (risks < 0).any() or (risks > 1).any():
        raise ValueError("risk must lie in [0, 1] (e.g. 1 - R-Precision of each query)")
    curve = _curve(risks, keys)
    oracle = _curve(risks, risks)
    coverage = np.arange(1, risks.size + 1) / risks.size
    return RiskCoverage(coverage, curve, float(curve.mean()), float(risks.mean()), float(oracle.mean()))


def uncertainty_recall_agreement(hits: Tensor | np.ndarray, uncertainty: Tensor | np.ndarray, *,
                                 num_bins: int = 10) -> dict[str, float]:
    """ProbVLM's uncertainty-recall agreement: ``{"S": rho, "R2": r2}`` between the bin level ``1..B``
    (equal-size bins of queries sorted by ``uncertainty``, ties by query index) and each bin's mean of
    ``hits [Q]`` (e.g. hit@1 in {0, 1}); a well-calibrated uncertainty gives S near -1 (recall falls as
    uncertainty grows) and R² near 1. NaN where every bin has the same recall."""
    values, keys = _vector(hits, "hits"), _vector(uncertainty, "uncertainty")
    if values.shape != keys.shape:
        raise ValueError(f"hits and uncertainty must cover the same queries, got {values.size} and {keys.size}")
    if not isinstance(num_bins, int) or not 2 <= num_bins <= values.size:
        raise ValueError(f"num_bins must be an integer between 2 and the number of queries, got {num_bins!r}")
    order = np.argsort(keys, kind="stable")
    recall = np.array([values[chunk].mean() for chunk in np.array_split(order, num_bins)])
    level = np.arange(1, num_bins + 1, dtype=np.float64)
    rho = spearman(level, recall)
    centred = recall - recall.mean()
    total = float((centred * centred).sum())
    if total == 0:
        return {"S": rho, "R2": math.nan}
    slope = float(((level - level.mean()) * centred).sum() / ((level - level.mean()) ** 2).sum())
    residual = recall - (recall.mean() + slope * (level - level.mean()))
    return {"S": rho, "R2": 1.0 - float((residual * residual).sum()) / total}


def top1_margin(scores: Tensor) -> Tensor:
    """``[Q]``: the best minus the second-best score of each query row of ``scores [Q, G]`` (``G >= 2``);
    ``-top1_margin`` is a point model's uncertainty."""
    if not isinstance(scores, Tensor) or scores.dim() != 2 or scores.shape[1] < 2:
        raise ValueError(f"scores must be a tensor [Q, G] with G >= 2, got "
                         f"{tuple(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__}")
    top = torch.topk(scores, 2, dim=1).values
    return top[:, 0] - top[:, 1]
