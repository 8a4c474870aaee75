"""The one bidirectional evaluation driver of pcmr (formulas: docs/metrics.md, docs/inference.md).

``evaluate_directions`` evaluates an image-caption score matrix ``S [N_img, N_cap]`` both ways --
image->text on the rows of ``S``, text->image on the rows of ``S.T`` -- optionally through a
re-ranker, and returns a :class:`pcmr.report.Report`: rows ``"i2t"``, ``"t2i"``, ``"total"`` (rsum,
hs_sum), with folds ``"folds i2t"``, ``"folds t2i"``, ``"folds total"``, and ``"<set> i2t"`` /
``"<set> t2i"`` per extra positive set. It serves ``pcmr.metrics.evaluate_retrieval`` and the COCO
protocol, ``pcmr.evaluation.evaluate_embeddings`` (one call per similarity x re-ranker), training
validation, and -- through :func:`recall_from_lists` -- lambda selection.

A re-ranker is anything with the small interface of ``pcmr.inference.Reranker`` (``fitted``,
``rescore``, ``returns_scores``, ``topk_rescored``); this module never imports ``pcmr.inference``.
A re-ranker that returns scores (nns, is, csls) re-scores each direction (and each fold on its
own), and every metric is computed on the re-scored matrix. A matching (gm, rgm, ...) only gives
top-k lists: R@K comes from the run with ``k = K`` and N_k from the run with ``k``; R-Precision,
MAP@R, PMRP, extra sets and folds need a ranking of the whole gallery and are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from pcmr.metrics._relevance import RelevanceInput, SparseRelevance, as_sparse
from pcmr.metrics.defaults import DEFAULT_KS, HUBNESS_KS
from pcmr.metrics.extra_positives import ExtraPositives
from pcmr.metrics.hubness import skewness_by_k
from pcmr.metrics.pmrp import pmrp
from pcmr.metrics.ranking import check_ks, summarize
from pcmr.metrics.scan import Target, scan
from pcmr.metrics.topk import recall_at_k_from_topk
from pcmr.ranking.checks import check_scores
from pcmr.relevance import DIRECTIONS, I2T, T2I
from pcmr.report import Report

#: cut-offs K of R@K (rsum sums them over both directions) and of the hubness skewness (hs-sum)
#: PMRP's Hamming thresholds (PCME App. C.1)
PMRP_ZETAS: tuple[int, ...] = (0, 1, 2)


class RerankerLike(Protocol):
    """What the driver needs of a re-ranker (``pcmr.inference.Reranker`` has it)."""

    @property
    def returns_scores(self) -> bool: ...

    def fitted(self, size: tuple[int, ...]) -> RerankerLike: ...

    def rescore(self, scores: Tensor) -> Tensor: ...

    def topk_rescored(self, rescored: Tensor, k: int) -> Tensor: ...


@dataclass
class DirectionsResult:
    """What :func:`evaluate_directions` computed: the report and the k-occurrence counts
    ``{"i2t": {k: N_k [G]}, "t2i": ...}`` of the full matrices (for hubness plots)."""

    report: Report
    k_occurrence: dict[str, dict[int, Tensor]] = field(default_factory=dict)


def rsum(i2t: Mapping[str, float], t2i: Mapping[str, float], ks: Iterable[int] = DEFAULT_KS) -> float:
    """rsum: R@K (percent) summed over ``ks`` and both directions (image->text first)."""
    ks = tuple(ks)
    return sum(row[f"R@{k}"] for row in (i2t, t2i) for k in ks)


def _mean_rows(rows: list[dict[str, float]]) -> dict[str, float]:
    out = {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]}
    out["num_skipped"] = sum(r["num_skipped"] for r in rows)
    return out


def recall_from_lists(reranker: RerankerLike, rescored: Tensor, relevant: RelevanceInput | SparseRelevance,
                      ks: Iterable[int] = DEFAULT_KS) -> dict[str, float]:
    """``{"R@K": percent}`` of one direction from a re-ranker's ranked lists of ``rescored [Q, G]``.

    Without a matching R@K is computed on the re-scored matrix itself (expected over the orders of tied
    scores, as every rank metric); a matching runs once per K (its lists for ``k = K`` are not a prefix
    of a longer run). ``relevant``: bool ``[Q, G]``, Q index lists or a ``SparseRelevance``.
    """
    ks = tuple(ks)
    if not ks:
        raise ValueError("ks must name at least one K, e.g. (1, 5, 10)")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"each K in ks must be an int, got {type(k).__name__}")
        if not 1 <= k <= rescored.shape[1]:
            raise ValueError(f"each K in ks must be in [1, the number of gallery items G = {rescored.shape[1]}], "
                             f"got {k}")
    if reranker.returns_scores:
        rel = as_sparse(relevant, rescored.shape[0], rescored.shape[1], device=rescored.device)
        per_query = scan(check_scores(rescored), [Target(rel, precision=False)]).per_query[0]
        return {f"R@{k}": summarize(per_query, ks, precision=False)[f"R@{k}"] for k in ks}
    return {f"R@{k}": recall_at_k_from_topk(reranker.topk_rescored(rescored, k), relevant) for k in ks}


def _lists_direction(method: RerankerLike, weighted: Tensor, relevant: SparseRelevance, ks: Sequence[int],
                     hubness_ks: Sequence[int]) -> tuple[dict[str, float], dict[int, Tensor]]:
    """R@K and N_k of one direction from a matching's lists (one run per K).

    A K larger than the gallery G lists the whole gallery: R@K is R@G (as for a full ranking, where
    every item is within the first K); N_k is left out for such K."""
    row: dict[str, float] = {}
    occurrences: dict[int, Tensor] = {}
    gallery = weighted.shape[1]
    runs: dict[int, Tensor] = {}
    for k in sorted(set(ks) | set(hubness_ks)):
        if k > gallery and k not in ks:
            continue
        size = min(k, gallery)
        if size not in runs:
            runs[size] = method.topk_rescored(weighted, size)  # [Q, size], the run with this k
        lists = runs[size]
        if k in ks:
            row[f"R@{k}"] = recall_at_k_from_topk(lists, relevant, k=size)
        if k in hubness_ks and k <= gallery:
            occurrences[k] = torch.bincount(lists.reshape(-1), minlength=gallery)  # [G]
    row["num_skipped"] = float(int((relevant.counts() == 0).sum()))
    return row, occurrences


def _per_direction(reranker: RerankerLike | Mapping[str, RerankerLike] | None, direction: str,
                   size: tuple[int, ...]) -> RerankerLike | None:
    method = reranker.get(direction) if isinstance(reranker, Mapping) else reranker
    return None if method is None else method.fitted(size)


def evaluate_directions(
    scores: Tensor,
    relevance: RelevanceInput | SparseRelevance,
    *,
    reranker: RerankerLike | Mapping[str, RerankerLike] | None = None,
    ks: Sequence[int] = DEFAULT_KS,
    num_folds: int | None = None,
    caption_folds: Tensor | None = None,
    extra_positives: Sequence[ExtraPositives] = (),
    hubness_ks: Sequence[int] = HUBNESS_KS,
    image_labels: Tensor | None = None,
    caption_labels: Tensor | None = None,
    block_size: int | None = None,
    title: str = "",
) -> DirectionsResult:
    """Image->text and text->image metrics of ``scores [N_img, N_cap]`` (docs/metrics.md).

    Args:
        scores: image-caption scores, higher = more similar.
        relevance: bool ``[N_img, N_cap]``, per image the list of its relevant caption indices, or a
            ``SparseRelevance`` -- the relation to evaluate against (one call per relevance mode).
        reranker: None (the scores as they are), a re-ranker, or ``{"i2t": .., "t2i": ..}`` (e.g. RGM
            with a lambda selected per direction). It is ``fitted`` to each matrix it re-scores.
        ks: cut-offs of R@K; rsum sums R@K over these ks and both directions.
        num_folds: also evaluate the fold protocol (COCO 1K: 5 folds of 1000 images), averaged; each
            fold's submatrix is re-scored on its own.
        caption_folds: fold of each caption ``[N_cap]`` (default: that of its images).
        extra_positives: further positive sets (``load_extra_positives``), evaluated on the full matrix.
        hubness_ks: ks of the hubness skewness ``skew@k``; hs_sum adds them over both directions.
        image_labels / caption_labels: bool ``[N, C]`` class labels; when both are given each
            direction row gets PMRP (``pmrp@0``, ``pmrp@1``, ``pmrp@2``, mean ``pmrp``).
    """
    scores = check_scores(scores)
    ks = check_ks(ks)
    hubness_ks = check_ks(hubness_ks, "hubness_ks") if len(hubness_ks) else ()
    num_images, num_captions = scores.shape
    device = scores.device
    i2t_rel = as_sparse(relevance, num_images, num_captions, device=device, name="relevance")
    for extra in extra_positives:
        if (extra.i2t.num_queries, extra.i2t.num_gallery) != (num_images, num_captions):
            raise ValueError(
                f"extra positives {extra.name!r} are for [{extra.i2t.num_queries}, {extra.i2t.num_gallery}] "
                f"images x captions, but scores have shape [{num_images}, {num_captions}]")
    labels = {I2T: (image_labels, caption_labels), T2I: (caption_labels, image_labels)}
    directions = {I2T: (scores, i2t_rel), T2I: (scores.T, i2t_rel.transpose())}
    report = Report(title=title)
    result = DirectionsResult(report)
    skews: dict[str, dict[str, float]] = {}
    all_scores = True
    extra_rows: dict[str, dict[str, float]] = {}
    for key, (matrix, rel) in directions.items():
        method = _per_direction(reranker, key, tuple(matrix.shape))
        weighted = matrix if method is None else method.rescore(matrix)  # [Q, G]
        if method is not None and not method.returns_scores:
            all_scores = False
            row, occurrences = _lists_direction(method, weighted, rel, ks, hubness_ks)
        else:
            targets = [Target(rel)]
            for extra in extra_positives:
                extra_rel, absent = (extra.i2t, extra.i2t_missing) if key == I2T else (extra.t2i, extra.t2i_missing)
                targets.append(Target(extra_rel.to(device), absent.to(device), exact_ranks=False,
                                      rank_limit=max(ks)))
            scanned = scan(weighted, targets, hubness_ks=hubness_ks, block_size=block_size)
            occurrences = scanned.k_occurrence
            row = summarize(scanned.per_query[0], ks)
            for index, extra in enumerate(extra_positives, start=1):
                extra_rows[f"{extra.name} {key}"] = summarize(scanned.per_query[index], ks)
            query_labels, gallery_labels = labels[key]
            if query_labels is not None and gallery_labels is not None:
                values = pmrp(weighted, query_labels, gallery_labels, zetas=PMRP_ZETAS, block_size=block_size,
                              directions=(I2T,))  # rows = this direction's queries
                row.update({k: v for k, v in values[I2T].items() if k != "num_skipped"})  # rows = queries
        result.k_occurrence[key] = occurrences
        skews[key] = skewness_by_k(occurrences)
        report.add(key, {**row, **skews[key]})
    total = {"rsum": rsum(report[I2T], report[T2I], ks)}
    if hubness_ks:
        total["hs_sum"] = sum(skews[I2T].values()) + sum(skews[T2I].values())
    report.add("total", total)
    if num_folds is not None and all_scores:
        _folds(report, scores, i2t_rel, reranker, num_folds, caption_folds, ks, block_size)
    for name, row in extra_rows.items():
        report.add(name, row)
    return result


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


def _folds(report: Report, scores: Tensor, i2t_rel: SparseRelevance,
           reranker: RerankerLike | Mapping[str, RerankerLike] | None, num_folds: int,
           caption_folds: Tensor | None, ks: Sequence[int], block_size: int | None) -> None:
    """Rows ``"folds i2t"``, ``"folds t2i"``, ``"folds total"``: metrics averaged over the folds."""
    fold_rows: dict[str, list[dict[str, float]]] = {I2T: [], T2I: []}
    for images, captions in fold_indices(i2t_rel, num_folds, caption_folds):
        sub = scores[images[0]:images[-1] + 1].index_select(1, captions)  # [fold images, fold captions]
        sub_rel = i2t_rel.submatrix(images, captions)
        for key, matrix, rel in ((I2T, sub, sub_rel), (T2I, sub.T, sub_rel.transpose())):
            method = _per_direction(reranker, key, tuple(matrix.shape))
            weighted = matrix if method is None else method.rescore(matrix)
            fold_rows[key].append(summarize(scan(weighted, [Target(rel)], block_size=block_size).per_query[0], ks))
    report.add(f"folds {I2T}", _mean_rows(fold_rows[I2T]))
    report.add(f"folds {T2I}", _mean_rows(fold_rows[T2I]))
    report.add("folds total", {"rsum": rsum(report[f"folds {I2T}"], report[f"folds {T2I}"], ks)})


def hubness_skew_or_zero(value: float) -> float:
    """A skewness with constant N_k (every item retrieved equally often: no hubs) taken as 0 (it is NaN)."""
    return 0.0 if value != value else value


__all__ = ["DEFAULT_KS", "DIRECTIONS", "DirectionsResult", "HUBNESS_KS", "PMRP_ZETAS", "RerankerLike",
           "evaluate_directions", "fold_indices", "hubness_skew_or_zero", "recall_from_lists", "rsum"]
