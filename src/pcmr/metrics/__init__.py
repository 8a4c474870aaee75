"""Retrieval evaluation: R@K, ranks, R-Precision, MAP@R, PMRP, CxC/ECCV, COCO 1K/5K, hubness.

Exact, vectorised over blocks of queries, memory-bounded, on the device of the inputs. One
bidirectional driver (``evaluate_directions``) serves every protocol. Ties: every rank metric is its
exact expected value over the orders of equal scores (``pcmr.metrics.ties``), so the order in which a
dataset stores its items never changes a result. Definitions, protocols and differences from
eccv-caption: docs/metrics.md.
"""

from __future__ import annotations

from pcmr.metrics._relevance import SparseRelevance
from pcmr.metrics.defaults import COCO_NUM_FOLDS, DEFAULT_KS, HUBNESS_KS
from pcmr.metrics.driver import (
    DirectionsResult,
    evaluate_directions,
    recall_from_lists,
    rsum,
)
from pcmr.metrics.extra_positives import ExtraPositives, coco_5k_test_ids, load_extra_positives
from pcmr.metrics.hubness import hubness_skewness, hubness_sum, k_occurrence, k_occurrences, skewness
from pcmr.metrics.pmrp import pmrp
from pcmr.metrics.protocols import evaluate_coco, evaluate_retrieval, fold_indices
from pcmr.metrics.ranking import first_positive_ranks, per_query_metrics, retrieval_metrics
from pcmr.metrics.scan import PerQueryMetrics
from pcmr.metrics.topk import recall_at_k_from_topk
from pcmr.metrics.uncertainty import binary_selection_accuracy, recall_by_uncertainty

__all__ = [
    "COCO_NUM_FOLDS",
    "DEFAULT_KS",
    "HUBNESS_KS",
    "DirectionsResult",
    "ExtraPositives",
    "PerQueryMetrics",
    "SparseRelevance",
    "binary_selection_accuracy",
    "coco_5k_test_ids",
    "evaluate_coco",
    "evaluate_directions",
    "evaluate_retrieval",
    "first_positive_ranks",
    "fold_indices",
    "hubness_skewness",
    "hubness_sum",
    "k_occurrence",
    "k_occurrences",
    "load_extra_positives",
    "per_query_metrics",
    "pmrp",
    "recall_at_k_from_topk",
    "recall_by_uncertainty",
    "recall_from_lists",
    "retrieval_metrics",
    "rsum",
    "skewness",
]
