"""``evaluate_model``: the evaluation table for every requested similarity x re-ranker.

For each similarity the ``[N_img, N_cap]`` score matrix is computed once (sampled scores with a
fixed seed). Each (similarity, re-ranker) row is one call of the bidirectional driver
``pcmr.metrics.evaluate_directions`` (image->text on ``S``, text->image on ``S.T``), which
re-scores each direction (and each fold) with the re-ranker:

- re-rankers that return scores (``nns``, ``is``, ``csls``): every metric on the re-scored matrix --
  R@K, R-Precision, MAP@R, PMRP (where labels exist), extra positive sets, folds, hubness;
- matchings (``gm``, ``rgm`` and compositions such as ``csls+rgm``) give top-k lists only: R@K from
  the run with ``k = K`` and N_k from the same lists; R-Precision, MAP@R, PMRP and folds need a
  ranking of the whole gallery and are left empty. A matching's tuned parameter (RGM's lambda) is
  chosen per direction on the validation split (``select_lambda``, sum of R@K) or taken from
  ``rerank_options``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from pcmr.evaluation.abstention import abstention_columns, abstention_series, pca_ellipse_series
from pcmr.evaluation.checks import check_finite_embeddings
from pcmr.evaluation.columns import EVALUATION_COLUMNS, format_number
from pcmr.evaluation.degenerate import degenerate_score_warning
from pcmr.evaluation.figures import (
    decile_series,
    embeddings_2d_series,
    multiplicity_series,
    occurrence_histogram,
)
from pcmr.evaluation.scoring import DEFAULT_SEED, check_names, score_matrix, unsupported_reason
from pcmr.gaussian import Gaussian
from pcmr.inference import DEFAULT_LAMBDA_GRID, Reranker, get_reranker, list_rerankers, select_lambda
from pcmr.metrics import DEFAULT_KS, HUBNESS_KS, evaluate_directions
from pcmr.metrics.driver import DIRECTIONS, PMRP_ZETAS, hubness_skew_or_zero
from pcmr.point_set import uncertainty_measure_for
from pcmr.progress import status_line
from pcmr.report import Report
from pcmr.similarity import list_similarities

__all__ = ["evaluate_embeddings", "DEFAULT_SIMILARITIES", "DEFAULT_RERANKERS",
           "DEFAULT_LAMBDA_GRID"]

DEFAULT_SIMILARITIES = ("cosine", "wasserstein", "match_prob", "elk", "kl")
DEFAULT_RERANKERS = ("nns", "is", "csls", "csls+rgm")


def _ordered(row: dict[str, Any], ks: Sequence[int]) -> dict[str, Any]:
    """Canonical column order: ids, R@K both ways, rsum, R-P, MAP@R, PMRP, extras, hs-sum, lambdas."""
    first = ["similarity", "rerank"] + [f"{d}_R@{k}" for d in DIRECTIONS for k in ks] + ["rsum"]
    first += [f"{d}_{m}" for d in DIRECTIONS for m in ("r_precision", "map_at_r")]
    first += [f"{d}_pmrp_{z}" for d in DIRECTIONS for z in ("0", "1", "2", "mean")]
    last = ["hs_sum", "i2t_lambda", "t2i_lambda", "warning"]
    keys = [k for k in first if k in row] + [k for k in row if k not in first and k not in last]
    return {k: row[k] for k in keys + [k for k in row if k in last] if k in row}


def _tuned_directions(base: Reranker, params: dict[str, Any], val_dirs: dict[str, tuple[Tensor, Tensor]] | None,
                      ks: Sequence[int], grid: Sequence[float]) -> dict[str, tuple[Reranker, Any]]:
    """Per direction, the re-ranker with its tuned parameter set (given, or selected on validation)."""
    tuned = base.tuned_parameter
    if tuned is None:
        return {d: (base, None) for d in DIRECTIONS}
    out = {}
    for d in DIRECTIONS:
        value = params.get(tuned)
        if value is None:
            if val_dirs is None:
                raise ValueError(f"re-ranker {base.name!r} needs a validation split to select lambda "
                                 f"(val_split) or a fixed rerank_options['{base.name}']['{tuned}']")
            val_scores, val_relevant = val_dirs[d]
            usable_ks = tuple(k for k in ks if k <= val_scores.shape[1])
            value = float(select_lambda(val_scores, val_relevant, ks=usable_ks, grid=tuple(grid),
                                        method=base.fitted(tuple(val_scores.shape))).best_lam)
        out[d] = (base.with_parameters(**{tuned: float(value)}), value)
    return out


def _table_row(report: Report, ks: Sequence[int], extra_positives: Sequence[Any], lists: bool,
               num_folds: int | None) -> dict[str, Any]:
    """The flat table columns of one driver report (``None`` where a metric needs a full ranking)."""
    row: dict[str, Any] = {}
    for d in DIRECTIONS:
        values = report[d]
        for k in ks:
            row[f"{d}_R@{k}"] = values[f"R@{k}"]
        row[f"{d}_r_precision"] = values.get("r_precision")
        row[f"{d}_map_at_r"] = values.get("map_at_r")
        if "pmrp" in values:
            for zeta in PMRP_ZETAS:
                row[f"{d}_pmrp_{zeta}"] = values[f"pmrp@{zeta}"]
            row[f"{d}_pmrp_mean"] = values["pmrp"]
        for extra in extra_positives:
            if f"{extra.name} {d}" not in report:
                continue
            extra_values, key = report[f"{extra.name} {d}"], f"{d}_{extra.name.lower()}"
            for k in ks:
                row[f"{key}_R@{k}"] = extra_values[f"R@{k}"]
            row[f"{key}_r_precision"] = extra_values["r_precision"]
            row[f"{key}_map_at_r"] = extra_values["map_at_r"]
    row["rsum"] = report["total"]["rsum"]
    if num_folds is not None:
        for d in DIRECTIONS:  # the fold protocol needs full rankings; lists get None
            row.update({f"folds_{d}_R@{k}": None if lists else report[f"folds {d}"][f"R@{k}"] for k in ks})
        row["folds_rsum"] = None if lists else report["folds total"]["rsum"]
    skews = [hubness_skew_or_zero(v) for d in DIRECTIONS for key, v in report[d].items() if key.startswith("skew@")]
    row["hs_sum"] = sum(skews) if skews else None
    return row


def evaluate_embeddings(images: Gaussian, captions: Gaussian, relevance: Tensor, *,
                        similarities: Sequence[str] = DEFAULT_SIMILARITIES,
                        rerankers: Sequence[str] = DEFAULT_RERANKERS,
                        similarity_options: dict[str, dict[str, Any]] | None = None,
                        image_labels: Tensor | None = None, caption_labels: Tensor | None = None,
                        val: tuple[Gaussian, Gaussian, Tensor] | None = None,
                        rerank_options: dict[str, dict[str, Any]] | None = None,
                        ks: Sequence[int] = DEFAULT_KS, lambda_grid: Sequence[float] = DEFAULT_LAMBDA_GRID,
                        uncertainty_measure: str = "log_det", extra_positives: Sequence[Any] = (),
                        num_folds: int | None = None, meta: dict[str, Any] | None = None,
                        figures: bool = True, hubness_ks: Sequence[int] = HUBNESS_KS,
                        seed: int = DEFAULT_SEED, progress: bool | None = False) -> Report:
    """The evaluation table of already encoded embeddings.

    Args:
        images: ``Gaussian [N_img, D]``; captions: ``Gaussian [N_cap, D]``.
        relevance: BoolTensor ``[N_img, N_cap]``, the ground-truth relation.
        similarities, rerankers: names (``["all"]`` for every registered one).
        similarity_options: options per similarity (e.g. the learned ``{"match_prob": {"a": .., "b": ..}}``).
        image_labels / caption_labels: BoolTensor ``[N, C]`` class labels for PMRP (both or neither).
        val: ``(images, captions, relevance)`` of the validation split, for RGM's lambda.
        rerank_options: parameters per re-ranker name: ``beta`` (is), ``csls_k`` (csls), ``lam`` (rgm; a
            fixed lambda instead of selecting one).
        ks: cut-offs of R@K; lambda_grid: lambda candidates for RGM.
        uncertainty_measure: ``Gaussian.uncertainty`` measure for the decile analysis.
        extra_positives: ``pcmr.metrics.ExtraPositives`` sets (CxC, ECCV Caption) evaluated on the full
            re-scored matrices: columns ``{i2t,t2i}_{set}_R@k``, ``_r_precision`` (RPC² for CxC), ``_map_at_r``.
        num_folds: also report R@K and rsum averaged over this many consecutive image folds
            (``folds_*`` columns; 5 on COCO 5K-test is the COCO 1K protocol), for the re-rankers
            that re-score a full matrix (matching re-rankers get ``None``).
        progress: False (default) prints nothing; otherwise a start line and a timed finish line per
            similarity on stderr (:func:`pcmr.progress.status_line`).
        figures: compute the figures' data (uncertainty deciles, k-occurrence, 2-D embeddings).
        hubness_ks: the k of the hubness columns (``()``: no ``hs_sum``).
        seed: seeds the samples of sampled similarities (``match_prob``).
    """

    check_finite_embeddings(images, captions, "the embeddings given to evaluate_embeddings")
    similarities = check_names("similarity", similarities, list_similarities())
    rerankers = check_names("re-ranker", rerankers, list_rerankers())
    if relevance.dtype != torch.bool or tuple(relevance.shape) != (images.num, captions.num):
        raise ValueError(f"relevance must be a BoolTensor [{images.num}, {captions.num}], got "
                         f"{relevance.dtype} {tuple(relevance.shape)}")
    if num_folds is not None and (isinstance(num_folds, bool) or not isinstance(num_folds, int) or num_folds < 1
                                  or images.num % num_folds):
        raise ValueError(f"num_folds must be a positive integer dividing the {images.num} images, got {num_folds!r}")
    similarity_options = {k: dict(v) for k, v in (similarity_options or {}).items()}
    rerank_options = {k: dict(v) for k, v in (rerank_options or {}).items()}
    device = images.device
    relevance = relevance.to(device)
    if image_labels is not None and caption_labels is not None:
        image_labels, caption_labels = image_labels.to(device), caption_labels.to(device)
    else:
        image_labels = caption_labels = None
    result = Report(title="pcmr evaluation", schema=EVALUATION_COLUMNS, meta={**(meta or {}), "num_images": images.num, "num_captions": captions.num,
                                    "uncertainty_measure": uncertainty_measure,
                                    "similarity_options": {}, "selected_lambda": {}, "notes": []})
    notes = result.meta["notes"]
    # R@1 per uncertainty decile needs 10 queries with a relevant item in each direction
    deciles_possible = figures and min(int(relevance.any(dim=1).sum()), int(relevance.any(dim=0).sum())) >= 10
    if figures and not deciles_possible:
        notes.append("no uncertainty-decile figure: it needs at least 10 queries with a relevant item in "
                     "each direction")
    decile_data: dict[str, Any] = {}
    abstention_data: dict[str, Any] = {}
    hub_data: dict[str, Any] = {}
    for name in similarities:
        options = similarity_options.get(name, {})
        reason = unsupported_reason(name, images, captions, options)
        if reason is not None:
            result.skipped.append({"similarity": name, "rerank": "*", "reason": reason})
            continue
        started = time.perf_counter()
        status_line(f"  {name}: scoring {images.num} images x {captions.num} captions, then "
                    f"{', '.join(rerankers)} ...", progress)
        try:
            scores = score_matrix(name, images, captions, options, seed=seed)  # [N_img, N_cap]
            val_scores = score_matrix(name, val[0].to(device), val[1].to(device), options, seed=seed) if val else None
        except ValueError as err:
            result.skipped.append({"similarity": name, "rerank": "*", "reason": str(err)})
            continue
        result.meta["similarity_options"][name] = {k: v for k, v in options.items() if isinstance(v, (int, float))}
        timings = [f"scores {time.perf_counter() - started:.1f} s"]
        degenerate = degenerate_score_warning(scores, name)  # every row of this score carries it
        val_dirs = None
        if val_scores is not None and val is not None:
            val_relevance = val[2].to(device)
            val_dirs = {"i2t": (val_scores, val_relevance), "t2i": (val_scores.T, val_relevance.T)}
        for rerank in rerankers:
            rerank_started = time.perf_counter()
            params = dict(rerank_options.get(rerank, {}))
            base = get_reranker(rerank, **params)
            per_direction = _tuned_directions(base, params, val_dirs, ks, lambda_grid)
            row: dict[str, Any] = {"similarity": name, "rerank": rerank}
            if degenerate is not None:
                row["warning"] = degenerate
            if base.tuned_parameter is not None and params.get(base.tuned_parameter) is None:
                for d, (_, value) in per_direction.items():
                    result.meta["selected_lambda"][f"{name}/{rerank}/{d}"] = value
            evaluation = evaluate_directions(
                scores, relevance, reranker={d: method for d, (method, _) in per_direction.items()}, ks=ks,
                num_folds=num_folds, extra_positives=extra_positives, hubness_ks=tuple(hubness_ks),
                image_labels=image_labels, caption_labels=caption_labels)
            lists = not base.returns_scores
            row.update(_table_row(evaluation.report, ks, extra_positives if not lists else (), lists, num_folds))
            if lists:
                row.update({f"{d}_lambda": value for d, (_, value) in per_direction.items()})
            result.rows.append(_ordered(row, ks))
            if figures and hubness_ks and not lists and name == result.rows[0]["similarity"]:
                hub_data[f"{name}/{rerank}"] = {d: occurrence_histogram(evaluation.k_occurrence[d][10])
                                                for d in DIRECTIONS}
            tuned = " with lambda selected on validation" if lists and val_dirs is not None else ""
            timings.append(f"{rerank}{tuned} {time.perf_counter() - rerank_started:.1f} s")
        status_line(f"  {name}: done in {time.perf_counter() - started:.1f} s ({'; '.join(timings)})", progress)
        measure = uncertainty_measure_for((images, captions), uncertainty_measure)  # PVSE point sets: spread
        if measure is not None and deciles_possible:
            decile_data[name] = decile_series(scores, relevance, images, captions, measure)
            abstention_data[name] = abstention_series(scores, relevance, images, captions, measure)
            for row in result.rows:  # the uncertainty of the raw scores: the nns row carries it
                if row["similarity"] == name and row["rerank"] == "nns":
                    row.update(abstention_columns(abstention_data[name]))
    if decile_data:
        result.figures["uncertainty_r1"] = {"measure": measure, "series": decile_data}
    if abstention_data:
        result.figures["risk_coverage"] = {"measure": measure, "series": abstention_data}
    if figures and all(isinstance(g, Gaussian) and g.logvar is not None for g in (images, captions)) \
            and images.dim > 2:
        result.figures["embeddings_pca"] = pca_ellipse_series(images, captions, relevance)
    if hub_data and min(images.num, captions.num) > 10:
        result.figures["k_occurrence"] = {"k": 10, "series": hub_data}
    if figures and images.dim == 2:
        result.figures["embeddings_2d"] = embeddings_2d_series(images, captions, relevance)
    multiplicity_measure = uncertainty_measure_for((images, captions), uncertainty_measure)
    if figures and multiplicity_measure is not None:
        result.figures["uncertainty_multiplicity"] = multiplicity_series(images, captions, relevance,
                                                                         multiplicity_measure)
    result.meta["about"] = [f"lambda selected on the validation split for {name}: {format_number(value, 3)}"
                            for name, value in result.meta["selected_lambda"].items()]
    if not result.rows:
        notes.append("no (similarity, re-ranker) pair could be evaluated; see Skipped")
    if hubness_ks:
        notes.append("hs-sum: sum of the skewness of N_k for k = 1, 5, 10 over both directions; a constant N_k "
                     "(no hubs at all) counts as skewness 0")
    if num_folds is not None:
        result.meta["num_folds"] = num_folds
        notes.append(f"folds: R@K and rsum averaged over {num_folds} consecutive folds of {images.num // num_folds} "
                     "images and their captions, each re-scored on its own (COCO 1K protocol when 5 folds of 5K-test)")
    if any(not get_reranker(r).returns_scores for r in rerankers):
        notes.append("matching re-rankers (gm/rgm) return top-k lists: R@K from the run with k = K; "
                     "R-Precision, MAP@R and PMRP need a full ranking and are left empty")
    return result
