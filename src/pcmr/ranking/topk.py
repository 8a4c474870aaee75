"""The one top-k of pcmr under the tie rule, used by the metrics' top lists and every re-ranker
(the metrics then take expectations over the orders of tied scores, ``pcmr.metrics.ties``).

Tie rule: within a row, gallery items are ordered by score, highest first, and among equal scores
the lower gallery index ranks first -- the order of a stable descending sort, so
``torch.sort(row, descending=True, stable=True)`` is the reference. (Greedy matching extends it to
the entries of a whole matrix: score, then row index, then column index.) ``torch.topk`` neither
selects nor orders ties by index; the functions here do, without sorting whole rows.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pcmr.ranking import blocks

#: A top-k of at least ``G / WHOLE_SORT_FRACTION`` items is read off one stable sort of the whole row:
#: ``topk`` of most of a row costs more than sorting it (PMRP's and R-Precision's lists under a
#: generous relation hold a large part of the gallery).
WHOLE_SORT_FRACTION = 2


def sort_row_segments(values: Tensor, cols: Tensor, *, skip_neg_inf: bool = False) -> tuple[Tensor, Tensor]:
    """Order each row of ``[R, c]`` (values sorted descending, e.g. from ``topk``; their column ids)
    so that equal values are in ascending column order. Only rows holding equal neighbours are re-sorted.

    ``skip_neg_inf``: ``-inf`` marks unused slots (their order does not matter).
    """
    equal = values[:, 1:] == values[:, :-1]
    if skip_neg_inf:
        equal &= values[:, 1:] > float("-inf")
    tied = equal.any(dim=1).nonzero().squeeze(1)  # [T]
    if tied.numel() == 0:
        return values, cols
    tied_values, tied_cols = values.index_select(0, tied), cols.index_select(0, tied)
    by_col = tied_cols.sort(dim=1).indices  # [T, c]
    tied_values, tied_cols = tied_values.gather(1, by_col), tied_cols.gather(1, by_col)
    by_value = torch.sort(tied_values, dim=1, descending=True, stable=True).indices  # ties keep column order
    values, cols = values.clone(), cols.clone()
    values[tied] = tied_values.gather(1, by_value)
    cols[tied] = tied_cols.gather(1, by_value)
    return values, cols


def _topk_across_tie(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Top-k of rows whose k-th and (k+1)-th values tie: the cut takes the tied items of lower index."""
    num_rows = scores.shape[0]
    cut = scores.topk(k, dim=1, sorted=True).values[:, k - 1 : k]  # [R, 1], the k-th largest value
    above = scores > cut  # [R, G], fewer than k per row
    at_cut = scores == cut  # [R, G]
    missing = k - above.sum(dim=1, keepdim=True)  # [R, 1], >= 1
    rank_at_cut = at_cut.to(torch.int32).cumsum(dim=1, dtype=torch.int32)  # [R, G]
    take = above | (at_cut & (rank_at_cut <= missing))  # exactly k per row
    cols = take.nonzero(as_tuple=True)[1].view(num_rows, k)  # [R, k], ascending within a row
    values = scores.gather(1, cols)
    by_value = torch.sort(values, dim=1, descending=True, stable=True).indices  # equal values keep column order
    return values.gather(1, by_value), cols.gather(1, by_value)


def ordered_topk_block(block: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """Top-k of each row of ``block [R, G]`` under the tie rule, without blocking.

    ``k`` is clamped to ``[0, G]``. Returns values and gallery indices (LongTensor), each ``[R, k]``,
    best first. Rows whose (k+1)-th value equals the k-th (a tie across the cut) are recomputed
    exactly; rows with ties inside the top k are re-sorted by index.
    """
    num_rows, num_cols = block.shape
    k = min(int(k), num_cols)
    if k <= 0:
        return block.new_empty(num_rows, 0), torch.empty(num_rows, 0, dtype=torch.long, device=block.device)
    if WHOLE_SORT_FRACTION * k >= num_cols:  # most of the row: one stable sort is the cheaper (and the reference)
        values, cols = torch.sort(block, dim=1, descending=True, stable=True)
        return values[:, :k], cols[:, :k]
    width = min(k + 1, num_cols)
    top_values, top_cols = block.topk(width, dim=1, sorted=True)  # [R, width]
    values, cols = sort_row_segments(top_values[:, :k], top_cols[:, :k])  # [R, k]
    if width > k:  # rows where the (k+1)-th value ties the k-th: the set itself depends on the tie rule
        tied = (top_values[:, k - 1] == top_values[:, k]).nonzero().squeeze(1)
        if tied.numel():
            values, cols = values.clone(), cols.clone()
            values[tied], cols[tied] = _topk_across_tie(block.index_select(0, tied), k)
    return values, cols


def ordered_topk(scores: Tensor, k: int) -> Tensor:
    """Gallery indices of the top-k of each row of ``scores [Q, G]`` under the tie rule, ``[Q, k]``.

    Nearest-neighbour search (NNS) with pcmr's tie rule, blocked over rows (``pcmr.ranking.blocks``).
    """
    num_rows, num_cols = scores.shape
    k = min(int(k), num_cols)
    out = torch.empty(num_rows, max(k, 0), dtype=torch.long, device=scores.device)  # [Q, k]
    step = blocks.block_rows(num_cols)
    for start in range(0, num_rows, step):
        out[start : start + step] = ordered_topk_block(scores[start : start + step], k)[1]
    return out
