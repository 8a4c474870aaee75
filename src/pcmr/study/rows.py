"""Which result rows a claim reads: the :class:`Selector` of one side and the values it picks per seed.

A side of a claim pins some of the identifying fields of ``results.csv`` (:data:`SELECT_FIELDS`) and may
name its own metric; :func:`values_by_seed` returns the one value of each seed the side matches and
refuses a side that matches two different values for one seed (it must pin more fields).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SELECT_FIELDS", "Selector", "matching_rows", "number", "values_by_seed"]

SELECT_FIELDS = ("recipe", "variant", "similarity", "rerank", "relevance")


@dataclass(frozen=True)
class Selector:
    """Which rows of ``results.csv`` make one side of a claim (None = not pinned)."""

    recipe: str | None = None
    variant: str | None = None
    similarity: str | None = None
    rerank: str | None = None
    relevance: str | None = None
    metric: str | None = None  # default: the claim's metric

    def describe(self, metric: str | None = None) -> str:
        """``recipe/variant/similarity/re-ranker/relevance [metric]`` of the pinned fields."""
        parts = [str(getattr(self, f)) for f in SELECT_FIELDS if getattr(self, f) is not None]
        shown = self.metric or metric
        return "/".join(parts) + (f" [{shown}]" if shown else "")


def number(value: Any) -> float | None:
    """``value`` as a finite float, else None (missing, text, NaN or infinite)."""
    if isinstance(value, bool) or value is None or value == "":
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) or math.isinf(out) else out


def matching_rows(rows: Sequence[dict[str, Any]], selector: Selector) -> list[dict[str, Any]]:
    """The rows whose identifying fields equal every field ``selector`` pins."""
    pinned = [f for f in SELECT_FIELDS if getattr(selector, f) is not None]
    return [r for r in rows if all(str(r.get(f)) == getattr(selector, f) for f in pinned)]


def values_by_seed(rows: Sequence[dict[str, Any]], selector: Selector, metric: str, claim_id: str) -> dict[int, float]:
    """``{seed: value}`` of the rows matching ``selector``; one distinct value per seed is required."""
    found: dict[int, set[float]] = {}
    for row in matching_rows(rows, selector):
        value = number(row.get(metric))
        if value is not None:
            found.setdefault(int(row["seed"]), set()).add(value)
    ambiguous = {seed: values for seed, values in found.items() if len(values) > 1}
    if ambiguous:
        seed = min(ambiguous)
        raise ValueError(f"claim {claim_id!r}: side {selector.describe()} matches {len(ambiguous[seed])} different "
                         f"values of {metric} for seed {seed}; pin more fields "
                         f"({', '.join(f for f in SELECT_FIELDS if getattr(selector, f) is None)})")
    return {seed: next(iter(values)) for seed, values in found.items()}
