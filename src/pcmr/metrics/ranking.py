"""Recall@K, ranks of the first positive, R-Precision and MAP@R of one retrieval direction (docs/metrics.md).

Computed over blocks of queries in torch on the device of ``scores`` (see ``pcmr.metrics.scan``):
no full argsort; the rank of the best positive is counted (items scoring strictly higher, and the
items tied with it), and R-Precision / MAP@R only use the ordered top-R of each query. Ties: every
metric is its expected value over the orders of equal scores (``pcmr.metrics.ties``), so the order
in which a dataset stores its items never changes a result.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from pcmr.metrics._relevance import RelevanceInput, SparseRelevance, as_sparse, check_scores
from pcmr.metrics.defaults import DEFAULT_KS
from pcmr.metrics.scan import PerQueryMetrics, Target, scan


def check_ks(ks: Sequence[int], name: str = "ks") -> tuple[int, ...]:
    """Validate cut-offs K: a non-empty sequence of positive integers."""
    ks = tuple(ks)
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
        raise ValueError(f"{name} must be a non-empty sequence of positive integers, got {ks!r}")
    return ks


def _median(values: Tensor) -> float:
    """Median of a 1-D tensor (mean of the two middle values for an even count)."""
    ordered = values.sort().values
    n = ordered.numel()
    return float((ordered[(n - 1) // 2] + ordered[n // 2]) / 2)


def summarize(per_query: PerQueryMetrics, ks: Sequence[int] = DEFAULT_KS, *,
              precision: bool = True) -> dict[str, float]:
    """Average per-query results into a metrics dict (R@K, R-Precision and MAP@R in percent).

    Queries with no positive are skipped and counted in ``num_skipped``. A query whose positives
    all lie outside the gallery counts as a miss (rank infinity). R@K is the expected hit over the
    orders of tied scores; median and mean rank are those of the expected first-positive ranks and
    are given only when the ranks are exact (``per_query.rank_limit is None``).
    """
    limit = per_query.rank_limit
    if limit is not None and max(ks) > limit:
        raise ValueError(f"R@{max(ks)} needs ranks up to {max(ks)}, but these were computed up to {limit}")
    valid = per_query.valid
    num_valid = int(valid.sum())
    nan = float("nan")
    out: dict[str, float] = {}
    for k in ks:
        out[f"R@{k}"] = 100.0 * float(per_query.hit_probability(k)[valid].mean()) if num_valid else nan
    if limit is None:
        rank = per_query.expected_ranks()[valid]
        out["median_rank"] = _median(rank) if num_valid else nan
        out["mean_rank"] = float(rank.mean()) if num_valid else nan
    if precision:
        out["r_precision"] = 100.0 * float(per_query.r_precision[valid].mean()) if num_valid else nan
        out["map_at_r"] = 100.0 * float(per_query.map_at_r[valid].mean()) if num_valid else nan
    out["num_skipped"] = float(valid.numel() - num_valid)
    return out


def per_query_metrics(scores: Tensor, relevant: RelevanceInput | SparseRelevance, *, precision: bool = True,
                      block_size: int | None = None) -> PerQueryMetrics:
    """Per-query rank of the best positive and R-Precision / MAP@R (in [0, 1]), each ``[Q]``.

    ``scores [Q, G]`` (higher = more relevant), ``relevant`` bool ``[Q, G]`` or Q index lists.
    Ranks are 1-based, 0 for queries without a positive.
    """
    scores = check_scores(scores)
    rel = as_sparse(relevant, scores.shape[0], scores.shape[1], device=scores.device)
    return scan(scores, [Target(rel, precision=precision)], block_size=block_size).per_query[0]


def retrieval_metrics(
    scores: Tensor,
    relevant: RelevanceInput | SparseRelevance,
    ks: Sequence[int] = DEFAULT_KS,
    *,
    block_size: int | None = None,
) -> dict[str, float]:
    """R@K, median/mean rank of the first positive, R-Precision and MAP@R of one direction.

    docs/metrics.md; R-Precision and MAP@R as defined by Musgrave et al. (ECCV 2020, "A metric learning
    reality check") and used by PCME §4.1.1.

    Args:
        scores: ``[Q, G]`` query-gallery scores, higher = more relevant; NaN is an error.
        relevant: bool ``[Q, G]`` or a list of Q lists of positive gallery indices.
        ks: cut-offs K of R@K.
        block_size: queries per block (default: a ~32 MiB budget of scores).

    Returns a dict with ``"R@k"`` for each k (percent), ``"median_rank"`` and ``"mean_rank"``
    (1-based rank of the best-ranked positive), ``"r_precision"`` and ``"map_at_r"`` (percent) and
    ``"num_skipped"`` (queries without a positive, left out of every average). Ties: expected values
    over the orders of equal scores.
    """
    ks = check_ks(ks)
    return summarize(per_query_metrics(scores, relevant, block_size=block_size), ks)


def first_positive_ranks(scores: Tensor, relevant: RelevanceInput | SparseRelevance, *,
                         block_size: int | None = None) -> Tensor:
    """1-based rank of each query's best positive counting the items that score strictly higher,
    LongTensor ``[Q]`` (0: no positive); without ties it is the rank. With ties the rank is a random
    variable: ``per_query_metrics(...).expected_ranks()`` gives its expectation."""
    return per_query_metrics(scores, relevant, precision=False, block_size=block_size).ranks
