"""Validation during training: the retrieval metrics of the validation split under one score.

Model selection uses the evaluator's primary metric, named by ``train.select_on``: ``rsum`` (sum of
R@1/5/10 in both directions, docs/metrics.md) or the mean ``r_precision`` of both directions (PCME
Sec. 4.1.1; :data:`pcmr.evaluation.evaluator.SELECTION_METRICS`). The numbers come from the one evaluator,
:class:`pcmr.evaluation.RetrievalEvaluator`, with one similarity, no re-ranking, the split's exact
relation, and neither figures nor hubness columns.

A degenerate score (constant, or most queries' top scores tied; ``pcmr.evaluation.degenerate``) ranks
nothing, so no model is selected on it: validation then falls back to ``cosine`` of the means (always
defined), says so on stderr and in the returned ``fallback`` entry, and model selection uses those numbers.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn

from pcmr.data.batching import ENCODE_BATCH_SIZE
from pcmr.data.split import RetrievalSplit
from pcmr.data.text import Vocabulary
from pcmr.evaluation.evaluator import PRIMARY_METRIC, SELECTION_METRICS, RetrievalEvaluator, selection_value
from pcmr.evaluation.relevance_modes import relevance_modes
from pcmr.metrics import DEFAULT_KS

__all__ = ["validate", "FALLBACK_SIMILARITY"]

#: the score validation falls back to when the requested one is degenerate
FALLBACK_SIMILARITY = "cosine"


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

    Returns ``{"i2t_R@1", ..., "t2i_R@10", "i2t_r_precision", "t2i_r_precision", "rsum",
    "r_precision"}`` in percent (``r_precision`` is the mean of both directions); the value the model
    is selected on is under ``primary_metric``, the evaluator's primary metric. ``fallback`` is 1.0 when
    ``similarity`` was degenerate and the numbers are those of :data:`FALLBACK_SIMILARITY`.
    Sampled scores (``match_prob``) draw from a generator seeded with ``seed`` so that the
    same weights always give the same numbers; the global RNG is left untouched.
    """

    row = _validation_row(model, split, vocab, similarity, similarity_options, batch_size, seed, primary_metric)
    fallback = 0.0
    if row.get("warning") and similarity != FALLBACK_SIMILARITY:
        print(f"warning: validation with {similarity}: {row['warning']}; model selection uses "
              f"{FALLBACK_SIMILARITY} of the means for this validation instead", file=sys.stderr, flush=True)
        row = _validation_row(model, split, vocab, FALLBACK_SIMILARITY, {}, batch_size, seed, primary_metric)
        fallback = 1.0
    metrics: dict[str, float] = {}
    for direction in ("i2t", "t2i"):
        for key in (*(f"R@{k}" for k in DEFAULT_KS), "r_precision"):
            metrics[f"{direction}_{key}"] = float(row[f"{direction}_{key}"])
    for name in SELECTION_METRICS:  # both are logged; the run is selected on evaluator.primary_metric
        metrics[name] = selection_value(row, name)
    metrics["fallback"] = fallback
    return metrics


def _validation_row(model: nn.Module, split: RetrievalSplit, vocab: Vocabulary, similarity: str,
                    similarity_options: dict[str, Any] | None, batch_size: int, seed: int,
                    primary_metric: str) -> dict[str, Any]:
    """The one evaluation row of ``similarity`` (nns, the split's exact relation)."""
    evaluator = RetrievalEvaluator(split, similarities=[similarity], rerankers=["nns"],
                                   relevance_modes=[_exact_mode(split)], batch_size=batch_size, seed=seed,
                                   figures=False, corruption=False, hubness=False, extra_positives=[],
                                   primary_metric=primary_metric)
    with torch.random.fork_rng(devices=[]):
        report = evaluator.evaluate(model, vocab, {similarity: dict(similarity_options or {})})
    if not report.rows:
        reasons = "; ".join(item["reason"] for item in report.skipped) or "no row"
        raise ValueError(f"validation with similarity {similarity!r} is impossible: {reasons}")
    return dict(report.rows[0])


def _exact_mode(split: RetrievalSplit) -> str:
    """The mode of the split's own relation (``exact``, or ``source`` where the split knows only
    the written pairs: then both are the same relation)."""
    return next(iter(relevance_modes(split)))
