"""Validation during training: the retrieval metrics of the validation split under one score.

Model selection uses the evaluator's primary metric, named by ``train.select_on``: rsum (sum of
R@1/5/10 in both directions, docs/metrics.md) or the mean R-Precision of both directions (PCME
Sec. 4.1.1; ``pcmr.evaluation.columns.SELECTION_METRICS``). The numbers come from the one evaluator,
:class:`pcmr.evaluation.RetrievalEvaluator`, with one similarity, no re-ranking, the split's exact
relation, and neither figures nor hubness columns.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pcmr.data.batching import ENCODE_BATCH_SIZE
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import Vocabulary
from pcmr.evaluation.columns import validation_metrics
from pcmr.evaluation.evaluator import PRIMARY_METRIC, RetrievalEvaluator
from pcmr.evaluation.relevance_modes import relevance_modes
from pcmr.inference import NO_RERANKING

__all__ = ["validate"]


def validate(
    model: nn.Module,
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
    percent; the model is selected on ``primary_metric``, the evaluator's primary metric.
    Sampled scores (``match_prob``) draw from a generator seeded with ``seed`` so that the
    same weights always give the same numbers; the global RNG is left untouched.
    """

    evaluator = RetrievalEvaluator(split, similarities=[similarity], rerankers=[NO_RERANKING],
                                   relevance_modes=[_exact_mode(split)], batch_size=batch_size, seed=seed,
                                   figures=False, corruption=False, hubness=False, extra_positives=[],
                                   primary_metric=primary_metric)
    with torch.random.fork_rng(devices=[]):
        report = evaluator.evaluate(model, vocab, {similarity: dict(similarity_options or {})})
    if not report.rows:
        reasons = "; ".join(item["reason"] for item in report.skipped) or "no row"
        raise ValueError(f"validation with similarity {similarity!r} is impossible: {reasons}")
    return validation_metrics(report.rows[0])


def _exact_mode(split: RetrievalSplit) -> str:
    """The mode of the split's own relation (``exact``, or ``source`` where the split knows only
    the written pairs: then both are the same relation)."""
    return next(iter(relevance_modes(split)))
