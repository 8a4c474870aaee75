"""Hubness: k-occurrence counts N_k and their skewness (HAL/RGM §3.4; docs/metrics.md).

``N_k(g)`` = number of queries whose top-k list (tie rule: lower index first) contains gallery
item g; items never retrieved count 0. Skewness is the population skewness
``mean((N_k - mean)^3) / var^{3/2}`` (``scipy.stats.skew(..., bias=True)``); hs-sum adds it over
k in {1, 5, 10} and both directions of an image-caption score matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from pcmr.metrics._relevance import check_scores
from pcmr.metrics.defaults import HUBNESS_KS
from pcmr.metrics.ranking import check_ks
from pcmr.metrics.scan import scan


def k_occurrences(scores: Tensor, ks: Sequence[int], *, block_size: int | None = None) -> dict[int, Tensor]:
    """N_k of every gallery item for each k in ``ks``, from one pass: ``{k: LongTensor [G]}``."""
    scores = check_scores(scores)
    ks = check_ks(ks)
    return scan(scores, [], hubness_ks=ks, block_size=block_size).k_occurrence


def k_occurrence(scores: Tensor, k: int, *, block_size: int | None = None) -> Tensor:
    """N_k: how many queries (rows of ``scores [Q, G]``) list each gallery item in their top k, ``[G]``."""
    return k_occurrences(scores, (k,), block_size=block_size)[int(k)]


def skewness(counts: Tensor) -> float:
    """Population skewness of a 1-D tensor (float64); NaN when all values are equal."""
    values = counts.to(torch.float64)
    centred = values - values.mean()
    variance = (centred**2).mean()
    if float(variance) == 0.0:
        return float("nan")
    return float((centred**3).mean() / variance**1.5)


def hubness_skewness(scores: Tensor, k: int, *, block_size: int | None = None) -> float:
    """Skewness of the k-occurrence distribution of the gallery items of ``scores [Q, G]``.

    HAL/RGM §3.4: a large positive skew means a few hubs appear in many top-k lists.
    """
    return skewness(k_occurrence(scores, k, block_size=block_size))


def skewness_by_k(occurrences: dict[int, Tensor], prefix: str = "") -> dict[str, float]:
    """``{f"{prefix}skew@{k}": skewness(N_k)}`` for each k."""
    return {f"{prefix}skew@{k}": skewness(counts) for k, counts in occurrences.items()}


def hubness_sum(scores: Tensor, ks: Sequence[int] = HUBNESS_KS, *, block_size: int | None = None) -> dict[str, float]:
    """hs-sum of an image-caption matrix ``S [N_img, N_cap]``: skewness summed over ks and directions.

    Image->text uses the rows of S (gallery: captions), text->image the rows of ``S.T``. Returns
    ``{"hs_sum", "i2t_skew@k", "t2i_skew@k" ...}``.
    """
    scores = check_scores(scores)
    out = skewness_by_k(k_occurrences(scores, ks, block_size=block_size), "i2t_")
    out.update(skewness_by_k(k_occurrences(scores.T, ks, block_size=block_size), "t2i_"))
    return {"hs_sum": sum(out.values()), **out}
