"""Bidirectional evaluation of an image-caption score matrix and the COCO 5K / 1K protocols.

``S[i, c]`` (SPEC §1): image->text ranks the rows of S, text->image the rows of ``S.T``. One
blocked pass per direction serves the main relation, any extra positive sets (CxC, ECCV
Caption) and the hubness counts. COCO 1K = mean over folds of 1000 consecutive images and the
captions relevant to them (a caption follows its image's fold).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from pcmr.metrics._relevance import RelevanceInput, SparseRelevance, as_sparse, check_scores
from pcmr.metrics.extra_positives import ExtraPositives, coco_5k_test_ids, load_extra_positives
from pcmr.metrics.hubness import skewness_by_k
from pcmr.metrics.ranking import check_ks, summarize
from pcmr.metrics.report import MetricsReport
from pcmr.metrics.scan import Target, scan


def _rsum(i2t: dict[str, float], t2i: dict[str, float], ks: Sequence[int]) -> float:
    return sum(i2t[f"R@{k}"] + t2i[f"R@{k}"] for k in ks)


def fold_indices(relevance: SparseRelevance, num_folds: int,
                 caption_folds: Tensor | None = None) -> list[tuple[Tensor, Tensor]]:
    """(image indices, caption indices) of each fold: images split into equal consecutive chunks.

    A caption belongs to the fold of the images it is relevant to (``relevance [N_img, N_cap]``),
    unless ``caption_folds [N_cap]`` (fold number per caption) is given.
    """
    num_images, num_captions = relevance.num_queries, relevance.num_gallery
    device = relevance.indptr.device
    if not isinstance(num_folds, int) or num_folds < 1 or num_images % num_folds:
        raise ValueError(f"num_folds must be a positive integer dividing the {num_images} images, got {num_folds!r}")
    fold_size = num_images // num_folds
    if caption_folds is None:
        row, col = relevance.select(torch.arange(num_images, device=device))
        fold = torch.div(row, fold_size, rounding_mode="floor")
        low = torch.full((num_captions,), num_folds, dtype=torch.long, device=device)
        high = torch.full((num_captions,), -1, dtype=torch.long, device=device)
        low.scatter_reduce_(0, col, fold, reduce="amin")
        high.scatter_reduce_(0, col, fold, reduce="amax")
        if bool((high < 0).any()) or bool((low != high).any()):
            bad = int(((high < 0) | (low != high)).nonzero()[0])
            raise ValueError(
                f"caption {bad} is relevant to no image or to images of several folds; pass "
                f"caption_folds (a fold number per caption) to define the folds explicitly")
        caption_folds = low
    elif caption_folds.shape != (num_captions,):
        raise ValueError(f"caption_folds must have shape [{num_captions}], got {tuple(caption_folds.shape)}")
    caption_folds = caption_folds.to(device)
    folds = []
    for f in range(num_folds):
        images = torch.arange(f * fold_size, (f + 1) * fold_size, device=device)
        folds.append((images, (caption_folds == f).nonzero(as_tuple=True)[0]))
    return folds


def _mean_rows(rows: list[dict[str, float]]) -> dict[str, float]:
    out = {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]}
    out["num_skipped"] = sum(r["num_skipped"] for r in rows)
    return out


def evaluate_retrieval(
    scores: Tensor,
    relevance: RelevanceInput,
    *,
    ks: Sequence[int] = (1, 5, 10),
    num_folds: int | None = None,
    caption_folds: Tensor | None = None,
    extra_positives: Sequence[ExtraPositives] = (),
    hubness_ks: Sequence[int] = (1, 5, 10),
    block_size: int | None = None,
    title: str = "",
) -> MetricsReport:
    """Image->text and text->image metrics of ``scores [N_img, N_cap]`` (SPEC §6).

    Args:
        scores: image-caption scores, higher = more similar.
        relevance: bool ``[N_img, N_cap]`` or, per image, the list of its relevant caption indices.
        ks: cut-offs of R@K; rsum sums R@K over these ks and both directions.
        num_folds: also evaluate the fold protocol (COCO 1K: 5 folds of 1000 images), averaged.
        caption_folds: fold of each caption ``[N_cap]`` (default: that of its images).
        extra_positives: further positive sets (see ``load_extra_positives``), each evaluated
            for R@K, R-Precision and MAP@R on the full matrix.
        hubness_ks: ks of the hubness skewness; hs-sum adds them over both directions (empty: none).

    Returns a :class:`MetricsReport` with rows ``"i2t"``, ``"t2i"`` (``retrieval_metrics`` keys,
    plus ``skew@k``), ``"total"`` (``rsum``, ``hs_sum``), with folds ``"folds i2t"``,
    ``"folds t2i"``, ``"folds total"``, and ``"<name> i2t"`` / ``"<name> t2i"`` per extra set.
    """
    scores = check_scores(scores)
    ks = check_ks(ks)
    hubness_ks = check_ks(hubness_ks, "hubness_ks") if len(hubness_ks) else ()
    num_images, num_captions = scores.shape
    device = scores.device
    i2t_rel = as_sparse(relevance, num_images, num_captions, device=device, name="relevance")
    t2i_rel = i2t_rel.transpose()
    directions = {"i2t": (scores, [Target(i2t_rel)]), "t2i": (scores.T, [Target(t2i_rel)])}
    for extra in extra_positives:
        if (extra.i2t.num_queries, extra.i2t.num_gallery) != (num_images, num_captions):
            raise ValueError(
                f"extra positives {extra.name!r} are for [{extra.i2t.num_queries}, {extra.i2t.num_gallery}] "
                f"images x captions, but scores have shape [{num_images}, {num_captions}]")
        for key, rel, absent in (("i2t", extra.i2t, extra.i2t_missing), ("t2i", extra.t2i, extra.t2i_missing)):
            directions[key][1].append(Target(rel.to(device), absent.to(device), exact_ranks=False,
                                             rank_limit=max(ks)))
    report = MetricsReport(title=title)
    results = {}
    for key, (matrix, targets) in directions.items():
        results[key] = scan(matrix, targets, hubness_ks=hubness_ks, block_size=block_size)
    skews = {}
    for key in directions:
        row = summarize(results[key].per_query[0], ks)
        skews[key] = skewness_by_k(results[key].k_occurrence)
        report.add(key, {**row, **skews[key]})
    total = {"rsum": _rsum(report["i2t"], report["t2i"], ks)}
    if hubness_ks:
        total["hs_sum"] = sum(skews["i2t"].values()) + sum(skews["t2i"].values())
    report.add("total", total)
    if num_folds is not None:
        fold_rows: dict[str, list[dict[str, float]]] = {"i2t": [], "t2i": []}
        for images, captions in fold_indices(i2t_rel, num_folds, caption_folds):
            sub = scores[images[0]:images[-1] + 1].index_select(1, captions)  # [fold images, fold captions]
            sub_rel = i2t_rel.submatrix(images, captions)
            fold_rows["i2t"].append(summarize(scan(sub, [Target(sub_rel)], block_size=block_size).per_query[0], ks))
            fold_rows["t2i"].append(
                summarize(scan(sub.T, [Target(sub_rel.transpose())], block_size=block_size).per_query[0], ks))
        report.add("folds i2t", _mean_rows(fold_rows["i2t"]))
        report.add("folds t2i", _mean_rows(fold_rows["t2i"]))
        report.add("folds total", {"rsum": _rsum(report["folds i2t"], report["folds t2i"], ks)})
    for index, extra in enumerate(extra_positives, start=1):
        for key in directions:
            report.add(f"{extra.name} {key}", summarize(results[key].per_query[index], ks))
    return report


def evaluate_coco(
    scores: Tensor,
    image_ids: Sequence[int] | None = None,
    caption_ids: Sequence[int] | None = None,
    *,
    relevance: RelevanceInput | None = None,
    ks: Sequence[int] = (1, 5, 10),
    extra: Sequence[str] = ("cxc", "eccv"),
    missing: str = "count",
    num_folds: int = 5,
    hubness_ks: Sequence[int] = (1, 5, 10),
    block_size: int | None = None,
) -> MetricsReport:
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
    if relevance is None:
        relevance = load_extra_positives("coco", image_ids, caption_ids).i2t
        relevance = relevance.to(scores.device)
    extras = [load_extra_positives(name, image_ids, caption_ids, missing=missing) for name in extra]
    report = evaluate_retrieval(scores, relevance, ks=ks, num_folds=num_folds, extra_positives=extras,
                                hubness_ks=hubness_ks, block_size=block_size, title="COCO 5K-test")
    fold_size = len(image_ids) // num_folds
    big = f"{len(image_ids) // 1000}K" if len(image_ids) % 1000 == 0 else f"{len(image_ids)} images"
    small = f"{fold_size // 1000}K" if fold_size % 1000 == 0 else f"{fold_size} images"
    names = {"i2t": f"COCO {big} i2t", "t2i": f"COCO {big} t2i", "total": f"COCO {big}",
             "folds i2t": f"COCO {small} i2t", "folds t2i": f"COCO {small} t2i", "folds total": f"COCO {small}"}
    renamed = MetricsReport(title=report.title)
    for name, row in report.rows.items():
        renamed.add(names.get(name, name), row)
    return renamed
