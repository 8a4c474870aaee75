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

from pcmr.atomic import repair_folder
from pcmr.encode.fingerprint import fingerprint_mismatches
from pcmr.report.figure_keys import RISK_COVERAGE

__all__ = ["AbstentionError", "abstains", "abstention_entry", "answered_entry", "check_curve_fingerprint",
           "coverage_for_risk", "read_risk_curve"]


class AbstentionError(ValueError):
    """A risk-coverage source that cannot give a coverage; the message names the file and what is missing."""


def _results_file(path: str | Path) -> Path:
    path = Path(path)
    if path.suffix != ".json":  # an evaluation folder whose swap was killed between its renames: put it back
        repair_folder(path)
    file = path / "results.json" if path.is_dir() else path
    if not file.is_file():
        raise AbstentionError(f"{file}: not found; expected the results.json of `pcmr evaluate --out DIR`")
    return file


def read_risk_curve(path: str | Path, similarity: str, direction: str) -> tuple[list[float], list[float]]:
    """``(coverage, risk)`` of ``similarity`` and ``direction`` (``"t2i"`` for text queries, ``"i2t"``
    for image queries) from an evaluation folder or its ``results.json``."""
    file = _results_file(path)
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


def check_curve_fingerprint(path: str | Path, current: Mapping[str, Any]) -> None:
    """AbstentionError unless the risk-coverage curve of the evaluation at ``path`` was measured with the
    model and gallery of ``current`` (:func:`pcmr.encode.fingerprint.gallery_fingerprint` of the index):
    a curve of another model or gallery maps a risk to a share that means nothing here."""
    file = _results_file(path)
    data = json.loads(file.read_text(encoding="utf-8"))
    stored = ((data.get("figures") or {}).get(RISK_COVERAGE) or {}).get("fingerprint")
    if not isinstance(stored, Mapping):
        raise AbstentionError(f"{file}: the risk-coverage curve records no model and gallery fingerprint (written by "
                              f"an older pcmr); evaluate again with `pcmr evaluate RUN --out DIR`")
    differ = fingerprint_mismatches(stored, current)
    if differ:
        raise AbstentionError(f"{file}: the risk-coverage curve belongs to another model or gallery than this "
                              f"index ({'; '.join(differ)}); evaluate the index's model on its gallery split and "
                              f"pass that folder to --risk-curve")


def coverage_for_risk(coverage: list[float], risk: list[float], max_risk: float, where: str = "") -> float:
    """The largest coverage whose risk is at most ``max_risk``. ``coverage`` ascending in (0, 1], ``risk``
    in [0, 1], one per point. AbstentionError, naming the lowest risk the curve reaches (and ``where``,
    the curve's file and direction), when even the least uncertain queries are above it."""
    if not 0.0 <= max_risk <= 1.0 or math.isnan(max_risk):
        raise AbstentionError(f"the risk must lie in [0, 1] (1 - R-Precision of the answered), got {max_risk!r}")
    if len(coverage) != len(risk) or not coverage:
        raise AbstentionError("a risk-coverage curve needs one risk per coverage point")
    allowed = [c for c, r in zip(coverage, risk) if r <= max_risk + 1e-12]
    if not allowed:
        lowest = min(risk)
        at = max(c for c, r in zip(coverage, risk) if r == lowest)
        raise AbstentionError(f"a risk of at most {max_risk:g} cannot be reached{f' ({where})' if where else ''}: the "
                              f"lowest risk of the curve is {lowest:.4g}, answering {100 * at:.0f}% of the queries; "
                              f"give --max-risk {_round_up(lowest)} or more")
    return max(allowed)


def _round_up(value: float) -> str:
    """``value`` rounded up to 3 decimals, as text (a --max-risk that reaches it)."""
    return f"{math.ceil(value * 1000 - 1e-9) / 1000:g}"


def abstains(query_percentile: float | None, coverage: float) -> bool:
    """True when a query whose uncertainty is at ``query_percentile`` (0-100, among the stored items of
    its modality) lies outside the answered share ``coverage`` (0-1); never for a query without one."""
    if query_percentile is None:
        return False
    return query_percentile > 100.0 * coverage


def answered_entry(entry: dict[str, Any], coverage: float, why: str) -> dict[str, Any]:
    """``entry`` (one query's result block) answered under abstention: the answered share ``coverage``
    and why (``--answer-coverage`` or the risk curve) kept beside the results."""
    percentile = entry["query_uncertainty_percentile"]
    where = "" if percentile is None else f"query uncertainty at the {_ordinal(percentile)} percentile, "
    return {**entry, "abstained": False, "coverage": coverage,
            "reason": f"answered: {where}within the answered share {100 * coverage:.0f}% ({why})"}


def abstention_entry(entry: dict[str, Any], coverage: float, why: str) -> dict[str, Any]:
    """``entry`` (one query's result block) answered "uncertain": no results, the reason kept."""
    return {**entry, "results": [], "abstained": True, "coverage": coverage,
            "reason": f"query uncertainty at the {_ordinal(entry['query_uncertainty_percentile'])} percentile is above "
                      f"the answered share {100 * coverage:.0f}% ({why})"}


def _ordinal(value: float) -> str:
    """``21.4`` -> ``"21st"``: a percentile as the search output writes it."""
    number = int(round(value))
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"
