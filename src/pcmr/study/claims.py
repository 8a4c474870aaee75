"""Claims of the papers as data, judged from paired seeds.

A claim compares a metric between two conditions ``a`` and ``b``. Each condition is a
:class:`Selector` of result rows (recipe, variant, similarity, re-ranker, relevance mode, and
optionally its own metric); a field ``b`` leaves out is taken from ``a``, and a claim without
``b`` compares ``a`` with zero. Fields neither side pins among ``variant`` and ``relevance`` are
judged once per value found in the results (e.g. once per training-relevance variant). For each
seed present on both sides the difference ``a - b`` is taken; its mean, paired t-interval and
verdict come from :mod:`pcmr.study.stats`.

Two rules keep the table honest (docs/study.md):

- **Each judgement once.** Where a field is expanded over relevance modes but the compared values are
  the same under every mode for every seed (a metric that does not read the relevance, e.g. PMRP or an
  uncertainty slope), the claim is judged once, its condition reading ``relevance=any``.
- **Sweep cells.** A claim with ``cells`` (a list of variants, e.g. learning rates x budgets) is judged
  in every cell; its verdict is that of the cells when they all agree, ``unstable`` when some cell
  holds or reverses and another does not agree, else ``inconclusive``. Its p-value is the largest of
  the cells' (the claim is rejected only where every cell is).
- **Family-wise error.** :func:`judge_claims` adds Holm's correction over the whole table: a
  ``holds`` / ``reversed`` whose p-value Holm's procedure does not reject reads ``inconclusive`` in
  the ``holm`` column.
- **The gate reads agreement across seeds.** A claim about an uncertainty head (``signal``) is judged
  ``no signal`` where that head's per-item uncertainty ranks agree too little across seeds (column
  ``<side>_uncertainty_agreement``, the mean pairwise Spearman rho, below :data:`AGREEMENT_MIN`); results
  without that column fall back to the per-run gate ``<side>_uncertainty_signal``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pcmr.config import ConfigError, build_dataclass
from pcmr.evaluation.columns import uncertainty_agreement, uncertainty_signal
from pcmr.study.stats import EXPECTATIONS, Interval, holm_rejections, paired_interval, paired_p_value, verdict

__all__ = ["AGREEMENT_MIN", "ANY_RELEVANCE", "Claim", "Judgement", "Selector", "judge_claim", "judge_claims",
           "parse_claims", "NO_DATA", "NO_SIGNAL", "SIGNAL_SIDES", "UNSTABLE"]

SELECT_FIELDS = ("recipe", "variant", "similarity", "rerank", "relevance")
EXPANDED_FIELDS = ("variant", "relevance")
#: verdict of a claim with no seed measured on both sides
NO_DATA = "no data"
#: verdict of a claim about what an uncertainty means, on runs whose uncertainty head learned nothing
#: (``pcmr.metrics.signal``): any seed of side ``a`` without signal in the modality the claim reads
NO_SIGNAL = "no signal"
#: verdict of a swept claim whose cells disagree (some hold or reverse, others do not agree)
UNSTABLE = "unstable"
#: condition value of a claim judged once because the relevance mode does not change its values
ANY_RELEVANCE = "any"
#: a head's per-item uncertainty ranks must agree across seeds at least this much (mean pairwise
#: Spearman rho) for claims about what that uncertainty means to be judged
AGREEMENT_MIN = 0.5
#: the uncertainty heads a claim may read (its ``signal`` field)
SIGNAL_SIDES = {"": (), "image": ("image",), "caption": ("caption",), "both": ("image", "caption")}


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


@dataclass(frozen=True)
class Claim:
    """A paper's statement: ``metric(a) expect metric(b)`` (see the module docstring)."""

    id: str
    paper: str
    statement: str
    metric: str
    a: Selector
    b: Selector | None
    expect: str  # greater | less | equal
    margin: float = 0.0
    signal: str = ""  # the uncertainty head(s) the claim reads: "", image, caption or both (gated)
    min_effect: float = 0.0  # the smallest mean difference that counts as an effect (0: any)
    cells: tuple[str, ...] = ()  # variants the claim is judged in, all of which must agree


@dataclass(frozen=True)
class Judgement:
    """A claim judged under one condition (the values of the expanded fields)."""

    claim: Claim
    condition: dict[str, str]
    a: Selector  # the rows compared (b's fields completed from a's, condition applied)
    b: Selector | None  # None: a is compared with zero
    interval: Interval
    verdict: str
    seeds: tuple[int, ...]
    #: the verdict the interval alone gives, where the trained-signal gate made it ``no signal``
    #: (else ""): what the runs show if their sub-floor heads are read anyway
    ungated: str = ""
    #: two-sided p-value of the paired t-test (the largest over the cells of a swept claim)
    p_value: float = math.nan
    #: the verdict after Holm's correction over the whole claims table (set by :func:`judge_claims`)
    holm: str = ""
    #: a swept claim's judgement in each of its cells (empty for a claim without cells)
    cells: tuple[Judgement, ...] = ()
    #: means of side a and side b over the paired seeds (b: 0 for a claim against zero)
    mean_a: float = math.nan
    mean_b: float = math.nan


@dataclass
class _ClaimFields:
    """The keys of one claim of a study file (read by ``pcmr.config.build_dataclass``)."""

    id: str = ""
    paper: str = ""
    statement: str = ""
    metric: str = ""
    a: Selector | None = None
    b: Selector | None = None
    expect: str = ""
    margin: float = 0.0
    signal: str = ""
    min_effect: float = 0.0
    cells: list[str] | None = None


def _check_selector(selector: Selector | None, where: str) -> Selector:
    if selector is None:
        raise ValueError(f"{where}: expected a mapping with keys among {', '.join(SELECT_FIELDS + ('metric',))}")
    for key in (*SELECT_FIELDS, "metric"):
        if getattr(selector, key) == "":
            raise ValueError(f"{where}.{key}: expected a name, got ''")
    return selector


def parse_claims(raw: Any, where: str = "claims") -> tuple[Claim, ...]:
    """Claims from a list of mappings (the ``claims`` section of a study file). Unknown keys and
    values of the wrong type are reported by ``pcmr.config.build_dataclass``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"{where}: expected a list of claims, got {raw!r}")
    claims, seen = [], set()
    for i, item in enumerate(raw):
        here = f"{where}[{i}]"
        try:
            fields = build_dataclass(_ClaimFields, item, where=f"claims[{i}]", label="study file")
        except ConfigError as exc:
            raise ValueError(f"{where}: {exc}") from None
        for key in ("id", "paper", "statement", "metric"):
            if not getattr(fields, key):
                raise ValueError(f"{here}.{key}: expected text, got {getattr(fields, key)!r}")
        if fields.id in seen:
            raise ValueError(f"{here}.id: duplicate claim id {fields.id!r}")
        seen.add(fields.id)
        if fields.expect not in EXPECTATIONS:
            raise ValueError(f"{here}.expect: expected one of {', '.join(EXPECTATIONS)}, got {fields.expect!r}")
        margin = fields.margin
        if not margin >= 0 or math.isinf(margin):
            raise ValueError(f"{here}.margin: expected a finite number >= 0, got {margin!r}")
        if fields.expect == "equal" and margin == 0:
            raise ValueError(f"{here}.margin: an 'equal' claim needs a margin > 0 (equivalence within +-margin)")
        if fields.signal not in SIGNAL_SIDES:
            raise ValueError(f"{here}.signal: expected one of image, caption, both (or leave it out), "
                             f"got {fields.signal!r}")
        min_effect = fields.min_effect
        if not min_effect >= 0 or math.isinf(min_effect):
            raise ValueError(f"{here}.min_effect: expected a finite number >= 0, got {min_effect!r}")
        if min_effect > 0 and (fields.expect == "equal" or margin > 0):
            raise ValueError(f"{here}.min_effect: a minimum effect applies to a 'greater' or 'less' claim "
                             "without a margin")
        a = _check_selector(fields.a, f"{here}.a")
        b = _check_selector(fields.b, f"{here}.b") if fields.b is not None else None
        cells: tuple[str, ...] = ()
        if fields.cells is not None:
            if not fields.cells or not all(isinstance(c, str) and c for c in fields.cells) \
                    or len(set(fields.cells)) != len(fields.cells):
                raise ValueError(f"{here}.cells: expected a list of distinct variant names, got {fields.cells!r}")
            if a.variant is not None or (b is not None and b.variant is not None):
                raise ValueError(f"{here}.cells: a claim judged over cells must not pin a variant")
            cells = tuple(fields.cells)
        claims.append(Claim(fields.id, fields.paper, fields.statement, fields.metric, a, b, fields.expect,
                            float(margin), fields.signal, float(min_effect), cells))
    return tuple(claims)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or math.isinf(number) else number


def _values_by_seed(rows: Sequence[dict[str, Any]], selector: Selector, metric: str, claim_id: str) -> dict[int, float]:
    """``{seed: value}`` of the rows matching ``selector``; one distinct value per seed is required."""
    found: dict[int, set[float]] = {}
    for row in rows:
        if any(getattr(selector, f) is not None and str(row.get(f)) != getattr(selector, f) for f in SELECT_FIELDS):
            continue
        value = _number(row.get(metric))
        if value is not None:
            found.setdefault(int(row["seed"]), set()).add(value)
    ambiguous = {seed: values for seed, values in found.items() if len(values) > 1}
    if ambiguous:
        seed = min(ambiguous)
        raise ValueError(f"claim {claim_id!r}: side {selector.describe()} matches {len(ambiguous[seed])} different "
                         f"values of {metric} for seed {seed}; pin more fields "
                         f"({', '.join(f for f in SELECT_FIELDS if getattr(selector, f) is None)})")
    return {seed: next(iter(values)) for seed, values in found.items()}


def _matching(rows: Sequence[dict[str, Any]], selector: Selector) -> list[dict[str, Any]]:
    pinned = [f for f in SELECT_FIELDS if getattr(selector, f) is not None]
    return [r for r in rows if all(str(r.get(f)) == getattr(selector, f) for f in pinned)]


def _without_signal(rows: Sequence[dict[str, Any]], selector: Selector, claim: Claim, seeds: Sequence[int]) -> bool:
    """True when a head the claim reads agrees across seeds less than :data:`AGREEMENT_MIN`
    (``<side>_uncertainty_agreement``); results without that column fall back to the per-run gate
    (``<side>_uncertainty_signal`` of 0 in some seed); rows with neither are not gated."""
    for side in SIGNAL_SIDES[claim.signal]:
        agreement = _values_by_seed(rows, selector, uncertainty_agreement(side), claim.id)
        if agreement:
            if any(agreement.get(seed, math.inf) < AGREEMENT_MIN for seed in seeds):
                return True
            continue
        values = _values_by_seed(rows, selector, uncertainty_signal(side), claim.id)
        if any(values.get(seed) == 0.0 for seed in seeds):
            return True
    return False


def _judge_condition(claim: Claim, rows: Sequence[dict[str, Any]], a: Selector, b: Selector | None,
                     condition: dict[str, str], level: float) -> tuple[Judgement, tuple[Any, ...]]:
    """One judgement, and the paired values it was made from (to find duplicates)."""
    a_values = _values_by_seed(rows, a, a.metric or claim.metric, claim.id)
    b_values = dict.fromkeys(a_values, 0.0) if b is None else _values_by_seed(rows, b, b.metric or claim.metric,
                                                                               claim.id)
    seeds = tuple(sorted(set(a_values) & set(b_values)))
    pairs = tuple((s, a_values[s], b_values[s]) for s in seeds)
    interval = paired_interval([a_values[s] for s in seeds], [b_values[s] for s in seeds], level)
    outcome = NO_DATA if not seeds else verdict(interval, claim.expect, claim.margin, claim.min_effect)
    ungated = ""
    if seeds and _without_signal(rows, a, claim, seeds):
        outcome, ungated = NO_SIGNAL, outcome
    mean_a = math.fsum(a_values[s] for s in seeds) / len(seeds) if seeds else math.nan
    mean_b = math.fsum(b_values[s] for s in seeds) / len(seeds) if seeds else math.nan
    judgement = Judgement(claim, condition, a, b, interval, outcome, seeds, ungated, paired_p_value(interval),
                          mean_a=mean_a, mean_b=mean_b)
    return judgement, pairs


def _combine_cells(claim: Claim, condition: dict[str, str], cells: list[Judgement]) -> Judgement:
    """A swept claim's judgement from its cells (see the module docstring); the interval shown is
    the weakest cell's."""
    verdicts = {j.verdict for j in cells}
    if len(verdicts) == 1:
        outcome = cells[0].verdict
    elif verdicts & {"holds", "reversed"}:
        outcome = UNSTABLE
    else:
        outcome = "inconclusive"
    p_values = [j.p_value for j in cells]
    p_value = math.nan if any(math.isnan(p) for p in p_values) else max(p_values)
    # the interval and means shown are the weakest cell's (its largest p-value)
    first = cells[0] if math.isnan(p_value) else cells[p_values.index(p_value)]
    seeds = tuple(sorted(set.intersection(*(set(j.seeds) for j in cells))))
    return Judgement(claim, {**condition, "cells": "+".join(claim.cells)}, replace(first.a, variant=None),
                     None if first.b is None else replace(first.b, variant=None), first.interval, outcome, seeds,
                     p_value=p_value, cells=tuple(cells), mean_a=first.mean_a, mean_b=first.mean_b)


def judge_claim(claim: Claim, rows: Sequence[dict[str, Any]], level: float = 0.95) -> list[Judgement]:
    """Judge ``claim`` on result rows (dicts with ``seed``, the selector fields and metrics)."""
    side_b = claim.b
    if side_b is not None:  # fields b leaves out come from a
        side_b = replace(side_b, **{f: getattr(claim.a, f) for f in SELECT_FIELDS + ("metric",)
                                    if getattr(side_b, f) is None})
    expanded = [f for f in EXPANDED_FIELDS if not (claim.cells and f == "variant")]
    free = [f for f in expanded if getattr(claim.a, f) is None and (side_b is None or getattr(side_b, f) is None)]
    choices = []
    for f in free:  # values of the field found on both sides
        values = {str(r.get(f)) for r in _matching(rows, claim.a) if r.get(f) not in (None, "")}
        if side_b is not None:
            values &= {str(r.get(f)) for r in _matching(rows, side_b) if r.get(f) not in (None, "")}
        choices.append(sorted(values))
    if any(not values for values in choices):  # some field has no value measured on both sides
        empty = paired_interval([], [], level)
        return [Judgement(claim, {}, claim.a, side_b, empty, NO_DATA, ())]
    out: list[Judgement] = []
    seen: dict[tuple[Any, ...], int] = {}  # relevance-free duplicates: the values judged, without relevance
    for combo in itertools.product(*choices):
        condition = dict(zip(free, combo))
        cell_judgements, cell_pairs = [], []
        for cell in claim.cells or (None,):
            cell_condition = condition if cell is None else {**condition, "variant": cell}
            a = replace(claim.a, **cell_condition)
            b = replace(side_b, **cell_condition) if side_b is not None else None
            judgement, pairs = _judge_condition(claim, rows, a, b, cell_condition, level)
            cell_judgements.append(judgement)
            cell_pairs.append(pairs)
        judgement = cell_judgements[0] if not claim.cells else _combine_cells(claim, condition, cell_judgements)
        if "relevance" in condition and all(cell_pairs):
            key = (tuple(sorted((k, v) for k, v in condition.items() if k != "relevance")), tuple(cell_pairs))
            if key in seen:  # the same values under another relevance mode: judged once
                index = seen[key]
                out[index] = replace(out[index], condition={**out[index].condition, "relevance": ANY_RELEVANCE})
                continue
            seen[key] = len(out)
        out.append(judgement)
    return out


def _with_holm(judgements: list[Judgement], level: float) -> list[Judgement]:
    """Each judgement with its verdict after Holm's correction over all directional judgements."""
    family = [i for i, j in enumerate(judgements) if j.claim.expect != "equal" and j.verdict not in (NO_DATA,)]
    rejected = holm_rejections([judgements[i].p_value for i in family], alpha=1.0 - level)
    keeps = dict(zip(family, rejected))
    out = []
    for i, j in enumerate(judgements):
        holm = j.verdict
        if j.verdict in ("holds", "reversed") and not keeps.get(i, False):
            holm = "inconclusive"
        out.append(replace(j, holm=holm))
    return out


def judge_claims(claims: Sequence[Claim], rows: Sequence[dict[str, Any]],
                 level: float = 0.95) -> tuple[list[Judgement], dict[str, str]]:
    """Every claim judged under every condition (see :func:`judge_claim`); a claim that cannot be
    judged on these rows (an ambiguous side) is left out and its reason returned by claim id."""
    judgements: list[Judgement] = []
    errors: dict[str, str] = {}
    for claim in claims:
        try:
            judgements.extend(judge_claim(claim, rows, level))
        except ValueError as err:
            errors[claim.id] = str(err)
    return _with_holm(judgements, level), errors
