"""What a claim's models must show before the claim is judged, and what its re-rankers did.

- :func:`skill_gate`: every trained model a claim reads must rank better than the query-blind list,
  skill ``(R-P - QB) / (100 - QB)`` of at least the study's minimum on the mean over seeds, in each
  direction the claim reads. The gate reads the **model**, not what a re-ranker makes of it: a side with
  a re-ranker (IS, CSLS, a matching such as CSLS+RGM) is gated on the same model's own nearest-neighbour
  ranking (:data:`BASE_RANKING`), so a re-ranker that lowers skill is judged, not excused.
- :func:`reranked_skill`: the skill of each re-ranked side, reported beside the gate (a matching assigns
  rather than ranks and has no R-Precision of its own).
- :func:`matching_use`: how many of a matching's rows used the matching at all. RGM selects its
  ``lambda`` on validation; ``lambda = inf`` is plain top-k, no matching, so a claim about RGM says in how
  many of its rows (per direction) the selected ``lambda`` was finite (columns ``<direction>_lambda``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pcmr.evaluation.columns import query_blind_r_precision, r_precision, tuned_value
from pcmr.study.rows import Selector, matching_rows, values_by_seed

__all__ = ["BASE_RANKING", "GateFailure", "matching_use", "reranked_skill", "side_skill", "skill_gate"]

#: the re-ranker whose ranking is the trained model's own (plain nearest neighbours)
BASE_RANKING = "nns"


@dataclass(frozen=True)
class GateFailure:
    """One model (``Selector.describe()``: recipe/variant/similarity/re-ranker/relevance) that failed the
    skill gate in one direction: its skill over the query-blind ranking and the gate's minimum."""

    model: str
    direction: str
    skill: float
    min_skill: float
    note: str = ""  # where the skill was read elsewhere than the model's own ranking

    def describe(self) -> str:
        return f"{self.model} {self.direction} skill {self.skill:.3f}{self.note} < {self.min_skill:g}"


def side_skill(rows: Sequence[dict[str, Any]], side: Selector, direction: str, claim_id: str) -> float:
    """Skill ``(R-P - QB) / (100 - QB)`` of the rows of ``side`` in ``direction``, on the means over
    seeds (NaN where either column is missing)."""
    rp = values_by_seed(rows, side, r_precision(direction), claim_id)
    qb = values_by_seed(rows, side, query_blind_r_precision(direction), claim_id)
    seeds = sorted(set(rp) & set(qb))
    if not seeds:
        return math.nan
    mean_rp = math.fsum(rp[s] for s in seeds) / len(seeds)
    mean_qb = math.fsum(qb[s] for s in seeds) / len(seeds)
    return math.nan if mean_qb >= 100.0 else (mean_rp - mean_qb) / (100.0 - mean_qb)


def _model(side: Selector) -> Selector:
    """The trained model behind ``side``: its own ranking (:data:`BASE_RANKING`), metric aside."""
    return replace(side, metric=None, rerank=None if side.rerank is None else BASE_RANKING)


def skill_gate(rows: Sequence[dict[str, Any]], sides: Sequence[Selector], directions: Sequence[str],
               min_skill: float, claim_id: str) -> tuple[tuple[GateFailure, ...], str]:
    """``(failures, text)``: every trained model of ``sides`` on its own ranking, in every direction
    of ``directions``; the text names each model and direction with its skill, failures first. Rows
    without the model's own ranking fall back to the side's ranking (a matching: the ranking it is built
    from), said in the text."""
    failures: list[GateFailure] = []
    passed: list[str] = []
    seen: set[Selector] = set()
    for side in sides:
        model = _model(side)
        if model in seen:
            continue
        seen.add(model)
        for direction in directions:
            shown, skill, note = model, side_skill(rows, model, direction, claim_id), ""
            if math.isnan(skill) and side.rerank not in (None, BASE_RANKING):
                # no rows of the model's own ranking: the side's ranking (a matching: the one it is built on)
                shown = replace(side, metric=None, rerank=str(side.rerank).split("+", 1)[0])
                skill = side_skill(rows, shown, direction, claim_id)
                note = f" (no {BASE_RANKING} rows)"
            if skill >= min_skill:
                passed.append(f"{shown.describe()} {direction} skill {skill:.3f}{note}")
            else:
                failures.append(GateFailure(shown.describe(), direction, skill, min_skill, note))
    if failures:
        return tuple(failures), "; ".join(failure.describe() for failure in failures)
    return (), "; ".join(passed)


def reranked_skill(rows: Sequence[dict[str, Any]], sides: Sequence[Selector], directions: Sequence[str],
                   claim_id: str) -> str:
    """The skill of each re-ranked side (not :data:`BASE_RANKING`) in each direction, as text; a
    matching (a re-ranker ``base+matching``) has no ranking of its own and says so; "" without one."""
    parts: list[str] = []
    for side in dict.fromkeys(replace(s, metric=None) for s in sides):
        if side.rerank in (None, BASE_RANKING):
            continue
        skills = [(d, side_skill(rows, side, d, claim_id)) for d in directions]
        if all(math.isnan(s) for _, s in skills):
            parts.append(f"{side.rerank}: a matching, no ranking of its own" if "+" in str(side.rerank)
                         else f"{side.rerank}: no R-Precision")
        else:
            parts.append(f"{side.rerank} " + ", ".join(f"{d} {s:.3f}" for d, s in skills if not math.isnan(s)))
    return "; ".join(parts)


def _finite(value: Any) -> bool | None:
    """True for a finite number, False for an infinite one, None where there is none."""
    if isinstance(value, bool) or value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else not math.isinf(number)


def matching_use(rows: Sequence[dict[str, Any]], sides: Sequence[Selector], directions: Sequence[str],
                 seeds: Sequence[int]) -> tuple[str, tuple[tuple[str, int, int], ...]]:
    """``(text, counts)`` for the sides whose re-ranker is a matching (``base+matching``): per direction,
    in how many of the judged ``seeds``' rows the selected parameter (``<direction>_lambda``) was finite,
    i.e. the matching was used at all; ``counts`` holds ``(direction, used, rows)``. ("", ()) without a
    matching side or without the lambda columns."""
    counts: list[tuple[str, int, int]] = []
    texts: list[str] = []
    wanted = set(seeds)
    for side in dict.fromkeys(replace(s, metric=None) for s in sides):
        if side.rerank is None or "+" not in side.rerank:
            continue
        chosen = [r for r in matching_rows(rows, side) if int(r["seed"]) in wanted]
        for direction in directions:
            flags = [f for f in (_finite(r.get(tuned_value(direction))) for r in chosen) if f is not None]
            if flags:
                counts.append((direction, sum(flags), len(flags)))
        if counts:
            texts.append(f"{side.rerank} used in " + ", ".join(f"{d} {u} of {n}" for d, u, n in counts)
                         + " rows (lambda finite)")
    return "; ".join(texts), tuple(counts)
