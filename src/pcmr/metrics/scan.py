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
from pcmr.metrics.block_ranks import best_positives, first_positive_ranks_block
from pcmr.metrics.ties import expected_precision_at_r, expected_rank, first_group_with, hit_probability
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

    ranks: 1-based rank of the best positive counting only the items that score strictly higher (its
    best possible rank); 0 if no positive is in the gallery; when not exact (``rank_limit`` set) a rank
    above the limit is stored as ``rank_limit + 1``. ties / tied_positives: the items scoring exactly
    as the best positive (itself included) and the positives among them (None: no tie anywhere).
    R@K and the mean rank are expectations over the orders of that group (:meth:`hit_probability`,
    :meth:`expected_ranks`; ``pcmr.metrics.ties``). num_positives: R (0: query skipped).
    r_precision / map_at_r: in [0, 1] (expected over tie orders), NaN where not computed.
    """

    ranks: Tensor
    num_positives: Tensor
    r_precision: Tensor
    map_at_r: Tensor
    rank_limit: int | None = None
    ties: Tensor | None = None
    tied_positives: Tensor | None = None

    @property
    def valid(self) -> Tensor:
        """Queries with at least one positive, bool ``[Q]``."""
        return self.num_positives > 0

    def _groups(self) -> tuple[Tensor, Tensor]:
        ones = torch.ones_like(self.ranks)
        ties = ones if self.ties is None else self.ties.clamp(min=1)
        tied = ones if self.tied_positives is None else self.tied_positives.clamp(min=1)
        return ties, tied

    def hit_probability(self, k: int) -> Tensor:
        """Probability that a positive is within the top ``k``, float64 ``[Q]`` (0 for rank 0)."""
        ties, tied = self._groups()
        hit = hit_probability((self.ranks - 1).clamp(min=0), ties, tied, k)
        return torch.where(self.ranks > 0, hit, torch.zeros_like(hit))

    def expected_ranks(self) -> Tensor:
        """Expected 1-based rank of the first positive, float64 ``[Q]`` (``inf`` for rank 0)."""
        ties, tied = self._groups()
        rank = expected_rank((self.ranks - 1).clamp(min=0), ties, tied)
        return torch.where(self.ranks > 0, rank, torch.full_like(rank, float("inf")))


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


def _fused_block(scores: Tensor, query_ids: Tensor, width: int, targets: list[Target]
                 ) -> tuple[Tensor, Tensor, list[tuple[Tensor, Tensor, Tensor]]]:
    """Compiled pass over the queries ``query_ids [b]``: top list and its scores ``[b, width]``, and per
    target ``(higher, ties, tied_positives)`` of the best positive ``[b]`` (as ``first_positive_ranks_block``)."""
    num_gallery = scores.shape[1]
    thresholds, has, tied = [], [], []
    for target in targets:
        row, col = target.relevant.select(query_ids)
        best, best_index, tied_positives = best_positives(scores[query_ids[row], col], row, col, query_ids.numel(),
                                                          num_gallery)
        has.append(best_index < num_gallery)
        thresholds.append(torch.where(has[-1], best, torch.full_like(best, float("inf"))))
        tied.append(tied_positives)
    num = query_ids.numel()
    thr = torch.stack(thresholds, 1) if targets else scores.new_zeros(num, 0)
    top, values, above, equal = fused_scan.fused_scan(scores, query_ids, width, thr)
    counts = []
    for column, present in enumerate(has):
        zero = torch.zeros_like(above[:, column])
        counts.append((torch.where(present, above[:, column], zero), torch.where(present, equal[:, column], zero),
                       tied[column]))
    return top, values, counts


def _last_group_totals(scores: Tensor, query_ids: Tensor, values: Tensor, needed: Tensor,
                       targets: Sequence[Target]) -> list[tuple[Tensor, Tensor] | None]:
    """Per target, ``(items, positives)`` ``[b]`` of the whole row scoring as the last listed item, for the
    rows whose last listed tie group reaches into the positions they need (``-1`` elsewhere); None when no
    row needs it. A list that stops inside a tie group holds an arbitrary part of it."""
    num, width = values.shape
    if width == 0 or width >= scores.shape[1]:
        return [None for _ in targets]
    rows = torch.arange(num, device=values.device)
    reach = needed.clamp(min=1, max=width) - 1
    open_rows = ((values[rows, reach] == values[:, -1]) & (needed > 0)).nonzero(as_tuple=True)[0]
    if open_rows.numel() == 0:
        return [None for _ in targets]
    ids = query_ids[open_rows]
    level = values[open_rows, -1]
    items = (scores.index_select(0, ids) == level[:, None]).sum(1)
    out: list[tuple[Tensor, Tensor] | None] = []
    for target in targets:
        row, col = target.relevant.select(ids)
        same = scores[ids[row], col] == level[row]
        positives = torch.bincount(row[same], minlength=ids.numel())[: ids.numel()]
        full_items = torch.full((num,), -1, dtype=torch.long, device=values.device)
        full_positives = torch.full_like(full_items, -1)
        full_items[open_rows], full_positives[open_rows] = items, positives
        out.append((full_items, full_positives))
    return out


def scan(scores: Tensor, targets: Sequence[Target], *, hubness_ks: Sequence[int] = (),
         block_size: int | None = None, use_kernel: bool = True) -> ScanResult:
    """Evaluate every target (and N_k for each k in ``hubness_ks``) in one pass over ``scores [Q, G]``.

    ``scores`` is assumed checked (finite-or-inf floats, 2-D); it may be a transposed view. On CPU
    with numba installed (and ``use_kernel``) the top list and the tie counts of the best positives come
    from one compiled pass (``pcmr.ranking.fused_scan``); otherwise from torch ``topk`` and counting
    passes. Both give the same values. Ranks, R-Precision and MAP@R are expectations over the orders
    of tied scores (``pcmr.metrics.ties``); N_k counts the top-k lists under the tie rule.
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
    ties = [torch.ones(num_queries, dtype=torch.long, device=device) for _ in targets]
    tied_positives = [torch.ones(num_queries, dtype=torch.long, device=device) for _ in targets]
    r_precision = [torch.full((num_queries,), float("nan"), dtype=torch.float64, device=device) for _ in targets]
    map_at_r = [torch.full_like(r, float("nan")) for r in r_precision]
    k_occurrence = {int(k): torch.zeros(num_gallery, dtype=torch.long, device=device) for k in hubness_ks}
    fused = use_kernel and fused_scan.usable(scores)
    exact = [i for i, t in enumerate(targets) if t.exact_ranks]
    rows = block_rows(num_gallery, block_size)
    blocks = query_blocks(num_queries, rows) if order is None else width_blocks(widths[order], rows)
    for start, stop in blocks:  # sorted by width: blocks of similar widths
        query_ids = torch.arange(start, stop, device=device) if order is None else order[start:stop]
        needed = widths[query_ids]
        width = int(needed.max())
        width = min(width + 1, num_gallery) if width > 0 else 0  # one more: a tie across the cut shows
        top: Tensor | None
        values: Tensor | None
        if fused:  # one read of the block's scores for the top list and every exact rank
            top, values, counts = _fused_block(scores, query_ids, width, [targets[i] for i in exact])
            for (higher, tie_count, tied), i in zip(counts, exact):
                ranks[i][query_ids] = torch.where(tie_count > 0, higher + 1, torch.zeros_like(higher))
                ties[i][query_ids], tied_positives[i][query_ids] = tie_count, tied
            top, values = (top, values) if width > 0 else (None, None)
        else:
            block = scores[start:stop].contiguous() if order is None else scores.index_select(0, query_ids)
            values, top = None, None
            if width > 0:
                values, top = ordered_topk_block(block, width)  # [b, width]
        last = (_last_group_totals(scores, query_ids, values, needed, targets) if values is not None
                else [None for _ in targets])
        for i, target in enumerate(targets):
            count = positives[i][query_ids]  # [b]
            top_relevant = None
            if top is not None and (target.precision or not target.exact_ranks):
                top_relevant = target.relevant.contains(query_ids, top)  # [b, width]
            totals = last[i]
            last_items, last_positives = (None, None) if totals is None else totals
            if target.exact_ranks:
                if not fused:
                    row, col = target.relevant.select(query_ids)
                    higher, tie_count, tied = first_positive_ranks_block(block, row, col)
                    ranks[i][query_ids] = torch.where(tie_count > 0, higher + 1, torch.zeros_like(higher))
                    ties[i][query_ids], tied_positives[i][query_ids] = tie_count, tied
            elif top_relevant is not None and values is not None:
                found, higher, tie_count, tied = first_group_with(values, top_relevant, last_items, last_positives)
                miss = torch.where(target.relevant.counts()[query_ids] > 0, target.rank_limit + 1, 0)
                ranks[i][query_ids] = torch.where(found, (higher + 1).clamp(max=target.rank_limit + 1), miss)
                ties[i][query_ids] = torch.where(found, tie_count, torch.ones_like(tie_count))
                tied_positives[i][query_ids] = torch.where(found, tied, torch.ones_like(tied))
            if target.precision and top_relevant is not None and values is not None:
                rp, mp = expected_precision_at_r(values, top_relevant, count.clamp(min=1), last_items,
                                                 last_positives)
                keep = count > 0
                r_precision[i][query_ids[keep]] = rp[keep]
                map_at_r[i][query_ids[keep]] = mp[keep]
        for k, occurrences in k_occurrence.items():
            if top is not None:  # hubness ks make the width >= k > 0, so the top list exists
                occurrences += torch.bincount(top[:, :k].reshape(-1), minlength=num_gallery)
    per_query = [
        PerQueryMetrics(ranks[i], positives[i], r_precision[i], map_at_r[i],
                        None if t.exact_ranks else t.rank_limit, ties[i], tied_positives[i])
        for i, t in enumerate(targets)
    ]
    return ScanResult(per_query, k_occurrence)
