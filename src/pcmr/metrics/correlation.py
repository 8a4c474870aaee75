"""Rank correlations of per-item quantities with multiplicity (the number of relevant items).

- :func:`average_ranks`, :func:`spearman`: Spearman's rank correlation, average ranks for ties.
- :func:`relevant_count_correlation`: between each item's uncertainty and its number of relevant
  items, for images (rows) and captions (columns); PCME (Chun et al., CVPR 2021, Fig. 6) claims it
  is positive.
- :func:`multiplicity_confounds`: on the built-in shapes data, between multiplicity and caption
  length or an image's object count. Where multiplicity follows length, an effect of length reads
  as an effect of ambiguity, and the previous correlation cannot be judged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["average_ranks", "spearman", "relevant_count_correlation", "multiplicity_confounds"]


def average_ranks(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Ranks ``1..n`` of ``values`` (ascending); tied values share the mean of their ranks."""
    data = np.asarray(values, dtype=np.float64)
    _, inverse, counts = np.unique(data, return_inverse=True, return_counts=True)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])  # 0-based rank of each group's first member
    return (first + (counts + 1) / 2.0)[inverse.reshape(-1)]


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's correlation of the average ranks; NaN when either
    side is constant."""
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if xs.ndim != 1 or xs.shape != ys.shape or xs.size < 2:
        raise ValueError(f"x and y must be 1-D of the same length >= 2, got {xs.shape} and {ys.shape}")
    if np.isnan(xs).any() or np.isnan(ys).any():
        raise ValueError("x and y must not contain NaN")
    rx, ry = average_ranks(xs), average_ranks(ys)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float((rx * rx).sum()) * float((ry * ry).sum()))
    return math.nan if denominator == 0 else float((rx * ry).sum() / denominator)


def relevant_count_correlation(relevance: Tensor, image_uncertainty: Tensor | None,
                               caption_uncertainty: Tensor | None) -> dict[str, float]:
    """Spearman correlation between each item's uncertainty and its number of relevant items.

    Args:
        relevance: BoolTensor ``[N_img, N_cap]``.
        image_uncertainty: ``[N_img]`` or None; caption_uncertainty: ``[N_cap]`` or None (e.g.
            ``Gaussian.uncertainty``; None for a side without variances).

    Returns ``{"image": rho, "caption": rho}`` for the sides given (NaN where every item has the
    same count, e.g. captions under source relevance).
    """
    if relevance.dtype != torch.bool or relevance.dim() != 2:
        raise ValueError(f"relevance must be a 2-D BoolTensor [N_img, N_cap], got {relevance.dtype} "
                         f"{tuple(relevance.shape)}")
    out = {}
    for side, value, axis in (("image", image_uncertainty, 1), ("caption", caption_uncertainty, 0)):
        if value is None:
            continue
        size = relevance.shape[1 - axis]
        if tuple(value.shape) != (size,):
            raise ValueError(f"{side}_uncertainty must have shape [{size}], got {tuple(value.shape)}")
        out[side] = spearman(value.detach().double().cpu().numpy(), relevance.sum(axis).cpu().numpy())
    return out


def multiplicity_confounds(split: Any) -> dict[str, float]:
    """Correlations of multiplicity with length and object count on a shapes split (a ``RetrievalSplit``
    whose ``info["scenes"]`` holds the scenes).

    Returns ``rho_length_caption``: Spearman's rho between a caption's word count and its number of
    relevant images; ``rho_objects_image``: between an image's object count and its number of relevant
    captions (NaN when every image has the same count); plus the means and ranges they come from.
    """
    lengths = np.array([len(text.split()) for text in split.caption_texts])
    caption_multiplicity = np.array([len(images) for images in split.caption_to_images])
    image_multiplicity = np.array([len(captions) for captions in split.image_to_captions])
    objects = np.asarray(split.info["scenes"].num_objects)
    return {
        "rho_length_caption": spearman(lengths, caption_multiplicity),
        "rho_objects_image": spearman(objects, image_multiplicity),
        "caption_words_min": float(lengths.min()), "caption_words_max": float(lengths.max()),
        "caption_multiplicity_mean": float(caption_multiplicity.mean()),
        "caption_multiplicity_max": float(caption_multiplicity.max()),
        "image_multiplicity_mean": float(image_multiplicity.mean()),
    }
