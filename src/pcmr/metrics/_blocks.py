"""Blocking over queries and the deterministic top-k order shared by every metric.

Tie rule (used by every metric of ``pcmr.metrics``): gallery items are ordered by score,
highest first; among equal scores the lower gallery index ranks first. This is the order
of a stable descending sort, so ``torch.sort(scores, descending=True, stable=True)`` is the
reference ranking; the functions here reproduce it without sorting whole rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

# Elements of a [block, G] score block handled at once (float32: 32 MiB); bounds memory.
BLOCK_ELEMENTS = 1 << 23


def block_rows(num_gallery: int, block_size: int | None) -> int:
    """Number of query rows per block: ``block_size`` if given, else a memory budget."""
    if block_size is not None:
        if int(block_size) < 1:
            raise ValueError(f"block_size must be a positive number of queries, got {block_size}")
        return int(block_size)
    return max(1, BLOCK_ELEMENTS // max(num_gallery, 1))


def query_blocks(num_queries: int, rows: int) -> Iterator[tuple[int, int]]:
    """Yield ``(start, stop)`` of consecutive query blocks; the last one may be short."""
    for start in range(0, num_queries, rows):
        yield start, min(start + rows, num_queries)


def ordered_topk(block: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Top-k of each row under the tie rule: values and gallery indices ``[b, k]``, best first.

    ``torch.topk`` selects and orders ties arbitrarily; this fixes both: within the selected
    items ties are reordered by index, and rows whose (k+1)-th value equals the k-th (a tie
    across the cut) are re-ranked with a stable full sort (rare with real scores).
    """
    num_gallery = block.shape[1]
    k = min(int(k), num_gallery)
    if k <= 0:
        empty = block.new_empty(block.shape[0], 0)
        return empty, torch.empty(block.shape[0], 0, dtype=torch.long, device=block.device)
    if k < num_gallery:
        # One extra item: if the (k+1)-th ties the k-th, the cut splits a tie (re-sort that row).
        values, indices = block.topk(k + 1, dim=1, largest=True, sorted=True)  # [b, k + 1]
        crossing = values[:, k] == values[:, k - 1]  # [b]
        values, indices = values[:, :k], indices[:, :k]
    else:
        values, indices = block.topk(k, dim=1, largest=True, sorted=True)  # [b, k]
        crossing = torch.zeros(block.shape[0], dtype=torch.bool, device=block.device)
    # Reorder within the top k: by index, then a stable sort by value (descending).
    indices, by_index = indices.sort(dim=1)
    values = values.gather(1, by_index)
    values, by_value = values.sort(dim=1, descending=True, stable=True)
    indices = indices.gather(1, by_value)
    if bool(crossing.any()):
        rows = crossing.nonzero(as_tuple=True)[0]
        full_values, full_indices = block[rows].sort(dim=1, descending=True, stable=True)
        values[rows] = full_values[:, :k]
        indices[rows] = full_indices[:, :k]
    return values, indices


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
    ``MAP@R = (1/R) sum_{r<=R} P@r rel(r)`` (Musgrave et al. 2020, SPEC §6).
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
