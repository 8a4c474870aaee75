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
  holds or reverses and another does not agree, else ``inconclusive``; ``not learned`` when a model
  failed the gate in some cell. Every cell's own verdict, interval and gate are kept
  (``Judgement.cells``) and reported beside the overall one. Its p-value is the largest of the cells'
  (the claim is rejected only where every cell is: an intersection-union test).
- **Each claim's own test.** The p-value of a judgement is the one-sided p-value of the hypothesis the
  claim states (:func:`pcmr.study.stats.claim_p_values`: superiority over zero, non-inferiority at the
  margin, equivalence by two one-sided tests), and its verdict is that test's rejection at
  ``(1 - level) / 2``; a ``reversed`` carries the p-value of the reversal.
- **Family-wise error.** :func:`judge_claims` adds Holm's correction over the whole table at
  ``(1 - level) / 2``, on each judgement's own p-value (of the reversal for a ``reversed``): a
  ``holds`` / ``reversed`` that Holm's procedure does not reject reads ``inconclusive`` in the ``holm``
  column.
- **Models that learned.** With a skill gate (:func:`judge_claims`'s ``min_skill``, the study file's
  ``gate``), every trained model a claim reads (each side's rows, under the claim's condition and cell)
  must reach skill ``(R-P - QB) / (100 - QB)`` of at least ``min_skill`` on the mean over seeds in every
  direction the claim reads (its ``reads``; by default the direction its metric names, else both);
  otherwise it reads ``not learned``, naming the model and the direction. The gate reads each model's
  own ranking (nearest neighbours), never what a re-ranker made of it (:mod:`pcmr.study.gate`); the
  re-ranked skill is reported beside it, and a matching's rows say in how many the matching was used.
- **The null of many untrained models.** A claim with ``vs_null: true`` compares side ``a``'s seeds with a
  sample of the same statistic from many untrained initialisations of ``a``'s recipe (no pairing by
  seed): Welch's interval of the difference of means, and each seed's percentile in the null.
- **Drift of the contrast.** Where drift rows are given (the same runs trained again under another
  thread count or machine), each seed present in both has its contrast ``a - b`` computed twice; the
  claim's drift is the largest change of that contrast, and a ``holds`` or ``reversed`` whose mean
  difference is smaller reads ``equal``. A within-model contrast (two re-rankers of one run) can move far
  less than either side's level, so the level's drift is never the yardstick. Where the drift rows do
  not hold both sides, the drift is not measured and the rule does not apply.
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
from pcmr.evaluation.columns import uncertainty_agreement, uncertainty_signal
from pcmr.relevance import I2T, T2I
from pcmr.study.gate import GateFailure, matching_use, reranked_skill, skill_gate
from pcmr.study.rows import SELECT_FIELDS, Selector, matching_rows, number, values_by_seed
from pcmr.study.stats import (
    EXPECTATIONS,
    Interval,
    claim_p_values,
    holm_rejections,
    null_percentile,
    one_sided_alpha,
    paired_interval,
    verdict,
    welch_interval,
)

__all__ = ["AGREEMENT_MIN", "ANY_RELEVANCE", "Claim", "DIRECTIONS", "GateFailure", "JudgeOptions", "Judgement",
           "NOT_LEARNED", "Selector", "judge_claim", "judge_claims", "parse_claims", "NO_DATA", "NO_SIGNAL",
           "SIGNAL_SIDES", "UNSTABLE"]

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
    pilot_sd: float = math.nan  # sd of the pilot's per-seed differences the seeds were sized from
    seeds_needed: int = 0  # the seeds that sd needs at the study's power (0: not sized)

    def directions(self) -> tuple[str, ...]:
        """The directions the skill gate reads: ``reads``, else the metric's prefix, else both."""
        if self.reads:
            return self.reads
        prefix = self.metric.split("_", 1)[0]
        return (prefix,) if prefix in DIRECTIONS else DIRECTIONS


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
    #: one-sided p-value of the hypothesis the claim states (the largest over the cells of a swept claim)
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
    #: the drift of the claim's contrast: the largest change of a - b over the seeds run twice (NaN: not
    #: measured)
    drift: float = math.nan
    #: "primary" or "secondary" where the study lists its primary claims, else ""
    family: str = ""
    #: one-sided p-value of the reversal of the claim (the largest over the cells of a swept claim)
    p_reversed: float = math.nan
    #: per seed run twice: (seed, a - b in the study, a - b in the drift run)
    drift_seeds: tuple[tuple[int, float, float], ...] = ()
    #: the skill of each re-ranked side (the gate reads the model's own ranking)
    reranked: str = ""
    #: for a matching re-ranker: in how many rows it was used at all, per direction (used, rows)
    matching: str = ""
    matching_counts: tuple[tuple[str, int, int], ...] = ()


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
    power: _PowerFields | None = None


@dataclass
class _PowerFields:
    """``power: {pilot_sd, seeds}`` of a claim: the pilot's sd of per-seed differences and the seeds it
    needs (checked against the study's ``power`` section by ``pcmr.study.power``)."""

    pilot_sd: float = math.nan
    seeds: int = 0


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
        pilot_sd, seeds_needed = math.nan, 0
        if fields.power is not None:
            pilot_sd, seeds_needed = float(fields.power.pilot_sd), fields.power.seeds
            if not pilot_sd >= 0 or math.isinf(pilot_sd):
                raise ValueError(f"{here}.power.pilot_sd: expected a finite number >= 0, got {pilot_sd!r}")
            if isinstance(seeds_needed, bool) or not isinstance(seeds_needed, int) or seeds_needed < 2:
                raise ValueError(f"{here}.power.seeds: expected an integer >= 2, got {seeds_needed!r}")
            if margin == 0 and min_effect == 0:
                raise ValueError(f"{here}.power: a claim sized for power needs a min_effect or a margin")
        claims.append(Claim(fields.id, fields.paper, fields.statement, fields.metric, a, b, fields.expect,
                            float(margin), fields.signal, float(min_effect), cells, reads, bool(fields.vs_null),
                            pilot_sd, seeds_needed))
    return tuple(claims)


def _without_signal(rows: Sequence[dict[str, Any]], selector: Selector, claim: Claim, seeds: Sequence[int]) -> bool:
    """True when a head the claim reads agrees across seeds less than :data:`AGREEMENT_MIN`
    (``<side>_uncertainty_agreement``); results without that column fall back to the per-run gate
    (``<side>_uncertainty_signal`` of 0 in some seed); rows with neither are not gated."""
    for side in SIGNAL_SIDES[claim.signal]:
        agreement = values_by_seed(rows, selector, uncertainty_agreement(side), claim.id)
        if agreement:
            if any(agreement.get(seed, math.inf) < AGREEMENT_MIN for seed in seeds):
                return True
            continue
        values = values_by_seed(rows, selector, uncertainty_signal(side), claim.id)
        if any(values.get(seed) == 0.0 for seed in seeds):
            return True
    return False


@dataclass(frozen=True)
class JudgeOptions:
    """What a study adds to the paired rule (all optional): the skill gate's ``min_skill``, the null
    sample rows (``recipe``, ``relevance``, statistic columns; one row per untrained initialisation), the
    result rows of the drift runs (the same runs trained again under another thread count or machine),
    the ids of the primary claims (Holm runs over them alone), and ``null_source``: recipe -> the recipe
    whose null it reads (a head that differs only by a constant shift of log det shares its null)."""

    min_skill: float | None = None
    null_rows: Sequence[dict[str, Any]] = ()
    drift_rows: Sequence[dict[str, Any]] = ()
    primary: tuple[str, ...] | None = None
    null_source: dict[str, str] = field(default_factory=dict)


def _null_values(claim: Claim, a: Selector, options: JudgeOptions) -> list[float]:
    """The null sample of ``claim``'s metric for side ``a``'s recipe (and relevance, where pinned)."""
    metric = a.metric or claim.metric
    recipe = options.null_source.get(str(a.recipe), a.recipe)
    out = []
    for row in options.null_rows:
        if str(row.get("recipe")) != recipe:
            continue
        if a.relevance is not None and row.get("relevance") not in (None, "", a.relevance):
            continue
        value = number(row.get(metric))
        if value is not None:
            out.append(value)
    return out


def _contrast_drift(claim: Claim, a: Selector, b: Selector | None, study: dict[int, float], null_mean: float,
                    options: JudgeOptions) -> tuple[float, tuple[tuple[int, float, float], ...]]:
    """``(drift, per seed)``: the contrast ``a - b`` of each seed found in the drift rows (against the
    same null mean, or zero, where the claim has no side b) beside its value in the study (``study``:
    seed -> a - b), and the largest change; NaN where the drift rows hold no seed of both sides."""
    if not options.drift_rows:
        return math.nan, ()
    a_again = values_by_seed(options.drift_rows, a, a.metric or claim.metric, claim.id)
    if claim.null:
        b_again = dict.fromkeys(a_again, null_mean)
    elif b is None:
        b_again = dict.fromkeys(a_again, 0.0)
    else:
        b_again = values_by_seed(options.drift_rows, b, b.metric or claim.metric, claim.id)
    seeds = sorted(set(a_again) & set(b_again) & set(study))
    per_seed = tuple((s, study[s], a_again[s] - b_again[s]) for s in seeds)
    return (max(abs(x - y) for _, x, y in per_seed) if per_seed else math.nan), per_seed


def _judge_condition(claim: Claim, rows: Sequence[dict[str, Any]], a: Selector, b: Selector | None,
                     condition: dict[str, str], level: float,
                     options: JudgeOptions = JudgeOptions()) -> tuple[Judgement, tuple[Any, ...]]:
    """One judgement, and the values it was made from (to find duplicates)."""
    a_values = values_by_seed(rows, a, a.metric or claim.metric, claim.id)
    percentiles: tuple[float, ...] = ()
    null_size = 0
    if claim.null:
        null = _null_values(claim, a, options)
        seeds = tuple(sorted(a_values)) if null else ()
        interval = welch_interval([a_values[s] for s in seeds], null, level)[0] if null else \
            paired_interval([], [], level)
        percentiles = tuple(null_percentile(a_values[s], null) for s in seeds)
        null_size = len(null)
        pairs: tuple[Any, ...] = tuple((s, a_values[s]) for s in seeds)
        mean_b = math.fsum(null) / len(null) if null else math.nan
    else:
        b_values = dict.fromkeys(a_values, 0.0) if b is None else values_by_seed(rows, b, b.metric or claim.metric,
                                                                                   claim.id)
        seeds = tuple(sorted(set(a_values) & set(b_values)))
        pairs = tuple((s, a_values[s], b_values[s]) for s in seeds)
        interval = paired_interval([a_values[s] for s in seeds], [b_values[s] for s in seeds], level)
        mean_b = math.fsum(b_values[s] for s in seeds) / len(seeds) if seeds else math.nan
    p_value, p_reversed = claim_p_values(interval, claim.expect, claim.margin)
    outcome = NO_DATA if not seeds else verdict(interval, claim.expect, claim.margin, claim.min_effect)
    contrast = {p[0]: (p[1] - mean_b if claim.null else p[1] - (p[2] if len(p) > 2 else 0.0)) for p in pairs}
    drift, drift_seeds = _contrast_drift(claim, a, b, contrast, mean_b, options)
    if outcome in ("holds", "reversed") and abs(interval.mean) < drift:
        outcome = "equal"  # an effect inside the drift of its own contrast is no effect
    ungated, gate_text = "", ""
    failures: tuple[GateFailure, ...] = ()
    sides = [a] if b is None or claim.null else [a, b]
    if seeds and _without_signal(rows, a, claim, seeds):
        outcome, ungated = NO_SIGNAL, outcome
    if options.min_skill is not None and seeds:
        failures, gate_text = skill_gate(rows, sides, claim.directions(), options.min_skill, claim.id)
        if failures:
            outcome, ungated = NOT_LEARNED, ungated or outcome
    matching, counts = matching_use(rows, sides, claim.directions(), seeds)
    mean_a = math.fsum(a_values[s] for s in seeds) / len(seeds) if seeds else math.nan
    judgement = Judgement(claim, condition, a, b, interval, outcome, seeds, ungated, p_value,
                          mean_a=mean_a, mean_b=mean_b, gate=gate_text, gate_failures=failures,
                          null_percentiles=percentiles, null_size=null_size, drift=drift,
                          p_reversed=p_reversed, drift_seeds=drift_seeds,
                          reranked=reranked_skill(rows, sides, claim.directions(), claim.id) if seeds else "",
                          matching=matching, matching_counts=counts)
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
    reversals = [j.p_reversed for j in cells]
    p_reversed = math.nan if any(math.isnan(p) for p in reversals) else max(reversals)
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
                     null_size=first.null_size,
                     drift=max((j.drift for j in cells if not math.isnan(j.drift)), default=math.nan),
                     p_reversed=p_reversed, drift_seeds=tuple(d for j in cells for d in j.drift_seeds),
                     reranked="; ".join(f"{j.condition.get('variant', '?')}: {j.reranked}" for j in cells if j.reranked),
                     matching="; ".join(f"{j.condition.get('variant', '?')}: {j.matching}" for j in cells if j.matching),
                     matching_counts=_summed_counts(cells))


def _summed_counts(cells: Sequence[Judgement]) -> tuple[tuple[str, int, int], ...]:
    """A matching's (direction, used, rows) summed over a swept claim's cells."""
    total: dict[str, tuple[int, int]] = {}
    for cell in cells:
        for direction, used, count in cell.matching_counts:
            before = total.get(direction, (0, 0))
            total[direction] = (before[0] + used, before[1] + count)
    return tuple((d, u, n) for d, (u, n) in total.items())


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
        values = {str(r.get(f)) for r in matching_rows(rows, claim.a) if r.get(f) not in (None, "")}
        if side_b is not None:
            values &= {str(r.get(f)) for r in matching_rows(rows, side_b) if r.get(f) not in (None, "")}
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


def _holm_p(judgement: Judgement) -> float:
    """The p-value a judgement enters Holm's procedure with: of its reversal for a ``reversed``, of the
    claim's own hypothesis otherwise; NaN (never rejected) where it was not learned or has no data."""
    if judgement.verdict in (NOT_LEARNED, NO_DATA):
        return math.nan
    return judgement.p_reversed if judgement.verdict == "reversed" else judgement.p_value


def _with_holm(judgements: list[Judgement], level: float, primary: tuple[str, ...] | None = None) -> list[Judgement]:
    """Each judgement with its verdict after Holm's correction at the one-sided level ``(1 - level) / 2``
    (each p-value is one-sided, :func:`_holm_p`): over every judgement with data, or, with ``primary``,
    over the primary claims' judgements alone (the others read uncorrected, marked secondary). A
    judgement that was not learned counts in the family with no rejection."""
    if primary is None:
        family = [i for i, j in enumerate(judgements) if j.verdict not in (NO_DATA,)]
    else:
        family = [i for i, j in enumerate(judgements) if j.claim.id in primary]
    p_values = [_holm_p(judgements[i]) for i in family]
    keeps = dict(zip(family, holm_rejections(p_values, alpha=one_sided_alpha(level))))
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
