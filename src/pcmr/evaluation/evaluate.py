"""``evaluate_embeddings``: the evaluation table of encoded images and captions for every requested
similarity x re-ranker (the model-level entries, ``RetrievalEvaluator`` and its shorthand
``evaluate_model`` in :mod:`pcmr.evaluation.evaluator`, encode a split and call it).

It checks its input, scores the rows (:mod:`pcmr.evaluation.rows`: each similarity's score matrix
once per evaluation, from the :class:`~pcmr.evaluation.score_cache.ScoreCache` shared by the
relevance modes), then runs the registered producers (:mod:`pcmr.evaluation.producers`: the
abstention columns and the figures) and writes the report's notes. A row per (similarity, re-ranker):

- re-rankers that return scores (``nns``, ``is``, ``csls``): every metric on the re-scored matrix --
  R@K, R-Precision, MAP@R, PMRP (where labels exist), extra positive sets, folds, hubness;
- matchings (``gm``, ``rgm`` and compositions such as ``csls+rgm``) give top-k lists only: R@K from
  the run with ``k = K`` and N_k from the same lists; R-Precision, MAP@R, PMRP and folds need a
  ranking of the whole gallery and are left empty. A matching's tuned parameter (RGM's lambda) is
  chosen per direction on the validation split (``select_lambda``, sum of R@K) or taken from
  ``rerank_options``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

import pcmr.evaluation.standard_producers  # noqa: F401  (registers the built-in producers)
from pcmr.encode.checks import check_finite_embeddings
from pcmr.evaluation.columns import EVALUATION_COLUMNS, format_number
from pcmr.evaluation.producers import EvaluationContext, run_producers
from pcmr.evaluation.rows import score_rows
from pcmr.evaluation.score_cache import ScoreCache
from pcmr.evaluation.settings import EvaluationSettings, check_setting_names, setting_names
from pcmr.gaussian import Gaussian
from pcmr.inference import DEFAULT_LAMBDA_GRID, get_reranker, list_rerankers
from pcmr.metrics import HUBNESS_KS
from pcmr.metrics.defaults import DEFAULT_RERANKERS, DEFAULT_SIMILARITIES
from pcmr.report import Report
from pcmr.scoring import check_names
from pcmr.similarity import list_similarities

__all__ = ["evaluate_embeddings", "ScoreCache", "DEFAULT_SIMILARITIES", "DEFAULT_RERANKERS",
           "DEFAULT_LAMBDA_GRID"]


def _check_inputs(images: Gaussian, captions: Gaussian, relevance: Tensor, num_folds: int | None) -> None:
    check_finite_embeddings(images, captions, "the embeddings given to evaluate_embeddings")
    if relevance.dtype != torch.bool or tuple(relevance.shape) != (images.num, captions.num):
        raise ValueError(f"relevance must be a BoolTensor [{images.num}, {captions.num}], got "
                         f"{relevance.dtype} {tuple(relevance.shape)}")
    if num_folds is not None and (isinstance(num_folds, bool) or not isinstance(num_folds, int) or num_folds < 1
                                  or images.num % num_folds):
        raise ValueError(f"num_folds must be a positive integer dividing the {images.num} images, got {num_folds!r}")


def _final_notes(context: EvaluationContext) -> None:
    """The report's closing meta: the selected lambdas, and the notes on hubness, folds and matchings."""
    result, notes, num_folds = context.report, context.notes, context.num_folds
    result.meta["about"] = [f"lambda selected on the validation split for {name}: {format_number(value, 3)}"
                            for name, value in result.meta["selected_lambda"].items()]
    if not result.rows:
        notes.append("no (similarity, re-ranker) pair could be evaluated; see Skipped")
    if context.hubness_ks:
        notes.append(f"hs-sum: sum of the skewness of N_k for k = {', '.join(map(str, context.hubness_ks))} over "
                     "both directions; a constant N_k (no hubs at all) counts as skewness 0")
    if num_folds is not None:
        result.meta["num_folds"] = num_folds
        notes.append(f"folds: R@K and rsum averaged over {num_folds} consecutive folds of "
                     f"{context.images.num // num_folds} images and their captions, each re-scored on its own "
                     "(COCO 1K protocol when 5 folds of 5K-test)")
    if any(not get_reranker(r).returns_scores for r in context.rerankers):
        notes.append("matching re-rankers (gm/rgm) return top-k lists: R@K from the run with k = K; "
                     "R-Precision, MAP@R and PMRP need a full ranking and are left empty")


def evaluate_embeddings(images: Gaussian, captions: Gaussian, relevance: Tensor, *,
                        settings: EvaluationSettings | None = None,
                        similarity_options: dict[str, dict[str, Any]] | None = None,
                        image_labels: Tensor | None = None, caption_labels: Tensor | None = None,
                        val: tuple[Gaussian, Gaussian, Tensor] | None = None, extra_positives: Sequence[Any] = (),
                        num_folds: int | None = None, meta: dict[str, Any] | None = None,
                        hubness_ks: Sequence[int] = HUBNESS_KS, shared: ScoreCache | None = None,
                        **keywords: Any) -> Report:
    """The evaluation table of already encoded embeddings.

    Args:
        images: ``Gaussian [N_img, D]``; captions: ``Gaussian [N_cap, D]``.
        relevance: BoolTensor ``[N_img, N_cap]``, the ground-truth relation.
        settings: what is scored and how (:class:`~pcmr.evaluation.settings.EvaluationSettings`:
            ``similarities``, ``rerankers``, ``rerank_options``, ``ks``, ``lambda_grid``,
            ``uncertainty_measure``, ``seed``, ``figures``, ``progress``), declared there once with their
            defaults; ``keywords`` are the same settings given one by one (they override ``settings``),
            and an unknown one is a TypeError naming it with its near miss.
        similarity_options: options per similarity (e.g. the learned ``{"match_prob": {"a": .., "b": ..}}``).
        image_labels / caption_labels: BoolTensor ``[N, C]`` class labels for PMRP (both or neither).
        val: ``(images, captions, relevance)`` of the validation split, for RGM's lambda.
        extra_positives: ``pcmr.metrics.ExtraPositives`` sets (CxC, ECCV Caption) evaluated on the full
            re-scored matrices: columns ``{i2t,t2i}_{set}_R@k``, ``_r_precision`` (RPC² for CxC), ``_map_at_r``.
        num_folds: also report R@K and rsum averaged over this many consecutive image folds
            (``folds_*`` columns; 5 on COCO 5K-test is the COCO 1K protocol), for the re-rankers
            that re-score a full matrix (matching re-rankers get ``None``).
        hubness_ks: the k of the hubness columns (``()``: no ``hs_sum``).
        shared: the :class:`~pcmr.evaluation.score_cache.ScoreCache` of earlier calls on the same
            embeddings, options and seed (other relevance modes), reused and completed here.
    The progress setting prints, unless False, a start line and a timed finish line per similarity on
    stderr (:func:`pcmr.progress.status_line`).
    """
    check_setting_names(keywords, setting_names())
    chosen = replace(settings or EvaluationSettings(), **keywords)
    _check_inputs(images, captions, relevance, num_folds)
    similarities = check_names("similarity", chosen.similarities, list_similarities())
    rerankers = check_names("re-ranker", chosen.rerankers, list_rerankers())
    device = images.device
    if image_labels is not None and caption_labels is not None:
        image_labels, caption_labels = image_labels.to(device), caption_labels.to(device)
    else:
        image_labels = caption_labels = None
    result = Report(title="pcmr evaluation", schema=EVALUATION_COLUMNS, meta={
        **(meta or {}), "num_images": images.num, "num_captions": captions.num,
        "uncertainty_measure": chosen.uncertainty_measure, "similarity_options": {}, "selected_lambda": {},
        "notes": []})
    context = EvaluationContext(
        images, captions, relevance.to(device), chosen, similarities, rerankers,
        {k: dict(v) for k, v in (similarity_options or {}).items()},
        {k: dict(v) for k, v in (chosen.rerank_options or {}).items()}, image_labels, caption_labels, val,
        extra_positives, num_folds, tuple(hubness_ks), ScoreCache() if shared is None else shared, result)
    score_rows(context)
    run_producers(context)
    _final_notes(context)
    return result
