"""Answering "uncertain" instead of a list: abstention at search time.

A query whose uncertainty is high can be withheld rather than answered. ``pcmr search`` answers a
query only when its uncertainty lies within the lowest ``coverage`` share of the stored items of the
query's modality (its percentile, as the search output shows it); the rest read "uncertain".

The coverage can be chosen for a risk: ``pcmr evaluate`` writes the risk-coverage curve of each
similarity and direction (``figures.risk_coverage`` of ``results.json``; docs/evaluation.md), the mean
``1 - R-Precision`` of the answered queries against the share answered, least uncertain first.
:func:`coverage_for_risk` reads the largest coverage whose risk stays at or below the chosen one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pcmr.report.figure_keys import RISK_COVERAGE

__all__ = ["AbstentionError", "abstains", "abstention_entry", "coverage_for_risk", "read_risk_curve"]


class AbstentionError(ValueError):
    """A risk-coverage source that cannot give a coverage; the message names the file and what is missing."""


def read_risk_curve(path: str | Path, similarity: str, direction: str) -> tuple[list[float], list[float]]:
    """``(coverage, risk)`` of ``similarity`` and ``direction`` (``"t2i"`` for text queries, ``"i2t"``
    for image queries) from an evaluation folder or its ``results.json``."""
    path = Path(path)
    file = path / "results.json" if path.is_dir() else path
    if not file.is_file():
        raise AbstentionError(f"{file}: not found; expected the results.json of `pcmr evaluate --out DIR`")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise AbstentionError(f"{file}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    series = ((data.get("figures") or {}).get(RISK_COVERAGE) or {}).get("series") if isinstance(data, dict) else None
    if not isinstance(series, Mapping) or not series:
        raise AbstentionError(f"{file}: holds no risk-coverage curve (figures.risk_coverage); evaluate a model "
                              "with an uncertainty, figures on")
    if similarity not in series:
        raise AbstentionError(f"{file}: no risk-coverage curve for similarity {similarity!r}; it has "
                              f"{', '.join(sorted(series))}")
    side = series[similarity].get(direction) if isinstance(series[similarity], Mapping) else None
    if not isinstance(side, Mapping) or "coverage" not in side or "risk" not in side:
        raise AbstentionError(f"{file}: the {similarity!r} curve has no {direction} direction")
    return [float(c) for c in side["coverage"]], [float(r) for r in side["risk"]]


def coverage_for_risk(coverage: list[float], risk: list[float], max_risk: float) -> float:
    """The largest coverage whose risk is at most ``max_risk`` (0.0 when even the least uncertain
    queries are above it). ``coverage`` ascending in (0, 1], ``risk`` in [0, 1], one per point."""
    if not 0.0 <= max_risk <= 1.0 or math.isnan(max_risk):
        raise AbstentionError(f"the risk must lie in [0, 1] (1 - R-Precision of the answered), got {max_risk!r}")
    if len(coverage) != len(risk) or not coverage:
        raise AbstentionError("a risk-coverage curve needs one risk per coverage point")
    allowed = [c for c, r in zip(coverage, risk) if r <= max_risk + 1e-12]
    return max(allowed, default=0.0)


def abstains(query_percentile: float | None, coverage: float) -> bool:
    """True when a query whose uncertainty is at ``query_percentile`` (0-100, among the stored items of
    its modality) lies outside the answered share ``coverage`` (0-1); never for a query without one."""
    if query_percentile is None:
        return False
    return query_percentile > 100.0 * coverage


def abstention_entry(entry: dict[str, Any], coverage: float, why: str) -> dict[str, Any]:
    """``entry`` (one query's result block) answered "uncertain": no results, the reason kept."""
    return {**entry, "results": [], "abstained": True,
            "reason": f"query uncertainty at the {entry['query_uncertainty_percentile']:.0f}th percentile is above "
                      f"the answered share {100 * coverage:.0f}% ({why})"}
