"""Recall@K from ranked lists (for re-rankers that return top-k index lists instead of scores)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from pcmr.metrics._relevance import RelevanceInput, SparseRelevance, as_sparse
from pcmr.relevance import Relevance


def recall_at_k_from_topk(topk: Tensor, relevant: RelevanceInput | SparseRelevance, k: int | None = None) -> float:
    """Recall@K (percent) from ranked lists: a query is a hit if a positive is among its first k items.

    R@K as in docs/metrics.md. Args:
        topk: LongTensor ``[Q, k_list]``, row q = gallery indices ranked best first.
        relevant: dense BoolTensor ``[Q, G]``, a list of Q lists of positive gallery indices or a
            :class:`pcmr.relevance.Relevance`.
            With a list, G is taken as ``max(topk.max(), max positive) + 1``.
        k: how many leading items to look at (default: all ``k_list`` columns); must be <= ``k_list``.

    Returns the percentage of queries (those with at least one positive) that have a positive in
    their first k items; NaN if no query has a positive.
    """
    if not isinstance(topk, Tensor) or topk.dim() != 2:
        shape = tuple(topk.shape) if isinstance(topk, Tensor) else type(topk).__name__
        raise ValueError(f"topk must be a 2-D LongTensor [Q, k] of gallery indices, got {shape}")
    if topk.is_floating_point() or topk.dtype == torch.bool:
        raise ValueError(f"topk must hold integer gallery indices, got dtype {topk.dtype}")
    num_queries, width = topk.shape
    if k is None:
        k = width
    if not 1 <= k <= width:
        raise ValueError(f"k must be in [1, {width}] (the number of listed items), got {k}")
    if isinstance(relevant, Tensor):
        num_gallery = relevant.shape[-1] if relevant.dim() == 2 else -1
    elif isinstance(relevant, SparseRelevance):
        num_gallery = relevant.num_gallery
    elif isinstance(relevant, Relevance):  # image -> caption, or caption -> image when Q = N_cap
        num_gallery = relevant.num_captions if num_queries == relevant.num_images else relevant.num_images
    elif isinstance(relevant, Sequence) and not isinstance(relevant, (str, bytes)):
        largest = max((max(int(i) for i in p) for p in relevant if len(p)), default=-1)
        num_gallery = max(int(topk.max()) if topk.numel() else -1, largest) + 1
    else:
        num_gallery = -1  # as_sparse raises a clear TypeError
    rel = as_sparse(relevant, num_queries, num_gallery, device=topk.device)
    listed = topk[:, :k].long()
    if listed.numel() and (int(listed.min()) < 0 or int(listed.max()) >= num_gallery):
        raise ValueError(f"topk holds indices outside [0, {num_gallery}) (the gallery size of relevant)")
    has_positive = rel.counts() > 0
    if not bool(has_positive.any()):
        return float("nan")
    queries = torch.arange(num_queries, device=topk.device)
    hit = rel.contains(queries, listed).any(dim=1)  # [Q]: membership of the Q x k listed items only
    return 100.0 * float(hit[has_positive].to(torch.float64).mean())
