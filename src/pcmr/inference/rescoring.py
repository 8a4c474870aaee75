"""Soft hub-aware re-weighting of a score matrix: inverted softmax and CSLS (HAL/RGM §3.3.1-3.3.2, eqs. 5-6).

Both take one direction's score matrix ``S [Q, G]`` (queries x gallery, higher = better) and return a
re-weighted ``[Q, G]`` matrix of the same dtype and device. They read ``S`` in blocks of rows, so
their temporaries stay bounded (a few blocks of ``pcmr.ranking.BLOCK_ELEMENTS``) next to the output
itself. Formulas and conventions: docs/inference.md.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pcmr.ranking.blocks import block_rows
from pcmr.ranking.checks import check_positive_int, check_scores

#: the inverse temperature of the inverted softmax (HAL/RGM's value)
IS_BETA = 30.0
#: the neighbourhood of CSLS (HAL/RGM's value)
CSLS_K = 10


def inverted_softmax(scores: Tensor, beta: float = IS_BETA) -> Tensor:
    """Inverted softmax, HAL/RGM eq. 5 (Smith et al., 2017), in log space.

    ``IS[q, g] = beta * S[q, g] - log sum_{q' != q} exp(beta * S[q', g])``, the log of eq. 5: each
    gallery item's score is normalised over the *other* queries, so items close to many queries (hubs)
    are scaled down. The ranking equals that of eq. 5 (log is monotone).

    The normaliser excluding one term is computed stably without a ``[Q, Q, G]`` tensor: per column,
    ``L = logsumexp_q beta*S`` and, for a query that does not hold the column maximum,
    ``L + log1p(-exp(beta*S[q,g] - L))`` (that ratio is <= 1/2, so no cancellation); for the query
    holding the maximum, the log-sum-exp of the other entries, accumulated separately.

    Args:
        scores: ``[Q, G]`` finite, ``Q >= 2`` (the normaliser excludes the query itself).
        beta: inverse temperature ``> 0`` (paper: 30).
    Returns:
        ``[Q, G]`` log inverted-softmax scores, dtype and device of ``scores``.
    """
    check_scores(scores, finite=True)
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
        raise ValueError(f"beta must be a finite number > 0 (inverse temperature), got {beta!r}")
    num_rows, num_cols = scores.shape
    if num_rows < 2:
        raise ValueError(
            f"inverted_softmax needs at least 2 queries (rows of scores): the normaliser of query q sums over "
            f"the other queries; got shape {tuple(scores.shape)}"
        )
    step = block_rows(num_cols)
    columns = torch.arange(num_cols, device=scores.device)  # [G]
    # pass 1, online over blocks of rows, per column g: the maximum of beta * S and the (first) row
    # holding it; the largest of the *other* entries, and the sum over the other entries of
    # exp(entry - reference), reference = that largest other (0 while there is none), so no term
    # underflows however far the maximum stands above the rest
    neg_inf = torch.tensor(float("-inf"), dtype=scores.dtype, device=scores.device)
    best = torch.full((num_cols,), float("-inf"), dtype=scores.dtype, device=scores.device)  # [G]
    best_row = torch.zeros(num_cols, dtype=torch.long, device=scores.device)  # [G]
    second = best.clone()  # [G], largest entry off the maximum's row
    reference = torch.zeros_like(best)  # [G]
    others_sum = torch.zeros_like(best)  # [G], sum over the others of exp(entry - reference)
    for start in range(0, num_rows, step):
        block = scores[start : start + step] * beta  # [R, G]
        block_best, block_row = block.max(dim=0)  # [G]
        block[block_row, columns] = neg_inf
        block_second = block.amax(dim=0)  # [G], -inf for a block of one row
        is_new = block_best > best  # [G]
        displaced = torch.where(is_new, best, block_best)  # the maximum that is not the overall one
        second = torch.maximum(
            torch.maximum(second, displaced), torch.where(is_new, block_second, block_best)
        )
        new_reference = torch.where(torch.isinf(second), torch.zeros_like(second), second)
        scale = torch.where(
            others_sum > 0, torch.exp(reference - new_reference), torch.zeros_like(others_sum)
        )
        others_sum = others_sum * scale + torch.exp(displaced - new_reference)
        others_sum += block.sub_(new_reference).exp_().sum(dim=0)  # every remaining entry is an other, <= 1
        reference = new_reference
        best = torch.where(is_new, block_best, best)
        best_row = torch.where(is_new, block_row + start, best_row)
    rest = reference + torch.log(others_sum)  # [G], log-normaliser of the row holding the maximum
    total = torch.logaddexp(best, rest)  # [G], logsumexp over all rows
    # pass 2: t = beta * S - total <= -log 2 off the maximum; IS = t - log1p(-exp(t)), no cancellation
    out = torch.empty_like(scores)  # [Q, G]
    neg_total = -total.unsqueeze(0)  # [1, G]
    for start in range(0, num_rows, step):
        block = out[start : start + step]
        torch.add(neg_total, scores[start : start + step], alpha=beta, out=block)  # t
        block.sub_(torch.exp(block).neg_().log1p_())
    # the row holding a column's maximum reads its own normaliser; where the maximum is tied, the general
    # formula is as exact and keeps tied entries bit-equal (a tie must not become an order)
    alone = second < best  # [G]
    rows, cols = best_row[alone], columns[alone]
    out[rows, cols] = beta * scores[rows, cols] - rest[alone]
    return out


def _mean_of_sorted(top: Tensor, valid: Tensor | None = None) -> Tensor:
    """Mean of each row of ``top [N, k]`` (sorted the same way in every row), summed column by column in
    a fixed order: rows holding the same values get bit-identical means. A reduction kernel may
    accumulate some rows (or columns, along ``dim=0``) in another order than others, and the last-bit
    differences it leaves would turn a tie into an order -- a constant score would rank by position.
    ``valid [N, k]`` (optional) marks the entries counted; the others add nothing."""
    if valid is not None:
        top = top.where(valid, torch.zeros((), dtype=top.dtype, device=top.device))
    total = top[:, 0].clone()
    for j in range(1, top.shape[1]):
        total += top[:, j]
    count = top.new_full((top.shape[0],), float(top.shape[1])) if valid is None else valid.sum(1).clamp_min(1)
    return total / count


def csls_statistics(scores: Tensor, k: int = CSLS_K) -> tuple[Tensor, Tensor]:
    """The two neighbourhood means of CSLS (HAL/RGM eq. 6): ``r_G [Q]`` and ``r_Q [G]``.

    ``r_G(q)``: mean of the k largest scores of row q (the query's k nearest gallery items);
    ``r_Q(g)``: mean of the k largest scores of column g (the gallery item's k nearest queries).
    Read in blocks of rows; ``scores [Q, G]`` finite, ``1 <= k <= min(Q, G)``.
    """
    check_scores(scores, finite=True)
    num_rows, num_cols = scores.shape
    check_positive_int(k, "k", min(num_rows, num_cols), "min(Q, G) (queries, gallery items of scores)")
    step = block_rows(num_cols)
    row_mean = torch.empty(num_rows, dtype=scores.dtype, device=scores.device)  # [Q], r_G
    for start in range(0, num_rows, step):
        row_mean[start : start + step] = _mean_of_sorted(scores[start : start + step].topk(k, dim=1).values)
    return row_mean, csls_gallery_statistic(scores, k)


def csls_from_statistics(scores: Tensor, row_mean: Tensor, col_mean: Tensor) -> Tensor:
    """``2 S - r_G[:, None] - r_Q`` (HAL/RGM eq. 6) for scores ``S [Q, C]``, ``r_G [Q]`` and the gallery
    term ``r_Q`` broadcastable to ``[Q, C]`` (``[C]`` for a whole gallery, ``[Q, C]`` gathered for
    candidate lists). The one place the CSLS formula is written."""
    return 2 * scores - row_mean.unsqueeze(1) - col_mean


def row_top_mean(scores: Tensor, k: int) -> Tensor:
    """``r_G [Q]``: the mean of the ``k`` largest finite entries of each row of ``scores [Q, C]``
    (``-inf`` marks an unfilled candidate slot and is skipped)."""
    top = scores.topk(min(k, scores.shape[1]), dim=1).values  # [Q, k], descending
    return _mean_of_sorted(top, torch.isfinite(top))


def inverted_softmax_gallery_statistic(scores: Tensor, beta: float = IS_BETA) -> Tensor:
    """``L [G]``, ``L(g) = log sum_q exp(beta S[q, g])`` over the reference queries (rows) of
    ``scores [R, G]``: the normaliser of HAL/RGM eq. 5 for a new query outside the reference set, whose
    inverted-softmax score is then ``beta S[q, g] - L(g)``. Read in blocks of rows."""
    check_scores(scores, finite=True)
    total = torch.full((scores.shape[1],), float("-inf"), dtype=scores.dtype, device=scores.device)
    step = block_rows(scores.shape[1])
    for start in range(0, scores.shape[0], step):
        block = torch.logsumexp(scores[start : start + step] * beta, dim=0)
        total = torch.logaddexp(total, block)
    return total


def csls_gallery_statistic(scores: Tensor, k: int = CSLS_K) -> Tensor:
    """``r_Q [G]`` of CSLS: the mean similarity of each gallery item to its k nearest queries.

    The hub penalty of HAL/RGM eq. 6. A gallery index stores it once (computed from a reference
    query set) and re-scores a later query's scores as ``2 S - r_G(q) - r_Q``. Read in blocks of
    rows; ``scores [Q, G]`` finite, ``1 <= k <= Q`` (any number of columns).
    """
    check_scores(scores, finite=True)
    num_rows, num_cols = scores.shape
    check_positive_int(k, "k", num_rows, "Q (the reference queries, rows of scores)")
    step = block_rows(num_cols)
    col_top = scores[:0]  # [k, G] once filled: running k largest scores of each column
    for start in range(0, num_rows, step):
        merged = torch.cat([col_top, scores[start : start + step]], dim=0)  # [k + R, G]
        col_top = merged.topk(min(k, merged.shape[0]), dim=0, sorted=False).values
    return _mean_of_sorted(col_top.t().sort(dim=1, descending=True).values)


def csls(scores: Tensor, k: int = CSLS_K) -> Tensor:
    """Cross-domain similarity local scaling, HAL/RGM eq. 6 (Lample et al., 2018; MUSE).

    ``CSLS[q, g] = 2 S[q, g] - r_G(q) - r_Q(g)`` with ``r_G(q)`` the mean of the k largest scores of
    row q (the query's neighbourhood in the gallery) and ``r_Q(g)`` the mean of the k largest scores of
    column g (the gallery item's neighbourhood among the queries; ``csls_gallery_statistic``). ``r_Q``
    penalises hubs; ``r_G`` does not change a row's ranking but matters when a global order is used
    afterwards (CSLS+RGM).

    Args:
        scores: ``[Q, G]`` finite. k: neighbourhood size, ``1 <= k <= min(Q, G)`` (paper: 10).
    Returns:
        ``[Q, G]`` CSLS scores, dtype and device of ``scores``.
    """
    row_mean, col_mean = csls_statistics(scores, k)  # [Q], [G]
    num_rows, num_cols = scores.shape
    step = block_rows(num_cols)
    out = torch.empty_like(scores)  # [Q, G]
    for start in range(0, num_rows, step):
        out[start : start + step] = csls_from_statistics(scores[start : start + step],
                                                         row_mean[start : start + step], col_mean)
    return out
