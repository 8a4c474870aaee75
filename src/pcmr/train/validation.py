"""Validation during training: the retrieval metrics of the validation split under one score.

Model selection uses the evaluator's primary metric, named by ``train.select_on``: rsum (sum of
R@1/5/10 in both directions, docs/metrics.md) or the mean R-Precision of both directions (PCME
Sec. 4.1.1; ``pcmr.evaluation.columns.SELECTION_METRICS``). The numbers come from the one evaluator,
:class:`pcmr.evaluation.RetrievalEvaluator`, with one similarity, no re-ranking, the split's exact
relation, and neither figures nor hubness columns.

A degenerate score (constant, or most queries' top scores tied across a wide part of the gallery;
``pcmr.evaluation.table.degenerate_score_warning``) ranks nothing, so no model is selected on it: validation then falls back
to ``cosine`` of the means (always defined), says so on stderr and in the returned ``fallback`` entry,
and model selection uses those numbers.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

import torch

from pcmr.data.batching import ENCODE_BATCH_SIZE
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import Vocabulary
from pcmr.evaluation.columns import validation_metrics
from pcmr.evaluation.evaluator import PRIMARY_METRIC, RetrievalEvaluator, relevance_modes
from pcmr.hub import Model
from pcmr.inference import NO_RERANKING
from pcmr.models.model import RetrievalModel

__all__ = ["validate", "validate_with", "validation_evaluator", "FALLBACK_SIMILARITY"]

#: the score validation falls back to when the requested one is degenerate
FALLBACK_SIMILARITY = "cosine"


def validation_evaluator(split: RetrievalSplit, similarity: str, *, batch_size: int = ENCODE_BATCH_SIZE,
                         seed: int = 0, primary_metric: str = PRIMARY_METRIC) -> RetrievalEvaluator:
    """The evaluator of training's validation: one similarity, no re-ranking, the split's exact
    relation, neither figures nor hubness columns; model selection reads its
    :meth:`~RetrievalEvaluator.primary_value` and :meth:`~RetrievalEvaluator.improves`."""
    return RetrievalEvaluator(split, similarities=[similarity], rerankers=[NO_RERANKING],
                              relevance_modes=[_exact_mode(split)], batch_size=batch_size, seed=seed,
                              figures=False, corruption=False, hubness=False, extra_positives=[],
                              primary_metric=primary_metric)


def validate(
    model: RetrievalModel,
    split: RetrievalSplit,
    vocab: Vocabulary,
    *,
    similarity: str,
    similarity_options: dict[str, Any] | None = None,
    batch_size: int = ENCODE_BATCH_SIZE,
    seed: int = 0,
    primary_metric: str = PRIMARY_METRIC,
) -> dict[str, float]:
    """Retrieval metrics of ``model`` on ``split`` under one pairwise score.

    Returns :func:`pcmr.evaluation.columns.validation_metrics` of the row: R@K and R-Precision per
    direction, and both selection metrics (rsum and the mean R-Precision of both directions), in
    percent; the model is selected on ``primary_metric``, the evaluator's primary metric. ``fallback``
    is 1.0 when ``similarity`` was degenerate and the numbers are those of :data:`FALLBACK_SIMILARITY`.
    Sampled scores (``match_prob``) draw from a generator seeded with ``seed`` so that the
    same weights always give the same numbers; the global RNG is left untouched.
    """
    evaluator = validation_evaluator(split, similarity, batch_size=batch_size, seed=seed,
                                     primary_metric=primary_metric)
    return validate_with(Model(model, vocab, similarity_options={similarity: dict(similarity_options or {})}),
                         evaluator)


def validate_with(model: Model, evaluator: RetrievalEvaluator) -> dict[str, float]:
    """:func:`validate` of a :class:`pcmr.Model` with the evaluator given (:func:`validation_evaluator`: its
    one similarity, scored with the model's trained parameters of that similarity, if any)."""
    similarity = evaluator.similarities[0]
    row = _validation_row(model, evaluator)
    fallback = 0.0
    if row.get("warning") and similarity != FALLBACK_SIMILARITY:
        print(f"warning: validation with {similarity}: {row['warning']}; model selection uses "
              f"{FALLBACK_SIMILARITY} of the means for this validation instead", file=sys.stderr, flush=True)
        row = _validation_row(model, replace(evaluator, similarities=[FALLBACK_SIMILARITY]))
        fallback = 1.0
    return {**validation_metrics(row), "fallback": fallback}


def _validation_row(model: Model, evaluator: RetrievalEvaluator) -> dict[str, Any]:
    """The one evaluation row of the evaluator's similarity (no re-ranking, the split's exact relation)."""
    similarity = evaluator.similarities[0]
    with torch.random.fork_rng(devices=[]):
        report = evaluator.evaluate(model)
    if not report.rows:
        reasons = "; ".join(item["reason"] for item in report.skipped) or "no row"
        raise ValueError(f"validation with similarity {similarity!r} is impossible: {reasons}")
    return dict(report.rows[0])


def _exact_mode(split: RetrievalSplit) -> str:
    """The mode of the split's own relation (``exact``, or ``source`` where the split knows only
    the written pairs: then both are the same relation)."""
    return next(iter(relevance_modes(split)))
