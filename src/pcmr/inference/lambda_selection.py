"""Choosing RGM's relaxation factor lambda on a validation split (HAL/RGM §4.1: "we use the lambdas that
maximize R@K scores on validation set")."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass

from torch import Tensor

from pcmr.inference.rerankers import get_reranker
from pcmr.metrics._relevance import RelevanceInput, SparseRelevance

#: Default candidates: from GM-like (1) to unconstrained (inf = NNS on the re-weighted scores).
DEFAULT_LAMBDA_GRID: tuple[float, ...] = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 10.0, math.inf)


@dataclass(frozen=True)
class LambdaSelection:
    """Result of ``select_lambda``.

    Attributes:
        best_lam: the lambda with the largest ``sum`` (ties go to the larger lambda, the weaker constraint).
        table: ``{lam: {"R@1": ..., "R@5": ..., "R@10": ..., "sum": ...}}`` in grid order (percent).
        method: the reranker evaluated (``rgm``, ``is+rgm`` or ``csls+rgm``); ks: the K values summed.
    """

    best_lam: float
    table: dict[float, dict[str, float]]
    method: str
    ks: tuple[int, ...]


def select_lambda(
    val_scores: Tensor,
    val_relevant: RelevanceInput | SparseRelevance,
    ks: Iterable[int] = (1, 5, 10),
    grid: Iterable[float] = DEFAULT_LAMBDA_GRID,
    *,
    method: str = "rgm",
    **params: object,
) -> LambdaSelection:
    """Pick lambda maximising the sum of R@K over ``ks`` on validation scores of one direction.

    Args:
        val_scores: ``[Q, G]`` validation scores of one direction (call again with ``S.T`` for the other).
        val_relevant: dense BoolTensor ``[Q, G]`` or a list of Q lists of positive gallery indices.
        ks: the K of R@K; R@K uses the RGM run with ``k = K`` (SPEC §5).
        grid: candidate lambdas (> 0, ``inf`` allowed); ``round(lam * K) >= 1`` needed for every K.
        method: ``"rgm"``, ``"is+rgm"`` or ``"csls+rgm"``; params: ``beta`` / ``csls_k`` / ``backend``.
    Returns:
        ``LambdaSelection`` with the best lambda and the per-lambda table.
    """
    if method not in ("rgm", "is+rgm", "csls+rgm"):
        raise ValueError(
            f"method must be 'rgm', 'is+rgm' or 'csls+rgm' (a reranker with lambda), got {method!r}"
        )
    if "lam" in params:
        raise ValueError("select_lambda chooses lam itself; pass the candidates as grid=...")
    grid = tuple(grid)
    ks = tuple(ks)
    if not grid:
        raise ValueError("grid must hold at least one lambda")
    for lam in grid:
        if not isinstance(lam, (int, float)) or isinstance(lam, bool) or math.isnan(lam) or lam <= 0:
            raise ValueError(f"every lambda in grid must be a number > 0 (inf allowed), got {lam!r}")
        for k in ks:
            if isinstance(k, int) and k >= 1 and not math.isinf(lam) and round(lam * k) < 1:
                raise ValueError(f"lambda {lam} gives round(lam * k) = 0 uses per gallery item for k = {k}")
    reranker = get_reranker(method, **params)
    rescored = reranker.rescore(val_scores)  # re-weight once, match once per (lambda, K)
    table: dict[float, dict[str, float]] = {}
    best_lam, best_sum = grid[0], -math.inf
    for lam in grid:
        row = dataclasses.replace(reranker, lam=float(lam)).recall_rescored(rescored, val_relevant, ks)
        row["sum"] = sum(row.values())
        table[float(lam)] = row
        if row["sum"] > best_sum or (row["sum"] == best_sum and lam > best_lam):
            best_lam, best_sum = float(lam), row["sum"]
    return LambdaSelection(best_lam=best_lam, table=table, method=method, ks=ks)
