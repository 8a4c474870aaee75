"""Choosing a re-ranker's tuned parameter (RGM's relaxation factor lambda) on a validation split.

HAL/RGM §4.1: "we use the lambdas that maximize R@K scores on validation set". The score is the sum
of R@K over the chosen ks, each R@K from the matching's run with ``k = K`` (docs/inference.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass

from torch import Tensor

from pcmr.inference.rerankers import DEFAULT_LAMBDA_GRID, Reranker, get_reranker, list_rerankers
from pcmr.metrics._relevance import RelevanceInput, SparseRelevance, as_sparse
from pcmr.metrics.defaults import DEFAULT_KS
from pcmr.metrics.topk import recall_at_k_from_topk

__all__ = ["DEFAULT_LAMBDA_GRID", "LambdaSelection", "select_lambda"]


@dataclass(frozen=True)
class LambdaSelection:
    """Result of ``select_lambda``.

    Attributes:
        best_lam: the lambda with the largest ``sum`` (ties go to the larger lambda, the weaker constraint).
        table: ``{lam: {"R@1": ..., "R@5": ..., "R@10": ..., "sum": ...}}`` in grid order (percent).
        method: the re-ranker evaluated (e.g. ``rgm``, ``csls+rgm``); ks: the K values summed.
    """

    best_lam: float
    table: dict[float, dict[str, float]]
    method: str
    ks: tuple[int, ...]


def select_lambda(
    val_scores: Tensor,
    val_relevant: RelevanceInput | SparseRelevance,
    ks: Iterable[int] = DEFAULT_KS,
    grid: Iterable[float] | None = None,
    *,
    method: str | Reranker = "rgm",
    runs: MutableMapping[tuple[float, int], Tensor] | None = None,
    **params: object,
) -> LambdaSelection:
    """Pick lambda maximising the sum of R@K over ``ks`` on validation scores of one direction.

    Args:
        val_scores: ``[Q, G]`` validation scores of one direction (call again with ``S.T`` for the other).
        val_relevant: dense BoolTensor ``[Q, G]`` or a list of Q lists of positive gallery indices.
        ks: the K of R@K; R@K uses the matching's run with ``k = K``.
        grid: candidate lambdas (> 0, ``inf`` allowed); ``round(lam * K) >= 1`` needed for every K.
            Default: the matching's own ``lambda_grid`` (``DEFAULT_LAMBDA_GRID`` for RGM).
        method: a re-ranker name whose matching has a tuned parameter (``rgm``, ``is+rgm``, ``csls+rgm``,
            ...) or such a ``Reranker``; params: the other parameters (``beta`` / ``csls_k`` / ``backend``).
        runs: the matching's lists ``LongTensor [Q, K]`` by ``(lambda, K)``, read where present and
            filled where missing. The lists do not depend on the relevance, so selecting on the same
            scores with the same re-ranker under another relevance relation (e.g. the exact and the
            source relation of a split) can pass the same mapping and match nothing again.
    Returns:
        ``LambdaSelection`` with the best lambda and the per-lambda table.
    """
    if "lam" in params:
        raise ValueError("select_lambda chooses lam itself; pass the candidates as grid=...")
    if isinstance(method, Reranker):
        reranker = method.with_parameters(**params) if params else method
    else:
        tunable = [name for name in list_rerankers() if get_reranker(name).tuned_parameter is not None]
        if method not in tunable:
            raise ValueError(f"method must be a reranker with lambda ({', '.join(tunable)}), got {method!r}")
        reranker = get_reranker(method, **params)
    tuned = reranker.tuned_parameter
    if tuned is None:
        raise ValueError(f"method {reranker.name!r} has no lambda to select (its matching has no lambda grid)")
    grid = tuple(reranker.lambda_grid if grid is None else grid)
    ks = tuple(ks)
    if not grid:
        raise ValueError("grid must hold at least one lambda")
    for lam in grid:
        if not isinstance(lam, (int, float)) or isinstance(lam, bool) or math.isnan(lam) or lam <= 0:
            raise ValueError(f"every lambda in grid must be a number > 0 (inf allowed), got {lam!r}")
        for k in ks:
            if isinstance(k, int) and k >= 1 and not math.isinf(lam) and round(lam * k) < 1:
                raise ValueError(f"lambda {lam} gives round(lam * k) = 0 uses per gallery item for k = {k}")
    num_queries, num_gallery = val_scores.shape
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"each K in ks must be an int, got {type(k).__name__}")
        if not 1 <= k <= num_gallery:
            raise ValueError(f"each K in ks must be in [1, the number of gallery items G = {num_gallery}], got {k}")
    relevant = as_sparse(val_relevant, num_queries, num_gallery, device=val_scores.device, name="val_relevant")
    rescored: Tensor | None = None  # re-weight once (and only when a run is missing), match once per (lambda, K)
    table: dict[float, dict[str, float]] = {}
    best_lam, best_sum = grid[0], -math.inf
    for lam in grid:
        tuned_reranker = reranker.with_parameters(**{tuned: float(lam)})
        row = {}
        for k in ks:
            lists = None if runs is None else runs.get((float(lam), k))
            if lists is None:
                if rescored is None:
                    rescored = reranker.rescore(val_scores)
                lists = tuned_reranker.topk_rescored(rescored, k)  # [Q, k], the run with k = K
                if runs is not None:
                    runs[(float(lam), k)] = lists
            row[f"R@{k}"] = recall_at_k_from_topk(lists, relevant)
        row["sum"] = sum(row.values())
        table[float(lam)] = row
        if row["sum"] > best_sum or (row["sum"] == best_sum and lam > best_lam):
            best_lam, best_sum = float(lam), row["sum"]
    return LambdaSelection(best_lam=best_lam, table=table, method=reranker.name, ks=ks)

