"""Per-block rank and precision computations of the metrics (tie rule: ``pcmr.ranking.topk``).

For a block of queries: the best-ranked positive of each query, its 1-based rank counted without
sorting, and R-Precision / MAP@R from the relevance of the ordered top list (docs/metrics.md).
"""

from __future__ import annotations

import torch
from torch import Tensor


def best_positives(positive_scores: Tensor, row: Tensor, col: Tensor, num_rows: int,
                   num_gallery: int) -> tuple[Tensor, Tensor]:
    """Score and gallery index of each query's best-ranked positive, ``[b]`` each.

    ``positive_scores [n]`` are the scores of the positives ``(row [n], col [n])``. Among equal
    best scores the lower index wins (tie rule). Queries without positive: ``-inf`` and ``num_gallery``.
    """
    device = positive_scores.device
    best = torch.full((num_rows,), float("-inf"), dtype=positive_scores.dtype, device=device)
    best.scatter_reduce_(0, row, positive_scores, reduce="amax", include_self=True)
    is_best = positive_scores == best[row]
    best_index = torch.full((num_rows,), num_gallery, dtype=torch.long, device=device)
    best_index.scatter_reduce_(0, row[is_best], col[is_best], reduce="amin", include_self=True)
    return best, best_index


def first_positive_ranks_block(block: Tensor, row: Tensor, col: Tensor) -> Tensor:
    """1-based rank of each query's best-ranked positive under the tie rule, ``[b]`` (0: no positive).

    ``row``/``col`` [n] list the positives (query row within the block, gallery index). The rank
    is ``#{scores > s*} + #{scores == s* with lower index} + 1`` for the best positive s*;
    no sort is needed.
    """
    num_rows, num_gallery = block.shape
    device = block.device
    best, best_index = best_positives(block[row, col], row, col, num_rows, num_gallery)
    threshold = best[:, None]
    higher = (block > threshold).sum(dim=1, dtype=torch.int32).long()  # [b]
    at_least = (block >= threshold).sum(dim=1, dtype=torch.int32).long()  # [b]
    ranks = higher + 1
    tied = (at_least - higher) > 1  # another item shares the best positive's score
    if bool(tied.any()):
        rows = tied.nonzero(as_tuple=True)[0]
        sub = block[rows]
        before = torch.arange(num_gallery, device=device)[None, :] < best_index[rows, None]
        ranks[rows] += ((sub == best[rows, None]) & before).sum(dim=1)
    has_positive = best_index < num_gallery
    return torch.where(has_positive, ranks, torch.zeros_like(ranks))


def precision_at_r_block(top_relevant: Tensor, num_positives: Tensor) -> tuple[Tensor, Tensor]:
    """R-Precision and MAP@R per query from the relevance of the ordered top list.

    Args:
        top_relevant: bool ``[b, k]``, whether the item at rank r (best first) is a positive,
            with ``k >= min(R, G)`` for every row.
        num_positives: ``R`` per query ``[b]`` (>= 1); may exceed the positives present in the
            gallery (eccv-caption convention), then unreachable positives still count in R.

    Returns float64 ``[b]`` each: ``R-P = |top-R ∩ P| / R`` and
    ``MAP@R = (1/R) sum_{r<=R} P@r rel(r)`` (Musgrave et al. 2020, §3.2; docs/metrics.md).
    """
    k = top_relevant.shape[1]
    positions = torch.arange(1, k + 1, device=top_relevant.device)  # [k]
    hits = top_relevant & (positions[None, :] <= num_positives[:, None])  # [b, k]
    hits_f = hits.to(torch.float64)
    cumulative = hits_f.cumsum(dim=1)
    r_float = num_positives.to(torch.float64)
    r_precision = hits_f.sum(dim=1) / r_float
    map_at_r = (cumulative / positions.to(torch.float64) * hits_f).sum(dim=1) / r_float
    return r_precision, map_at_r
