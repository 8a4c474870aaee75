"""Exact re-scoring of ANN candidates and hub-aware (CSLS) scores on an ANN gallery.

- :func:`rescore_candidates`: the exact ``pcmr.similarity`` score of each query against its
  ``C`` candidates (for scores faiss cannot search directly: KL, ELK, match probability, ...).
- :func:`gallery_hubness`: CSLS's ``r_Q(g)``, each gallery item's mean score to its ``k`` nearest
  queries of a reference query sample, computed once when the index is built (blocked over the
  gallery, exact scores).
- :func:`csls_from_terms`: ``2 S[q, g] - r_G(q) - r_Q(g)`` (HAL/RGM eq. 6; ``pcmr.inference.csls``
  computes the same from a full score matrix, and the tests check the two agree).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pcmr.evaluation.scoring import score_matrix
from pcmr.gaussian import Gaussian
from pcmr.similarity import get_similarity, paired

__all__ = ["csls_from_terms", "gallery_hubness", "oriented_scores", "rescore_candidates"]


def oriented_scores(similarity: str, query: Gaussian, gallery: Gaussian, query_modality: str,
                    options: dict[str, Any]) -> Tensor:
    """Exact scores ``[Q, G]`` of queries (rows) against gallery items, whatever the direction
    (a caption query scores ``S(image, caption)`` like every other caption)."""

    if query_modality == "caption":
        return score_matrix(similarity, gallery, query, options).T  # [N_img, N_cap] -> [Q, G]
    return score_matrix(similarity, query, gallery, options)


def rescore_candidates(similarity: str, query: Gaussian, gallery: Gaussian, candidates: Tensor,
                       query_modality: str, options: dict[str, Any]) -> Tensor:
    """Exact scores ``[Q, C]`` of each query against its candidate rows ``candidates [Q, C]``
    (entries ``-1`` mark unfilled slots and score ``-inf``). Closed-form scores are evaluated on
    aligned pairs in one call; Monte-Carlo scores query by query through the same seeded path as the
    exact backend."""

    valid = candidates >= 0
    safe = candidates.clamp_min(0)
    num_queries, width = candidates.shape
    if get_similarity(similarity).sampled:
        rows = [oriented_scores(similarity, query[q:q + 1], gallery[safe[q]], query_modality, options)[0]
                for q in range(num_queries)]
        out = torch.stack(rows) if rows else gallery.mean.new_zeros(0, width)
    else:
        items = gallery[safe.reshape(-1)]
        repeated = query[torch.arange(num_queries).repeat_interleave(width)]
        pair = (items, repeated) if query_modality == "caption" else (repeated, items)
        with torch.no_grad():
            out = paired(similarity, *pair, **options).reshape(num_queries, width)
    return out.masked_fill(~valid, float("-inf"))


def gallery_hubness(similarity: str, sample: Gaussian, gallery: Gaussian, query_modality: str, k: int,
                    options: dict[str, Any], block_items: int = 65_536) -> Tensor:
    """``r_Q(g)`` for every gallery item, ``[G]``: the mean of the ``k`` largest exact scores of item
    ``g`` against the ``R`` reference queries ``sample`` (HAL/RGM eq. 6), blocked over the gallery so
    only ``[R, block_items]`` scores exist at a time. ``1 <= k <= R``."""
    if not 1 <= k <= sample.num:
        raise ValueError(f"CSLS k must be in [1, {sample.num}] (the reference query sample), got {k}")
    out = gallery.mean.new_empty(gallery.num)
    for start in range(0, gallery.num, block_items):
        block = gallery[start:start + block_items]
        scores = oriented_scores(similarity, sample, block, query_modality, options)  # [R, B]
        out[start:start + block.num] = scores.topk(k, dim=0).values.mean(0)
    return out


def csls_from_terms(scores: Tensor, row_mean: Tensor, col_mean: Tensor) -> Tensor:
    """``2 S - r_G[:, None] - r_Q`` for candidate scores ``S [Q, C]`` with ``r_G [Q]`` and the stored
    ``r_Q`` of the candidates ``[Q, C]`` (HAL/RGM eq. 6)."""
    return 2 * scores - row_mean.unsqueeze(1) - col_mean
