"""Evaluation of a trained model on a retrieval split: the table of retrieval metrics (docs/metrics.md) for every
requested similarity x re-ranker, a :class:`pcmr.report.Report` saved as Markdown, CSV, JSON and PNG plots.

    from pcmr.evaluation import RetrievalEvaluator
    evaluator = RetrievalEvaluator(test_split, val_split=val_split)
    result = evaluator.evaluate(pcmr.Model(network, vocab, similarity_options={"match_prob": {"a": 12.0, "b": 4.0}}))
    print(result.to_markdown()); result.save("eval/")

Training validation, ``pcmr evaluate``, ``pcmr demo`` and ``pcmr study`` all evaluate through
:class:`RetrievalEvaluator` (``evaluate_model`` is a one-call shorthand for it); the settings they share
are declared once, in :class:`EvaluationSettings`.

The library part of pcmr: it never imports ``pcmr.train`` or ``pcmr.cli``.
"""

from __future__ import annotations

from pcmr.encode.inputs import encode_image_files, encode_split, encode_texts
from pcmr.evaluation.evaluator import (
    EncodedEvaluation,
    ExtraColumns,
    RetrievalEvaluator,
    evaluate_embeddings,
    evaluate_model,
)
from pcmr.evaluation.table import EvaluationSettings
from pcmr.inference import DEFAULT_LAMBDA_GRID
from pcmr.metrics.defaults import DEFAULT_RERANKERS, DEFAULT_SIMILARITIES
from pcmr.scoring import rerank_topk, score_matrix, unsupported_reason

__all__ = [
    "DEFAULT_LAMBDA_GRID",
    "DEFAULT_RERANKERS",
    "DEFAULT_SIMILARITIES",
    "EncodedEvaluation",
    "EvaluationSettings",
    "ExtraColumns",
    "RetrievalEvaluator",
    "encode_image_files",
    "encode_split",
    "encode_texts",
    "evaluate_embeddings",
    "evaluate_model",
    "rerank_topk",
    "score_matrix",
    "unsupported_reason",
]
