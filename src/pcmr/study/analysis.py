"""Per-run analysis scalars for claims that are not ranking metrics (pure functions).

- :func:`least_squares_slope`: slope of the least-squares line through ``(x_i, y_i)``; used on
  PCME Fig. 7's series (mean uncertainty against the occluded / erased fraction).
- :func:`spearman` and :func:`relevant_count_correlation` (from :mod:`pcmr.metrics.correlation`):
  the rank correlation between each item's uncertainty and its true number of relevant items.
- :func:`binary_selection`: the four accuracies of the binary selection task (ProbVSE §5,
  Table 4; GCIE §3.4) from one score matrix of the controlled split.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from pcmr.metrics.correlation import average_ranks, relevant_count_correlation, spearman
from pcmr.metrics.uncertainty import binary_selection_accuracy

__all__ = ["average_ranks", "binary_selection", "least_squares_slope", "relevant_count_correlation", "spearman"]


def least_squares_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """``sum((x - mean x)(y - mean y)) / sum((x - mean x)^2)``; NaN when every ``x`` is equal."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if xs.ndim != 1 or xs.shape != ys.shape or xs.size < 2:
        raise ValueError(f"x and y must be 1-D sequences of the same length >= 2, got {xs.shape} and {ys.shape}")
    dx = xs - xs.mean()
    denominator = float((dx * dx).sum())
    return math.nan if denominator == 0 else float((dx * (ys - ys.mean())).sum() / denominator)


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
        "i2t_crop_a": _accuracy(scores[crop, cap_a], scores[crop, cap_ab]),
        "i2t_union": _accuracy(scores[union, cap_ab], scores[union, cap_a]),
        "t2i_caption_a": _accuracy(scores[crop, cap_a], scores[union, cap_a]),
        "t2i_caption_ab": _accuracy(scores[union, cap_ab], scores[crop, cap_ab]),
    }
