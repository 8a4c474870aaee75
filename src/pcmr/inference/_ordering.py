"""The one deterministic order used by every method of ``pcmr.inference``, and input checks.

Global order of the entries of a score matrix ``S [Q, G]``: descending score, then ascending row
index, then ascending column index. Within one row this is "descending score, ties to the lower
gallery index" -- the same tie rule as ``pcmr.metrics``. ``torch.topk`` does not promise any order
among equal values, so the exact top-k under this rule is computed here.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Upper bound on the number of elements of a temporary block (rows x columns) of the fast paths.
BLOCK_ELEMENTS = 1 << 22


def check_score_matrix(scores: Tensor, name: str = "scores") -> Tensor:
    """Check that ``scores`` is a finite floating-point matrix ``[Q, G]`` with Q, G >= 1."""
    if not isinstance(scores, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape [Q, G], got {type(scores).__name__}")
    if scores.dim() != 2:
        raise ValueError(
            f"{name} must be a 2-D tensor [Q, G] (queries x gallery), got shape {tuple(scores.shape)}"
        )
    if not scores.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {scores.dtype}")
    if scores.shape[0] == 0 or scores.shape[1] == 0:
        raise ValueError(
            f"{name} must have at least one query and one gallery item, got shape {tuple(scores.shape)}"
        )
    low, high = torch.aminmax(scores)  # one pass, no temporary; NaN propagates
    if not (bool(torch.isfinite(low)) and bool(torch.isfinite(high))):
        num_nan = int(torch.isnan(scores).sum())
        num_inf = int(torch.isinf(scores).sum())
        raise ValueError(f"{name} must be finite; it holds {num_nan} NaN and {num_inf} infinite value(s)")
    return scores


def check_positive_int(value: int, name: str, upper: int | None = None, upper_name: str = "") -> int:
    """Check ``1 <= value (<= upper)`` for an integer parameter and return it as ``int``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    if upper is not None and value > upper:
        raise ValueError(f"{name} must be <= {upper_name} = {upper}, got {value}")
    return value


def rows_per_block(num_cols: int) -> int:
    """Rows of a ``[rows, num_cols]`` block holding at most ``BLOCK_ELEMENTS`` elements (at least 1)."""
    return max(1, BLOCK_ELEMENTS // max(num_cols, 1))


def sort_row_segments(values: Tensor, cols: Tensor) -> tuple[Tensor, Tensor]:
    """Order each row of ``[R, c]`` (values sorted descending, e.g. from topk; column ids) so that
    equal values are in ascending column order. Only rows holding equal neighbours are re-sorted."""
    equal = (values[:, 1:] == values[:, :-1]) & (values[:, 1:] > float("-inf"))  # -inf marks unused slots
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


def _ordered_topk_with_ties(scores: Tensor, k: int) -> Tensor:
    """``ordered_topk_block`` for rows whose k-th and (k+1)-th values tie (ties resolved by column)."""
    num_rows = scores.shape[0]
    cut = scores.topk(k, dim=1, sorted=True).values[:, k - 1 : k]  # [R, 1], the k-th largest value
    above = scores > cut  # [R, G], fewer than k per row
    at_cut = scores == cut  # [R, G]
    missing = k - above.sum(dim=1, keepdim=True)  # [R, 1], >= 1
    rank_at_cut = at_cut.to(torch.int32).cumsum(dim=1, dtype=torch.int32)  # [R, G]
    take = above | (at_cut & (rank_at_cut <= missing))  # exactly k per row
    cols = take.nonzero(as_tuple=True)[1].view(num_rows, k)  # [R, k], ascending within a row
    by_value = torch.sort(scores.gather(1, cols), dim=1, descending=True, stable=True).indices
    return cols.gather(1, by_value)  # equal values keep the ascending column order


def ordered_topk_block(scores: Tensor, k: int) -> Tensor:
    """Exact top-k column indices of each row under the global order (no blocking).

    Args:
        scores: ``[R, G]`` (may hold ``-inf`` for masked entries), ``1 <= k <= G``.
    Returns:
        LongTensor ``[R, k]``: per row, descending score, ties to the lower column index.
    """
    num_cols = scores.shape[1]
    width = min(k + 1, num_cols)
    top_values, top_cols = scores.topk(width, dim=1, sorted=True)  # [R, width]
    cols = sort_row_segments(top_values[:, :k], top_cols[:, :k])[1]  # [R, k]
    if width > k:  # rows where the (k+1)-th value ties the k-th: the set itself depends on the tie rule
        tied = (top_values[:, k - 1] == top_values[:, k]).nonzero().squeeze(1)
        if tied.numel():
            cols[tied] = _ordered_topk_with_ties(scores.index_select(0, tied), k)
    return cols


def ordered_topk(scores: Tensor, k: int) -> Tensor:
    """Exact per-row top-k of ``scores [Q, G]`` under the global order, blocked over rows.

    This is nearest-neighbour search (NNS) with the library's tie rule. Returns LongTensor ``[Q, k]``.
    """
    num_rows, num_cols = scores.shape
    out = torch.empty(num_rows, k, dtype=torch.long, device=scores.device)  # [Q, k]
    step = rows_per_block(num_cols)
    for start in range(0, num_rows, step):
        out[start : start + step] = ordered_topk_block(scores[start : start + step], k)
    return out
