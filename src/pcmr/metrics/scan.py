"""One blocked pass over a score matrix that serves several relevance relations at once.

A pass reads each block of query rows once and, for every *target* (a relevance relation with
its options), computes the rank of the best positive, R-Precision and MAP@R, and optionally the
k-occurrence counts N_k used by hubness. The ordered top list of each block is computed once
with the width the targets need. Works on a transposed view too (text->image on ``S.T``), one
block copy at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from pcmr.metrics._relevance import SparseRelevance
from pcmr.metrics.block_ranks import best_positives, first_positive_ranks_block, precision_at_r_block
from pcmr.ranking import fused_scan
from pcmr.ranking.blocks import block_rows, query_blocks, width_blocks
from pcmr.ranking.topk import ordered_topk_block

# Sort queries by the top-list width they need when the widest exceeds this (PMRP-like R).
_SORT_WIDTH = 64


@dataclass(frozen=True)
class Target:
    """A relevance relation evaluated during a pass.

    relevant: CSR relation ``[Q, G]`` on the scores' device. num_missing: ``[Q]`` positives outside
    the gallery (they count in R, eccv-caption convention) or None. exact_ranks: count the exact
    rank of the best positive (needed for median/mean rank); otherwise it is read from the top
    list and known only up to ``rank_limit``. precision: compute R-Precision and MAP@R.
    rank_limit: the largest K of R@K needed when ranks are not exact.
    """

    relevant: SparseRelevance
    num_missing: Tensor | None = None
    exact_ranks: bool = True
    precision: bool = True
    rank_limit: int = 0

    def num_positives(self) -> Tensor:
        counts = self.relevant.counts()
        return counts if self.num_missing is None else counts + self.num_missing


@dataclass(frozen=True)
class PerQueryMetrics:
    """Per-query results of one target (all ``[Q]``).

    ranks: 1-based rank of the best-ranked positive; 0 if no positive is in the gallery; when
    not exact (``rank_limit`` set) a rank above the limit is stored as ``rank_limit + 1``.
    num_positives: R (0: query skipped). r_precision / map_at_r: in [0, 1], NaN where not computed.
    """

    ranks: Tensor
    num_positives: Tensor
    r_precision: Tensor
    map_at_r: Tensor
    rank_limit: int | None = None

    @property
    def valid(self) -> Tensor:
        """Queries with at least one positive, bool ``[Q]``."""
        return self.num_positives > 0


@dataclass(frozen=True)
class ScanResult:
    per_query: list[PerQueryMetrics]
    k_occurrence: dict[int, Tensor]  # k -> N_k [G]


def _needed_width(target: Target, num_positives: Tensor, num_gallery: int) -> Tensor:
    """Top-list width each query needs for this target, ``[Q]``."""
    width = torch.zeros_like(num_positives)
    if target.precision:
        width = torch.maximum(width, num_positives)
    if not target.exact_ranks:
        width = torch.where(num_positives > 0, width.clamp(min=target.rank_limit), width)
    return width.clamp(max=num_gallery)


def _fused_block(scores: Tensor, query_ids: Tensor, width: int, targets: list[Target]) -> tuple[Tensor, Tensor]:
    """Compiled pass over the queries ``query_ids [b]``: top list ``[b, width]``, ranks ``[b, T]``."""
    num_gallery = scores.shape[1]
    thresholds, indices = [], []
    for target in targets:
        row, col = target.relevant.select(query_ids)
        best, best_index = best_positives(scores[query_ids[row], col], row, col, query_ids.numel(), num_gallery)
        has = best_index < num_gallery
        thresholds.append(torch.where(has, best, torch.full_like(best, float("inf"))))
        indices.append(torch.where(has, best_index, torch.full_like(best_index, -1)))
    num = query_ids.numel()
    thr = torch.stack(thresholds, 1) if targets else scores.new_zeros(num, 0)
    idx = torch.stack(indices, 1) if targets else torch.zeros(num, 0, dtype=torch.long)
    top, counts = fused_scan.fused_scan(scores, query_ids, width, thr, idx)
    return top, torch.where(idx >= 0, counts + 1, torch.zeros_like(counts))


def scan(scores: Tensor, targets: Sequence[Target], *, hubness_ks: Sequence[int] = (),
         block_size: int | None = None, use_kernel: bool = True) -> ScanResult:
    """Evaluate every target (and N_k for each k in ``hubness_ks``) in one pass over ``scores [Q, G]``.

    ``scores`` is assumed checked (finite-or-inf floats, 2-D); it may be a transposed view. On CPU
    with numba installed (and ``use_kernel``) the top list and exact ranks come from one compiled
    pass (``pcmr.ranking.fused_scan``); otherwise from torch ``topk`` and counting passes. Both give the same values.
    """
    num_queries, num_gallery = scores.shape
    device = scores.device
    positives = [t.num_positives() for t in targets]
    widths = torch.zeros(num_queries, dtype=torch.long, device=device)
    for target, count in zip(targets, positives):
        widths = torch.maximum(widths, _needed_width(target, count, num_gallery))
    hub_width = min(max(hubness_ks, default=0), num_gallery)
    widths = widths.clamp(min=hub_width)
    order = None
    if num_queries and int(widths.max()) > _SORT_WIDTH:
        order = torch.sort(widths, stable=True).indices
    ranks = [torch.zeros(num_queries, dtype=torch.long, device=device) for _ in targets]
    r_precision = [torch.full((num_queries,), float("nan"), dtype=torch.float64, device=device) for _ in targets]
    map_at_r = [torch.full_like(r, float("nan")) for r in r_precision]
    k_occurrence = {int(k): torch.zeros(num_gallery, dtype=torch.long, device=device) for k in hubness_ks}
    fused = use_kernel and fused_scan.usable(scores)
    exact = [i for i, t in enumerate(targets) if t.exact_ranks]
    rows = block_rows(num_gallery, block_size)
    blocks = query_blocks(num_queries, rows) if order is None else width_blocks(widths[order], rows)
    for start, stop in blocks:  # sorted by width: blocks of similar widths
        query_ids = torch.arange(start, stop, device=device) if order is None else order[start:stop]
        width = int(widths[query_ids].max())
        top: Tensor | None
        if fused:  # one read of the block's scores for the top list and every exact rank
            top, counts = _fused_block(scores, query_ids, width, [targets[i] for i in exact])
            for column, i in enumerate(exact):
                ranks[i][query_ids] = counts[:, column]
            top = top if width > 0 else None
        else:
            block = scores[start:stop].contiguous() if order is None else scores.index_select(0, query_ids)
            top = ordered_topk_block(block, width)[1] if width > 0 else None  # [b, width]
        for i, target in enumerate(targets):
            count = positives[i][query_ids]  # [b]
            top_relevant = None
            if top is not None and (target.precision or not target.exact_ranks):
                top_relevant = target.relevant.contains(query_ids, top)  # [b, width]
            if target.exact_ranks:
                if not fused:
                    row, col = target.relevant.select(query_ids)
                    ranks[i][query_ids] = first_positive_ranks_block(block, row, col)
            elif top_relevant is not None:
                found = top_relevant.any(dim=1)
                first = top_relevant.to(torch.uint8).argmax(dim=1) + 1
                miss = torch.where(target.relevant.counts()[query_ids] > 0, target.rank_limit + 1, 0)
                ranks[i][query_ids] = torch.where(found, first, miss)
            if target.precision and top_relevant is not None:
                rp, mp = precision_at_r_block(top_relevant, count.clamp(min=1))
                keep = count > 0
                r_precision[i][query_ids[keep]] = rp[keep]
                map_at_r[i][query_ids[keep]] = mp[keep]
        for k, occurrences in k_occurrence.items():
            if top is not None:  # hubness ks make the width >= k > 0, so the top list exists
                occurrences += torch.bincount(top[:, :k].reshape(-1), minlength=num_gallery)
    per_query = [
        PerQueryMetrics(ranks[i], positives[i], r_precision[i], map_at_r[i],
                        None if t.exact_ranks else t.rank_limit)
        for i, t in enumerate(targets)
    ]
    return ScanResult(per_query, k_occurrence)
