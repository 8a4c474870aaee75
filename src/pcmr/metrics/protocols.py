"""The COCO 5K / 1K protocols and the folds, on top of the one driver (``pcmr.metrics.driver``).

``S[i, c]``: image->text ranks the rows of S, text->image the rows of ``S.T``. One blocked pass per
direction serves the main relation, any extra positive sets (CxC, ECCV Caption) and the hubness
counts. COCO 1K = mean over folds of 1000 consecutive images and the captions relevant to them (a
caption follows its image's fold). Definitions: docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import Tensor

from pcmr.metrics._relevance import RelevanceInput, SparseRelevance, check_scores
from pcmr.metrics.defaults import COCO_NUM_FOLDS
from pcmr.metrics.driver import DEFAULT_KS, HUBNESS_KS, RerankerLike, evaluate_directions, fold_indices
from pcmr.metrics.extra_positives import ExtraPositives, coco_5k_test_ids, load_extra_positives
from pcmr.relevance import I2T, T2I
from pcmr.report import Report

__all__ = ["evaluate_coco", "evaluate_retrieval", "fold_indices"]


def evaluate_retrieval(
    scores: Tensor,
    relevance: RelevanceInput | SparseRelevance,
    *,
    ks: Sequence[int] = DEFAULT_KS,
    num_folds: int | None = None,
    caption_folds: Tensor | None = None,
    extra_positives: Sequence[ExtraPositives] = (),
    hubness_ks: Sequence[int] = HUBNESS_KS,
    block_size: int | None = None,
    title: str = "",
    reranker: RerankerLike | Mapping[str, RerankerLike] | None = None,
) -> Report:
    """Image->text and text->image metrics of ``scores [N_img, N_cap]`` (``evaluate_directions``'s report).

    Args:
        scores: image-caption scores, higher = more similar.
        relevance: bool ``[N_img, N_cap]`` or, per image, the list of its relevant caption indices.
        ks: cut-offs of R@K; rsum sums R@K over these ks and both directions.
        num_folds: also evaluate the fold protocol (COCO 1K: 5 folds of 1000 images), averaged.
        caption_folds: fold of each caption ``[N_cap]`` (default: that of its images).
        extra_positives: further positive sets (see ``load_extra_positives``), each evaluated
            for R@K, R-Precision and MAP@R on the full matrix.
        hubness_ks: ks of the hubness skewness; hs-sum adds them over both directions (empty: none).
        reranker: evaluate through a re-ranker (``pcmr.inference.get_reranker``; see ``evaluate_directions``).

    Returns a :class:`pcmr.report.Report` with rows ``"i2t"``, ``"t2i"`` (``retrieval_metrics`` keys,
    plus ``skew@k``), ``"total"`` (``rsum``, ``hs_sum``), with folds ``"folds i2t"``,
    ``"folds t2i"``, ``"folds total"``, and ``"<name> i2t"`` / ``"<name> t2i"`` per extra set.
    """
    return evaluate_directions(scores, relevance, reranker=reranker, ks=ks, num_folds=num_folds,
                               caption_folds=caption_folds, extra_positives=extra_positives,
                               hubness_ks=hubness_ks, block_size=block_size, title=title).report


def evaluate_coco(
    scores: Tensor,
    image_ids: Sequence[int] | None = None,
    caption_ids: Sequence[int] | None = None,
    *,
    relevance: RelevanceInput | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    extra: Sequence[str] = ("cxc", "eccv"),
    missing: str = "count",
    num_folds: int = COCO_NUM_FOLDS,
    hubness_ks: Sequence[int] = HUBNESS_KS,
    block_size: int | None = None,
) -> Report:
    """The COCO 5K-test evaluation: 5K and 1K R@K / ranks / R-P / MAP@R, CxC, ECCV Caption, hs-sum.

    Args:
        scores: ``[N_img, N_cap]`` for the images ``image_ids`` and captions ``caption_ids``
            (COCO ids; default: eccv-caption's order, see ``coco_5k_test_ids``).
        relevance: the image-caption relation; default: the original COCO pairs shipped by eccv-caption.
        extra: extra positive sets among ``"cxc"``, ``"eccv"`` (need the ``eccv-caption`` package).
        missing: how positives absent from the gallery enter R (see ``load_extra_positives``).
        num_folds: folds of the 1K protocol (images in the given order, 1000 per fold for 5K).

    Rows: ``"COCO 5K i2t"``, ``"COCO 5K t2i"``, ``"COCO 5K"`` (rsum, hs_sum), ``"COCO 1K i2t"``,
    ``"COCO 1K t2i"``, ``"COCO 1K"`` (rsum), then ``"CxC i2t"``, ``"CxC t2i"``, ``"ECCV i2t"``, ``"ECCV t2i"``.
    CxC R-Precision is RPC² (ProbVSE §4.3).
    """
    scores = check_scores(scores)
    if image_ids is None or caption_ids is None:
        if image_ids is not None or caption_ids is not None:
            raise ValueError("give both image_ids and caption_ids, or neither (eccv-caption's COCO 5K order)")
        image_ids, caption_ids = coco_5k_test_ids()
    if scores.shape != (len(image_ids), len(caption_ids)):
        raise ValueError(f"scores must have shape [{len(image_ids)}, {len(caption_ids)}] (images x captions "
                         f"of image_ids / caption_ids), got {tuple(scores.shape)}")
    positives: RelevanceInput | SparseRelevance = relevance if relevance is not None else (
        load_extra_positives("coco", image_ids, caption_ids).i2t.to(scores.device))
    extras = [load_extra_positives(name, image_ids, caption_ids, missing=missing) for name in extra]
    report = evaluate_retrieval(scores, positives, ks=ks, num_folds=num_folds, extra_positives=extras,
                                hubness_ks=hubness_ks, block_size=block_size, title="COCO 5K-test")
    fold_size = len(image_ids) // num_folds
    big = f"{len(image_ids) // 1000}K" if len(image_ids) % 1000 == 0 else f"{len(image_ids)} images"
    small = f"{fold_size // 1000}K" if fold_size % 1000 == 0 else f"{fold_size} images"
    names = {I2T: f"COCO {big} {I2T}", T2I: f"COCO {big} {T2I}", "total": f"COCO {big}",
             f"folds {I2T}": f"COCO {small} {I2T}", f"folds {T2I}": f"COCO {small} {T2I}", "folds total": f"COCO {small}"}
    report.rows = [{**row, "name": names.get(row["name"], row["name"])} for row in report.rows]
    return report
