"""Exact scores of queries against gallery items, whichever direction the query comes from.

- :func:`oriented_scores`: ``[Q, G]`` scores of queries (rows) against a block of gallery items;
- :func:`rescore_candidates`: the exact ``pcmr.similarity`` score of each query against its ``C``
  candidates, read from memory or from a gallery store on disk (refine-by-exact).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pcmr.gaussian import Gaussian
from pcmr.scoring import score_matrix
from pcmr.search.store import GalleryStore
from pcmr.similarity import get_similarity, paired

__all__ = ["oriented_scores", "rescore_candidates"]


def oriented_scores(similarity: str, query: Gaussian, gallery: Gaussian, query_modality: str,
                    options: dict[str, Any]) -> Tensor:
    """Exact scores ``[Q, G]`` of queries (rows) against gallery items, whatever the direction
    (a caption query scores ``S(image, caption)`` like every other caption). Sampled scores use each
    side's common draws, so a pair scores the same whichever items come with it."""

    if query_modality == "caption":
        return score_matrix(similarity, gallery, query, options, common=True).T  # [N_img, N_cap] -> [Q, G]
    return score_matrix(similarity, query, gallery, options, common=True)


def _take(gallery: Gaussian | GalleryStore, rows: Tensor, need_logvar: bool) -> Gaussian:
    if isinstance(gallery, GalleryStore):
        return gallery.rows(rows, need_logvar=need_logvar)
    return gallery[rows]


def rescore_candidates(similarity: str, query: Gaussian, gallery: Gaussian | GalleryStore, candidates: Tensor,
                       query_modality: str, options: dict[str, Any], *, need_logvar: bool = True) -> Tensor:
    """Exact scores ``[Q, C]`` of each query against its candidate rows ``candidates [Q, C]``
    (entries ``-1`` mark unfilled slots and score ``-inf``). Closed-form scores are evaluated on
    aligned pairs in one call; Monte-Carlo scores query by query through the path of the exact backend,
    with the common draws of each side (:func:`oriented_scores`). ``need_logvar=False`` reads only the means of a store (scores of the means)."""

    valid = candidates >= 0
    safe = candidates.clamp_min(0)
    num_queries, width = candidates.shape
    score = get_similarity(similarity)
    fast = None
    if score.batched_candidates:  # one batched call over each query's own candidates
        means = _take(gallery, safe.reshape(-1), False).mean.reshape(num_queries, width, -1)  # [Q, C, D]
        fast = score.candidate_scores(means, query.mean, options)
    if fast is not None:
        out = fast
    elif score.sampled:
        rows = [oriented_scores(similarity, query[q:q + 1], _take(gallery, safe[q], need_logvar), query_modality,
                                options)[0]
                for q in range(num_queries)]
        out = torch.stack(rows) if rows else torch.zeros(0, width)
    else:
        items = _take(gallery, safe.reshape(-1), need_logvar)
        repeated = query[torch.arange(num_queries).repeat_interleave(width)]
        pair = (items, repeated) if query_modality == "caption" else (repeated, items)
        with torch.no_grad():
            out = paired(similarity, *pair, **options).reshape(num_queries, width)
    return out.masked_fill(~valid, float("-inf"))

