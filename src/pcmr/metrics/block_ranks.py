"""Per-block rank and precision computations of the metrics (tie rule: ``pcmr.ranking.topk``).

For a block of queries: the best positive of each query and the items scoring above it and tied with
it, counted without sorting (docs/metrics.md; R-Precision / MAP@R and the expectations over tie
orders: ``pcmr.metrics.ties``).
"""

from __future__ import annotations

import torch
from torch import Tensor


def best_positives(positive_scores: Tensor, row: Tensor, col: Tensor, num_rows: int,
                   num_gallery: int) -> tuple[Tensor, Tensor, Tensor]:
    """Score, gallery index and tie count of each query's best positive, ``[b]`` each.

    ``positive_scores [n]`` are the scores of the positives ``(row [n], col [n])``. Returns the best
    positive score, the lowest gallery index among the positives with that score and how many
    positives share it. Queries without positive: ``-inf``, ``num_gallery`` and 0.
    """
    device = positive_scores.device
    best = torch.full((num_rows,), float("-inf"), dtype=positive_scores.dtype, device=device)
    best.scatter_reduce_(0, row, positive_scores, reduce="amax", include_self=True)
    is_best = positive_scores == best[row]
    best_index = torch.full((num_rows,), num_gallery, dtype=torch.long, device=device)
    best_index.scatter_reduce_(0, row[is_best], col[is_best], reduce="amin", include_self=True)
    tied = torch.bincount(row[is_best], minlength=num_rows)[:num_rows]
    return best, best_index, tied


def first_positive_ranks_block(block: Tensor, row: Tensor, col: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Where each query's best positive stands, ``(higher, ties, tied_positives)``, each ``[b]``.

    ``row``/``col`` [n] list the positives (query row within the block, gallery index). ``higher``
    counts the items scoring strictly above the best positive score ``s*``, ``ties`` those scoring
    exactly ``s*`` and ``tied_positives`` the positives among them (all 0 for a query without a
    positive). Rank metrics take the expectation over the orders of the tie group
    (``pcmr.metrics.ties``); no sort is needed.
    """
    num_rows, num_gallery = block.shape
    best, best_index, tied_positives = best_positives(block[row, col], row, col, num_rows, num_gallery)
    threshold = best[:, None]
    higher = (block > threshold).sum(dim=1, dtype=torch.int32).long()  # [b]
    ties = (block == threshold).sum(dim=1, dtype=torch.int32).long()  # [b]
    has_positive = best_index < num_gallery
    zero = torch.zeros_like(higher)
    return torch.where(has_positive, higher, zero), torch.where(has_positive, ties, zero), tied_positives
