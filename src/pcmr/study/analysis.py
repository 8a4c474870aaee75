"""Per-run analysis scalars for claims that are not ranking metrics (pure functions).

- :func:`least_squares_slope`: slope of the least-squares line through ``(x_i, y_i)``; used on
  PCME Fig. 7's series (mean uncertainty against the occluded / erased fraction).
- :func:`spearman` and :func:`relevant_count_correlation` (from :mod:`pcmr.metrics.correlation`):
  the rank correlation between each item's uncertainty and its true number of relevant items.
- :func:`stratified_spearman`: the same correlation within strata (e.g. captions with the same
  number of wildcard slots), averaged with stratum sizes as weights, so that a correlation carried
  only by the stratum variable does not count.
- :func:`mean_pairwise_spearman`: how well per-item values (one uncertainty per test item) agree
  across seeds: the mean of Spearman's rho over every pair of seeds.
- :func:`binary_selection`: the four accuracies of the binary selection task (ProbVSE §5,
  Table 4; GCIE §3.4) from one score matrix of the controlled split.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pcmr.data.shapes.grammar import decode_predicate
from pcmr.evaluation import columns as schema
from pcmr.metrics.correlation import average_ranks, relevant_count_correlation, spearman
from pcmr.metrics.uncertainty import binary_selection_accuracy

__all__ = ["average_ranks", "binary_selection", "caption_wildcard_counts", "least_squares_slope", "mean_pairwise_spearman",
           "relevant_count_correlation", "spearman", "stratified_spearman"]


def least_squares_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """``sum((x - mean x)(y - mean y)) / sum((x - mean x)^2)``; NaN when every ``x`` is equal."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if xs.ndim != 1 or xs.shape != ys.shape or xs.size < 2:
        raise ValueError(f"x and y must be 1-D sequences of the same length >= 2, got {xs.shape} and {ys.shape}")
    dx = xs - xs.mean()
    denominator = float((dx * dx).sum())
    return math.nan if denominator == 0 else float((dx * (ys - ys.mean())).sum() / denominator)


def stratified_spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray,
                        strata: Sequence[int] | np.ndarray) -> float:
    """Spearman's rho of ``x`` and ``y`` within each stratum, averaged with weights ``n_s``; strata with
    fewer than 3 items or a constant side are left out; NaN when none is left."""
    xs, ys, groups = (np.asarray(v, dtype=np.float64) for v in (x, y, strata))
    if not (xs.shape == ys.shape == groups.shape) or xs.ndim != 1:
        raise ValueError(f"x, y and strata must be 1-D of the same length, got {xs.shape}, {ys.shape}, "
                         f"{groups.shape}")
    total, weight = 0.0, 0
    for value in np.unique(groups):
        mask = groups == value
        if mask.sum() < 3:
            continue
        rho = spearman(xs[mask], ys[mask])
        if not math.isnan(rho):
            total += rho * int(mask.sum())
            weight += int(mask.sum())
    return total / weight if weight else math.nan


def mean_pairwise_spearman(series: Sequence[Sequence[float] | np.ndarray]) -> float:
    """Mean of Spearman's rho over every pair of ``series`` (one per seed, the same items in the same
    order); NaN with fewer than two series or where every pair has a constant side."""
    arrays = [np.asarray(s, dtype=np.float64) for s in series]
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ValueError(f"every series must cover the same items, got lengths {[a.size for a in arrays]}")
    values = [spearman(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1:]]
    values = [v for v in values if not math.isnan(v)]
    return float(np.mean(values)) if values else math.nan


def caption_wildcard_counts(split: Any) -> np.ndarray | None:
    """Per caption, how many attribute slots (shape, colour, size, column, row) its descriptions leave
    open (a wildcard: "a shape", "anycolour", ...), from a split that records its captions' predicates
    (``info["caption_preds"]`` ``[N_cap, descriptions]`` of predicate codes, -1 where unused, and
    ``info["caption_count"]``); None for a split without them."""
    info = getattr(split, "info", None) or {}
    preds, count = info.get("caption_preds"), info.get("caption_count")
    if preds is None or count is None:
        return None
    preds, count = np.asarray(preds), np.asarray(count)
    out = np.zeros(preds.shape[0], dtype=np.int64)
    for caption in range(preds.shape[0]):
        for code in preds[caption, : int(count[caption])]:
            out[caption] += sum(value == -1 for value in decode_predicate(int(code)))
    return out


def _accuracy(positive: Tensor, negative: Tensor) -> float:

    return binary_selection_accuracy(positive.double(), negative.double())


def binary_selection(scores: Tensor, roles: Mapping[str, np.ndarray | Sequence[int]]) -> dict[str, float]:
    """Binary selection accuracies (percent) on the controlled split.

    Args:
        scores: ``[N_img, N_cap]`` scores (higher = more similar) of the split's images and captions.
        roles: index arrays ``crop_a``, ``union`` (images) and ``caption_a``, ``caption_ab``
            (captions), ``[N]`` each: triplet ``n`` is crop A, union C, caption "A", caption "A and B".

    Returns the accuracy of choosing the right one of two candidates:
    ``i2t_crop_a`` (crop A: caption A over "A and B"), ``i2t_union`` (union C: "A and B" over
    caption A), ``t2i_caption_a`` (caption A: crop A over union C) and ``t2i_caption_ab``
    ("A and B": union C over crop A).
    """
    missing = [k for k in ("crop_a", "union", "caption_a", "caption_ab") if k not in roles]
    if missing:
        raise ValueError(f"roles lacks {missing}; expected index arrays crop_a, union, caption_a, caption_ab")
    idx = {k: torch.as_tensor(np.asarray(roles[k]), dtype=torch.long, device=scores.device)
           for k in ("crop_a", "union", "caption_a", "caption_ab")}
    crop, union, cap_a, cap_ab = idx["crop_a"], idx["union"], idx["caption_a"], idx["caption_ab"]
    return {
        schema.BINSEL_I2T_CROP_A: _accuracy(scores[crop, cap_a], scores[crop, cap_ab]),
        schema.BINSEL_I2T_UNION: _accuracy(scores[union, cap_ab], scores[union, cap_a]),
        schema.BINSEL_T2I_CAPTION_A: _accuracy(scores[crop, cap_a], scores[union, cap_a]),
        schema.BINSEL_T2I_CAPTION_AB: _accuracy(scores[union, cap_ab], scores[crop, cap_ab]),
    }
