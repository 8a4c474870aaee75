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
- **Models that learned.** With a skill gate (:func:`judge_claims`'s ``min_skill``, the study file's
  ``gate``), every model a claim reads (each side's rows, under the claim's condition and cell) must
  reach skill ``(R-P - QB) / (100 - QB)`` of at least ``min_skill`` on the mean over seeds in every
  direction the claim reads (its ``reads``; by default the direction its metric names, else both);
  otherwise it reads ``not learned``, naming the model and the direction.
- **The null of many untrained models.** A claim with ``vs_null: true`` compares side ``a``'s seeds with a
  sample of the same statistic from many untrained initialisations of ``a``'s recipe (no pairing by
  seed): Welch's interval of the difference of means, and each seed's percentile in the null.
- **Drift.** Where a thread-count drift is given per metric, a ``holds`` or ``reversed`` whose mean
  difference is smaller than the drift of its metric reads ``equal``.
- **Primary family.** With a list of primary claims, Holm's correction runs over them alone; the
  others are secondary and read uncorrected.
- **The gate reads agreement across seeds.** A claim about an uncertainty head (``signal``) is judged
  ``no signal`` where that head's per-item uncertainty ranks agree too little across seeds (column
  ``<side>_uncertainty_agreement``, the mean pairwise Spearman rho, below :data:`AGREEMENT_MIN`); results
  without that column fall back to the per-run gate ``<side>_uncertainty_signal``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pcmr.config import ConfigError, build_dataclass
from pcmr.evaluation.columns import (
    query_blind_r_precision,
    r_precision,
    uncertainty_agreement,
    uncertainty_signal,
)
from pcmr.relevance import I2T, T2I
from pcmr.study.stats import (
    EXPECTATIONS,
    Interval,
    holm_rejections,
    null_percentile,
    paired_interval,
    paired_p_value,
    verdict,
    welch_interval,
)

__all__ = ["AGREEMENT_MIN", "ANY_RELEVANCE", "Claim", "DIRECTIONS", "JudgeOptions", "Judgement", "NOT_LEARNED", "Selector",
           "judge_claim", "judge_claims", "parse_claims", "NO_DATA", "NO_SIGNAL", "SIGNAL_SIDES", "UNSTABLE"]

SELECT_FIELDS = ("recipe", "variant", "similarity", "rerank", "relevance")
EXPANDED_FIELDS = ("variant", "relevance")
#: verdict of a claim with no seed measured on both sides
NO_DATA = "no data"
#: verdict of a claim about what an uncertainty means, on runs whose uncertainty head learned nothing
#: (``pcmr.metrics.signal``): any seed of side ``a`` without signal in the modality the claim reads
NO_SIGNAL = "no signal"
#: verdict of a swept claim whose cells disagree (some hold or reverse, others do not agree)
UNSTABLE = "unstable"
#: verdict of a claim one of whose models ranks no better than the query-blind list (the skill gate)
NOT_LEARNED = "not learned"
#: retrieval directions a claim may read (its ``reads`` field)
DIRECTIONS = (I2T, T2I)
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
    reads: tuple[str, ...] = ()  # directions the skill gate checks (() = from the metric's prefix, else both)
    null: bool = False  # compare side a with the null of many untrained models (no side b)

    def directions(self) -> tuple[str, ...]:
        """The directions the skill gate reads: ``reads``, else the metric's prefix, else both."""
        if self.reads:
            return self.reads
        prefix = self.metric.split("_", 1)[0]
        return (prefix,) if prefix in DIRECTIONS else DIRECTIONS


@dataclass(frozen=True)
class GateFailure:
    """One model (``Selector.describe()``: recipe/variant/similarity/re-ranker/relevance) that failed the
    skill gate in one direction: its skill over the query-blind ranking and the gate's minimum."""

    model: str
    direction: str
    skill: float
    min_skill: float
    note: str = ""  # where the skill was read elsewhere, e.g. " (of its csls ranking)" for a matching

    def describe(self) -> str:
        return f"{self.model} {self.direction} skill {self.skill:.3f}{self.note} < {self.min_skill:g}"


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
    #: the skill gate's reading per model and direction ("" without a gate); why it failed, if it did
    gate: str = ""
    #: each model and direction that failed the skill gate (over every cell of a swept claim)
    gate_failures: tuple[GateFailure, ...] = ()
    #: a null claim: each seed's percentile in the null sample, and the null's size
    null_percentiles: tuple[float, ...] = ()
    null_size: int = 0
    #: the thread-count drift of the claim's metric where given (NaN: none)
    drift: float = math.nan
    #: "primary" or "secondary" where the study lists its primary claims, else ""
    family: str = ""


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
    reads: list[str] | None = None
    vs_null: bool = False


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
        reads: tuple[str, ...] = ()
        if fields.reads is not None:
            if not fields.reads or any(d not in DIRECTIONS for d in fields.reads) \
                    or len(set(fields.reads)) != len(fields.reads):
                raise ValueError(f"{here}.reads: expected a list of distinct directions among i2t, t2i, "
                                 f"got {fields.reads!r}")
            reads = tuple(fields.reads)
        if fields.vs_null and b is not None:
            raise ValueError(f"{here}.vs_null: a claim against the null of untrained models has no side b")
        if fields.vs_null and fields.expect == "equal":
            raise ValueError(f"{here}.vs_null: a claim against the null needs expect greater or less")
        claims.append(Claim(fields.id, fields.paper, fields.statement, fields.metric, a, b, fields.expect,
                            float(margin), fields.signal, float(min_effect), cells, reads, bool(fields.vs_null)))
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


@dataclass(frozen=True)
class JudgeOptions:
    """What a study adds to the paired rule (all optional): the skill gate's ``min_skill``, the null
    sample rows (``recipe``, ``relevance``, statistic columns; one row per untrained initialisation), the
    thread-count drift per metric, and the ids of the primary claims (Holm runs over them alone)."""

    min_skill: float | None = None
    null_rows: Sequence[dict[str, Any]] = ()
    drift: dict[str, float] = field(default_factory=dict)
    primary: tuple[str, ...] | None = None


def _side_skill(rows: Sequence[dict[str, Any]], side: Selector, direction: str, claim_id: str) -> float:
    """Skill ``(R-P - QB) / (100 - QB)`` of the rows of ``side`` in ``direction``, on the means over
    seeds (NaN where either column is missing)."""
    rp = _values_by_seed(rows, side, r_precision(direction), claim_id)
    qb = _values_by_seed(rows, side, query_blind_r_precision(direction), claim_id)
    seeds = sorted(set(rp) & set(qb))
    if not seeds:
        return math.nan
    mean_rp = math.fsum(rp[s] for s in seeds) / len(seeds)
    mean_qb = math.fsum(qb[s] for s in seeds) / len(seeds)
    return math.nan if mean_qb >= 100.0 else (mean_rp - mean_qb) / (100.0 - mean_qb)


def _skill_gate(claim: Claim, rows: Sequence[dict[str, Any]], sides: Sequence[Selector],
                min_skill: float) -> tuple[tuple[GateFailure, ...], str]:
    """``(failures, text)``: every model of ``sides`` (their pinned fields, metric aside) in every
    direction the claim reads; the text names each model and direction with its skill, failures first."""
    failures: list[GateFailure] = []
    passed: list[str] = []
    seen: set[Selector] = set()
    for side in sides:
        model = replace(side, metric=None)
        if model in seen:
            continue
        seen.add(model)
        for direction in claim.directions():
            skill = _side_skill(rows, model, direction, claim.id)
            note = ""
            if math.isnan(skill) and model.rerank is not None and "+" in model.rerank:
                # a matching (e.g. RGM on CSLS) assigns, it does not rank, so it has no R-Precision: the
                # gate reads the ranking the matching is built from, of the same model and cell
                base = model.rerank.split("+", 1)[0]
                skill = _side_skill(rows, replace(model, rerank=base), direction, claim.id)
                note = f" (of its {base} ranking)"
            if skill >= min_skill:
                passed.append(f"{model.describe()} {direction} skill {skill:.3f}{note}")
            else:
                failures.append(GateFailure(model.describe(), direction, skill, min_skill, note))
    if failures:
        return tuple(failures), "; ".join(failure.describe() for failure in failures)
    return (), "; ".join(passed)


def _null_values(claim: Claim, a: Selector, options: JudgeOptions) -> list[float]:
    """The null sample of ``claim``'s metric for side ``a``'s recipe (and relevance, where pinned)."""
    metric = a.metric or claim.metric
    out = []
    for row in options.null_rows:
        if str(row.get("recipe")) != a.recipe:
            continue
        if a.relevance is not None and row.get("relevance") not in (None, "", a.relevance):
            continue
        value = _number(row.get(metric))
        if value is not None:
            out.append(value)
    return out


def _drift_of(claim: Claim, a: Selector, b: Selector | None, options: JudgeOptions) -> float:
    metrics = {a.metric or claim.metric} | ({b.metric or claim.metric} if b is not None else set())
    values = [options.drift[m] for m in metrics if m in options.drift]
    return max(values) if values else math.nan


def _judge_condition(claim: Claim, rows: Sequence[dict[str, Any]], a: Selector, b: Selector | None,
                     condition: dict[str, str], level: float,
                     options: JudgeOptions = JudgeOptions()) -> tuple[Judgement, tuple[Any, ...]]:
    """One judgement, and the values it was made from (to find duplicates)."""
    a_values = _values_by_seed(rows, a, a.metric or claim.metric, claim.id)
    percentiles: tuple[float, ...] = ()
    null_size = 0
    if claim.null:
        null = _null_values(claim, a, options)
        seeds = tuple(sorted(a_values)) if null else ()
        interval, p_value = welch_interval([a_values[s] for s in seeds], null, level) if null else \
            (paired_interval([], [], level), math.nan)
        percentiles = tuple(null_percentile(a_values[s], null) for s in seeds)
        null_size = len(null)
        pairs: tuple[Any, ...] = tuple((s, a_values[s]) for s in seeds)
        mean_b = math.fsum(null) / len(null) if null else math.nan
    else:
        b_values = dict.fromkeys(a_values, 0.0) if b is None else _values_by_seed(rows, b, b.metric or claim.metric,
                                                                                   claim.id)
        seeds = tuple(sorted(set(a_values) & set(b_values)))
        pairs = tuple((s, a_values[s], b_values[s]) for s in seeds)
        interval = paired_interval([a_values[s] for s in seeds], [b_values[s] for s in seeds], level)
        p_value = paired_p_value(interval)
        mean_b = math.fsum(b_values[s] for s in seeds) / len(seeds) if seeds else math.nan
    outcome = NO_DATA if not seeds else verdict(interval, claim.expect, claim.margin, claim.min_effect)
    drift = _drift_of(claim, a, b, options)
    if outcome in ("holds", "reversed") and abs(interval.mean) < drift:
        outcome = "equal"  # an effect inside the thread-count drift is no effect
    ungated, gate_text = "", ""
    failures: tuple[GateFailure, ...] = ()
    if seeds and _without_signal(rows, a, claim, seeds):
        outcome, ungated = NO_SIGNAL, outcome
    if options.min_skill is not None and seeds:
        failures, gate_text = _skill_gate(claim, rows, [a] if b is None or claim.null else [a, b],
                                          options.min_skill)
        if failures:
            outcome, ungated = NOT_LEARNED, ungated or outcome
    mean_a = math.fsum(a_values[s] for s in seeds) / len(seeds) if seeds else math.nan
    judgement = Judgement(claim, condition, a, b, interval, outcome, seeds, ungated, p_value,
                          mean_a=mean_a, mean_b=mean_b, gate=gate_text, gate_failures=failures,
                          null_percentiles=percentiles,
                          null_size=null_size, drift=drift)
    return judgement, pairs


def _combine_cells(claim: Claim, condition: dict[str, str], cells: list[Judgement]) -> Judgement:
    """A swept claim's judgement from its cells (see the module docstring); the interval shown is
    the weakest cell's. A model that did not learn in any cell makes the claim ``not learned``."""
    verdicts = {j.verdict for j in cells}
    if NOT_LEARNED in verdicts:
        outcome = NOT_LEARNED
    elif len(verdicts) == 1:
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
    failed = [f"{j.condition.get('variant', '?')}: {j.gate}" for j in cells if j.verdict == NOT_LEARNED]
    gate = "; ".join(failed) if failed else "; ".join(f"{j.condition.get('variant', '?')}: {j.gate}"
                                                     for j in cells if j.gate)
    return Judgement(claim, {**condition, "cells": "+".join(claim.cells)}, replace(first.a, variant=None),
                     None if first.b is None else replace(first.b, variant=None), first.interval, outcome, seeds,
                     p_value=p_value, cells=tuple(cells), mean_a=first.mean_a, mean_b=first.mean_b, gate=gate,
                     gate_failures=tuple(f for j in cells for f in j.gate_failures),
                     null_percentiles=tuple(p for j in cells for p in j.null_percentiles),
                     null_size=first.null_size, drift=first.drift)


def judge_claim(claim: Claim, rows: Sequence[dict[str, Any]], level: float = 0.95,
                options: JudgeOptions = JudgeOptions()) -> list[Judgement]:
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
            judgement, pairs = _judge_condition(claim, rows, a, b, cell_condition, level, options)
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


def _with_holm(judgements: list[Judgement], level: float, primary: tuple[str, ...] | None = None) -> list[Judgement]:
    """Each judgement with its verdict after Holm's correction: over every directional judgement, or,
    with ``primary``, over the primary claims' judgements alone (the others read uncorrected, marked
    secondary). A judgement that was not learned or has no data counts in the family with no rejection."""
    if primary is None:
        family = [i for i, j in enumerate(judgements) if j.claim.expect != "equal" and j.verdict not in (NO_DATA,)]
    else:
        family = [i for i, j in enumerate(judgements) if j.claim.id in primary]
    p_values = [math.nan if judgements[i].verdict in (NOT_LEARNED, NO_DATA) else judgements[i].p_value
                for i in family]
    keeps = dict(zip(family, holm_rejections(p_values, alpha=1.0 - level)))
    out = []
    for i, j in enumerate(judgements):
        holm = j.verdict
        if (primary is None or i in keeps) and j.verdict in ("holds", "reversed") and not keeps.get(i, False):
            holm = "inconclusive"
        family_name = "" if primary is None else ("primary" if i in keeps else "secondary")
        out.append(replace(j, holm=holm, family=family_name))
    return out


def judge_claims(claims: Sequence[Claim], rows: Sequence[dict[str, Any]], level: float = 0.95,
                 options: JudgeOptions = JudgeOptions()) -> tuple[list[Judgement], dict[str, str]]:
    """Every claim judged under every condition (see :func:`judge_claim`); a claim that cannot be
    judged on these rows (an ambiguous side) is left out and its reason returned by claim id."""
    judgements: list[Judgement] = []
    errors: dict[str, str] = {}
    for claim in claims:
        try:
            judgements.extend(judge_claim(claim, rows, level, options))
        except ValueError as err:
            errors[claim.id] = str(err)
    return _with_holm(judgements, level, options.primary), errors
