"""Claims of the papers as data, judged from paired seeds.

A claim compares a metric between two conditions ``a`` and ``b``. Each condition is a
:class:`Selector` of result rows (recipe, variant, similarity, re-ranker, relevance mode, and
optionally its own metric); a field ``b`` leaves out is taken from ``a``, and a claim without
``b`` compares ``a`` with zero. Fields neither side pins among ``variant`` and ``relevance`` are
judged once per value found in the results (e.g. once per training-relevance variant). For each
seed present on both sides the difference ``a - b`` is taken; its mean, paired t-interval and
verdict come from :mod:`pcmr.study.stats`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pcmr.config import ConfigError, build_dataclass
from pcmr.evaluation.columns import uncertainty_signal
from pcmr.study.stats import EXPECTATIONS, Interval, paired_interval, verdict

__all__ = ["Claim", "Judgement", "Selector", "judge_claim", "judge_claims", "parse_claims", "NO_DATA", "NO_SIGNAL",
           "SIGNAL_SIDES"]

SELECT_FIELDS = ("recipe", "variant", "similarity", "rerank", "relevance")
EXPANDED_FIELDS = ("variant", "relevance")
#: verdict of a claim with no seed measured on both sides
NO_DATA = "no data"
#: verdict of a claim about what an uncertainty means, on runs whose uncertainty head learned nothing
#: (``pcmr.metrics.signal``): any seed of side ``a`` without signal in the modality the claim reads
NO_SIGNAL = "no signal"
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
        a = _check_selector(fields.a, f"{here}.a")
        b = _check_selector(fields.b, f"{here}.b") if fields.b is not None else None
        claims.append(Claim(fields.id, fields.paper, fields.statement, fields.metric, a, b, fields.expect,
                            float(margin), fields.signal))
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
    """True when some seed's rows of ``selector`` record no trained signal (``<side>_uncertainty_signal``
    of 0) for a head the claim reads; rows without the column (older results) are not gated."""
    for side in SIGNAL_SIDES[claim.signal]:
        values = _values_by_seed(rows, selector, uncertainty_signal(side), claim.id)
        if any(values.get(seed) == 0.0 for seed in seeds):
            return True
    return False


def judge_claim(claim: Claim, rows: Sequence[dict[str, Any]], level: float = 0.95) -> list[Judgement]:
    """Judge ``claim`` on result rows (dicts with ``seed``, the selector fields and metrics)."""
    side_b = claim.b
    if side_b is not None:  # fields b leaves out come from a
        side_b = replace(side_b, **{f: getattr(claim.a, f) for f in SELECT_FIELDS + ("metric",)
                                    if getattr(side_b, f) is None})
    free = [f for f in EXPANDED_FIELDS if getattr(claim.a, f) is None and (side_b is None or getattr(side_b, f) is None)]
    choices = []
    for f in free:  # values of the field found on both sides
        values = {str(r.get(f)) for r in _matching(rows, claim.a) if r.get(f) not in (None, "")}
        if side_b is not None:
            values &= {str(r.get(f)) for r in _matching(rows, side_b) if r.get(f) not in (None, "")}
        choices.append(sorted(values))
    if any(not values for values in choices):  # some field has no value measured on both sides
        empty = paired_interval([], [], level)
        return [Judgement(claim, {}, claim.a, side_b, empty, NO_DATA, ())]
    out = []
    for combo in itertools.product(*choices):
        condition = dict(zip(free, combo))
        a = replace(claim.a, **condition)
        a_values = _values_by_seed(rows, a, a.metric or claim.metric, claim.id)
        b = replace(side_b, **condition) if side_b is not None else None
        b_values = dict.fromkeys(a_values, 0.0) if b is None else _values_by_seed(rows, b, b.metric or claim.metric,
                                                                                   claim.id)
        seeds = tuple(sorted(set(a_values) & set(b_values)))
        interval = paired_interval([a_values[s] for s in seeds], [b_values[s] for s in seeds], level)
        outcome = NO_DATA if not seeds else verdict(interval, claim.expect, claim.margin)
        ungated = ""
        if seeds and _without_signal(rows, a, claim, seeds):
            outcome, ungated = NO_SIGNAL, outcome
        out.append(Judgement(claim, condition, a, b, interval, outcome, seeds, ungated))
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
    return judgements, errors
