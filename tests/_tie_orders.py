"""Brute-force reference for tied scores: average a metric over every order of the gallery.

A uniformly random relabelling of the gallery, ranked with "lower index first" among equal scores,
puts every tie group in a uniformly random order. Averaging a per-query metric over all ``G!``
permutations (small G) therefore gives its exact expectation over tie orders.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence


def order_by_index(row: Sequence[float]) -> list[int]:
    """Gallery indices best first; equal scores: lower index first."""
    return sorted(range(len(row)), key=lambda g: (-row[g], g))


def query_metrics(row: Sequence[float], positives: set[int], ks: Iterable[int]) -> dict[str, float]:
    """R@K hits, first-positive rank, R-Precision, MAP@R of one query under lower-index-first."""
    order = order_by_index(row)
    rank = min(order.index(p) for p in positives) + 1
    r = len(positives)
    hits, average = 0, 0.0
    for position, g in enumerate(order[:r], start=1):
        if g in positives:
            hits += 1
            average += hits / position
    out = {f"R@{k}": float(rank <= k) for k in ks}
    out.update(rank=float(rank), r_precision=hits / r, map_at_r=average / r)
    return out


def expected_query_metrics(scores: list[list[float]], relevant: list[list[bool]], ks: Iterable[int],
                           orders: Iterable[Sequence[int]] | None = None) -> list[dict[str, float] | None]:
    """Per query (None without positives): :func:`query_metrics` averaged over gallery relabellings
    ``orders`` (default: all permutations of the gallery)."""
    ks = tuple(ks)
    num_gallery = len(scores[0])
    perms = list(orders) if orders is not None else list(itertools.permutations(range(num_gallery)))
    out: list[dict[str, float] | None] = []
    for row, rel in zip(scores, relevant):
        positives = [g for g, is_pos in enumerate(rel) if is_pos]
        if not positives:
            out.append(None)
            continue
        total: dict[str, float] = {}
        for perm in perms:  # item g is stored at position perm.index(g): row_p[new] = row[perm[new]]
            row_p = [row[perm[new]] for new in range(num_gallery)]
            where = {old: new for new, old in enumerate(perm)}
            for key, value in query_metrics(row_p, {where[p] for p in positives}, ks).items():
                total[key] = total.get(key, 0.0) + value
        out.append({key: value / len(perms) for key, value in total.items()})
    return out


def expected_metrics(scores: list[list[float]], relevant: list[list[bool]], ks: Iterable[int] = (1, 5, 10),
                     orders: Iterable[Sequence[int]] | None = None) -> dict[str, float]:
    """The summary of :func:`pcmr.metrics.retrieval_metrics` (percent) from per-query expectations."""
    ks = tuple(ks)
    per_query = expected_query_metrics(scores, relevant, ks, orders)
    kept = [q for q in per_query if q is not None]
    out = {f"R@{k}": 100.0 * sum(q[f"R@{k}"] for q in kept) / len(kept) for k in ks}
    ranks = [q["rank"] for q in kept]
    out["median_rank"] = float(statistics.median(ranks))
    out["mean_rank"] = sum(ranks) / len(ranks)
    out["r_precision"] = 100.0 * sum(q["r_precision"] for q in kept) / len(kept)
    out["map_at_r"] = 100.0 * sum(q["map_at_r"] for q in kept) / len(kept)
    out["num_skipped"] = float(len(per_query) - len(kept))
    return out
