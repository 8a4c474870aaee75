"""``evaluate_embeddings``: the evaluation table of encoded images and captions for every requested
similarity x re-ranker (the model-level entries, ``RetrievalEvaluator`` and its shorthand
``evaluate_model`` in :mod:`pcmr.evaluation.evaluator`, encode a split and call it).

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
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from pcmr.encode.checks import check_finite_embeddings
from pcmr.evaluation.abstention import (
    abstention_columns,
    abstention_series,
    pca_ellipse_series,
    reference_abstention_series,
)
from pcmr.evaluation.columns import EVALUATION_COLUMNS, format_number, ordered, pmrp, table_row, tuned_value
from pcmr.evaluation.degenerate import degenerate_score_warning
from pcmr.evaluation.figures import (
    decile_series,
    embeddings_2d_series,
    multiplicity_series,
    occurrence_histogram,
)
from pcmr.evaluation.settings import EvaluationSettings, check_setting_names, setting_names
from pcmr.gaussian import Gaussian
from pcmr.inference import DEFAULT_LAMBDA_GRID, Reranker, get_reranker, list_rerankers, select_lambda
from pcmr.metrics import HUBNESS_KS, evaluate_directions
from pcmr.metrics.defaults import DEFAULT_RERANKERS, DEFAULT_SIMILARITIES
from pcmr.metrics.driver import DIRECTIONS, PMRP_ZETAS
from pcmr.point_set import uncertainty_measure_for
from pcmr.progress import status_line
from pcmr.relevance import I2T, T2I
from pcmr.report import Report, figure_keys
from pcmr.scoring import check_names, score_matrix, unsupported_reason
from pcmr.similarity import list_similarities

__all__ = ["evaluate_embeddings", "SharedWork", "DEFAULT_SIMILARITIES", "DEFAULT_RERANKERS",
           "DEFAULT_LAMBDA_GRID"]

#: the k of the N_k histogram in the ``k_occurrence`` figure
OCCURRENCE_FIGURE_K = 10
#: the PMRP columns of a row (they depend on the class labels only, not on the relevance mode)
PMRP_COLUMNS = tuple(pmrp(d, z) for d in DIRECTIONS for z in [*map(str, PMRP_ZETAS), "mean"])


@dataclass
class SharedWork:
    """The work of an evaluation that does not depend on the relevance relation, done under the first
    relevance mode and reused under the others (:class:`pcmr.evaluation.RetrievalEvaluator` passes one
    to each :func:`evaluate_embeddings` call of the same embeddings, options and seed).

    Attributes:
        scores: ``{(similarity, "test" | "val"): S [N_img, N_cap]}``.
        runs: ``{(similarity, re-ranker, direction): {(lambda, K): lists [Q, K]}}``, the matching's runs of
            lambda selection on the validation scores (``select_lambda``'s ``runs``).
        test_runs: ``{(similarity, re-ranker, direction): {(parameters, K): lists [Q, K]}}``, a matching's
            runs on the test scores (a mode whose lambda another mode selected too matches nothing).
        pmrp: ``{(similarity, re-ranker): {column: value}}``, the PMRP columns (class labels only).
    """

    scores: dict[tuple[str, str], Tensor] = field(default_factory=dict)
    runs: dict[tuple[str, str, str], dict[tuple[float, int], Tensor]] = field(default_factory=dict)
    test_runs: dict[tuple[str, str, str], dict[tuple[Any, int], Tensor]] = field(default_factory=dict)
    pmrp: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def score_matrix(self, name: str, part: str, images: Gaussian, captions: Gaussian, options: dict[str, Any],
                     seed: int) -> Tensor:
        """``score_matrix(name, images, captions, options, seed=seed)``, computed once per ``(name, part)``."""
        if (name, part) not in self.scores:
            self.scores[(name, part)] = score_matrix(name, images, captions, options, seed=seed)
        return self.scores[(name, part)]


@dataclass(frozen=True)
class _KeptRuns:
    """A matching re-ranker whose runs (``topk_rescored``) are kept in ``runs`` by its parameters and K:
    the driver's interface (``returns_scores``, ``fitted``, ``rescore``, ``topk_rescored``) for one
    direction of one score matrix."""

    reranker: Reranker
    runs: dict[tuple[Any, int], Tensor]

    @property
    def returns_scores(self) -> bool:
        return self.reranker.returns_scores

    def fitted(self, size: tuple[int, ...]) -> _KeptRuns:
        return _KeptRuns(self.reranker.fitted(size), self.runs)

    def rescore(self, scores: Tensor) -> Tensor:
        return self.reranker.rescore(scores)

    def topk_rescored(self, rescored: Tensor, k: int) -> Tensor:
        key = (tuple(sorted(self.reranker.parameters().items())), k)
        if key not in self.runs:
            self.runs[key] = self.reranker.topk_rescored(rescored, k)
        return self.runs[key]


def _tuned_directions(base: Reranker, params: dict[str, Any], val_dirs: dict[str, tuple[Tensor, Tensor]] | None,
                      ks: Sequence[int], grid: Sequence[float],
                      runs: dict[str, dict[tuple[float, int], Tensor]] | None = None) -> dict[str, tuple[Reranker, Any]]:
    """Per direction, the re-ranker with its tuned parameter set (given, or selected on validation;
    ``runs[direction]`` keeps the matching's runs, see ``select_lambda``)."""
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
                                        method=base.fitted(tuple(val_scores.shape)),
                                        runs=None if runs is None else runs[d]).best_lam)
        out[d] = (base.with_parameters(**{tuned: float(value)}), value)
    return out


def evaluate_embeddings(images: Gaussian, captions: Gaussian, relevance: Tensor, *,
                        settings: EvaluationSettings | None = None,
                        similarity_options: dict[str, dict[str, Any]] | None = None,
                        image_labels: Tensor | None = None, caption_labels: Tensor | None = None,
                        val: tuple[Gaussian, Gaussian, Tensor] | None = None, extra_positives: Sequence[Any] = (),
                        num_folds: int | None = None, meta: dict[str, Any] | None = None,
                        hubness_ks: Sequence[int] = HUBNESS_KS, shared: SharedWork | None = None,
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
        shared: the relevance-independent work (:class:`SharedWork`) of earlier calls on the same
            embeddings, options and seed (other relevance modes), reused and completed here.
    The progress setting prints, unless False, a start line and a timed finish line per similarity on
    stderr (:func:`pcmr.progress.status_line`).
    """
    check_setting_names(keywords, setting_names())
    chosen = replace(settings or EvaluationSettings(), **keywords)
    ks, lambda_grid, seed, figures = chosen.ks, chosen.lambda_grid, chosen.seed, chosen.figures
    uncertainty_measure, progress = chosen.uncertainty_measure, chosen.progress
    check_finite_embeddings(images, captions, "the embeddings given to evaluate_embeddings")
    similarities = check_names("similarity", chosen.similarities, list_similarities())
    rerankers = check_names("re-ranker", chosen.rerankers, list_rerankers())
    if relevance.dtype != torch.bool or tuple(relevance.shape) != (images.num, captions.num):
        raise ValueError(f"relevance must be a BoolTensor [{images.num}, {captions.num}], got "
                         f"{relevance.dtype} {tuple(relevance.shape)}")
    if num_folds is not None and (isinstance(num_folds, bool) or not isinstance(num_folds, int) or num_folds < 1
                                  or images.num % num_folds):
        raise ValueError(f"num_folds must be a positive integer dividing the {images.num} images, got {num_folds!r}")
    similarity_options = {k: dict(v) for k, v in (similarity_options or {}).items()}
    rerank_options = {k: dict(v) for k, v in (chosen.rerank_options or {}).items()}
    shared = SharedWork() if shared is None else shared
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
    hub_data: dict[str, dict[str, Any]] = {}  # similarity -> {"similarity/re-ranker": histograms}
    # the k_occurrence figure shows N_k at k = 10 (or the largest hubness k when 10 is not one of them)
    figure_k = OCCURRENCE_FIGURE_K if OCCURRENCE_FIGURE_K in hubness_ks else max(hubness_ks, default=0)
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
            scores = shared.score_matrix(name, "test", images, captions, options, seed)  # [N_img, N_cap]
            val_scores = (shared.score_matrix(name, "val", val[0].to(device), val[1].to(device), options, seed)
                          if val else None)
        except ValueError as err:
            result.skipped.append({"similarity": name, "rerank": "*", "reason": str(err)})
            continue
        result.meta["similarity_options"][name] = {k: v for k, v in options.items() if isinstance(v, (int, float))}
        timings = [f"scores {time.perf_counter() - started:.1f} s"]
        degenerate = degenerate_score_warning(scores, name)  # every row of this score carries it
        val_dirs = None
        if val_scores is not None and val is not None:
            val_relevance = val[2].to(device)
            val_dirs = {I2T: (val_scores, val_relevance), T2I: (val_scores.T, val_relevance.T)}
        for rerank in rerankers:
            rerank_started = time.perf_counter()
            params = dict(rerank_options.get(rerank, {}))
            base = get_reranker(rerank, **params)
            runs = {d: shared.runs.setdefault((name, rerank, d), {}) for d in DIRECTIONS}
            per_direction = _tuned_directions(base, params, val_dirs, ks, lambda_grid, runs)
            row: dict[str, Any] = {"similarity": name, "rerank": rerank}
            if degenerate is not None:
                row["warning"] = degenerate
            if base.tuned_parameter is not None and params.get(base.tuned_parameter) is None:
                for d, (_, value) in per_direction.items():
                    result.meta["selected_lambda"][f"{name}/{rerank}/{d}"] = value
            known_pmrp = shared.pmrp.get((name, rerank))  # PMRP depends on the class labels only
            methods: dict[str, Any] = {d: method if method.returns_scores else
                                       _KeptRuns(method, shared.test_runs.setdefault((name, rerank, d), {}))
                                       for d, (method, _) in per_direction.items()}
            evaluation = evaluate_directions(
                scores, relevance, reranker=methods, ks=ks,
                num_folds=num_folds, extra_positives=extra_positives, hubness_ks=tuple(hubness_ks),
                image_labels=image_labels if known_pmrp is None else None,
                caption_labels=caption_labels if known_pmrp is None else None)
            lists = not base.returns_scores
            row.update(table_row(evaluation.report, ks, extra_positives if not lists else (), lists, num_folds))
            if known_pmrp is None:
                shared.pmrp[(name, rerank)] = {key: row[key] for key in PMRP_COLUMNS if key in row}
            else:
                row.update(known_pmrp)
            if lists:
                row.update({tuned_value(d): value for d, (_, value) in per_direction.items()})
            result.rows.append(ordered(row, ks))
            if figures and hubness_ks and not lists:
                hub_data.setdefault(name, {})[f"{name}/{rerank}"] = {
                    d: occurrence_histogram(evaluation.k_occurrence[d][figure_k]) for d in DIRECTIONS}
            tuned = " with lambda selected on validation" if lists and val_dirs is not None else ""
            timings.append(f"{rerank}{tuned} {time.perf_counter() - rerank_started:.1f} s")
        status_line(f"  {name}: done in {time.perf_counter() - started:.1f} s ({'; '.join(timings)})", progress)
        measure = uncertainty_measure_for((images, captions), uncertainty_measure)  # PVSE point sets: spread
        if deciles_possible:
            if measure is not None:
                decile_data[name] = decile_series(scores, relevance, images, captions, measure)
                abstention_data[name] = abstention_series(scores, relevance, images, captions, measure)
                columns = abstention_columns(abstention_data[name])
            else:  # a point model: the deterministic references a sigma is compared against
                columns = abstention_columns(reference_abstention_series(scores, relevance))
            for row in result.rows:  # abstention reads the raw scores: the nns row carries it
                if row["similarity"] == name and get_reranker(row["rerank"]).is_identity:
                    row.update(columns)
    # figures that show one score show the model's own (the first of its trained options), else the first
    def own(data: dict[str, Any]) -> str | None:
        return next((name for name in [*similarity_options, *similarities] if name in data), None)

    if decile_data:
        result.figures[figure_keys.UNCERTAINTY_R1] = {"measure": measure, "series": decile_data}
    if abstention_data:  # the model's own score first: the margin and multiplicity references are drawn for it
        result.figures[figure_keys.RISK_COVERAGE] = {"measure": measure, "series": {
            name: abstention_data[name] for name in sorted(abstention_data, key=lambda n: n != own(abstention_data))}}
    if figures and all(isinstance(g, Gaussian) and g.logvar is not None for g in (images, captions)) \
            and images.dim > 2:
        result.figures[figure_keys.EMBEDDINGS_PCA] = pca_ellipse_series(images, captions, relevance)
    hub_similarity = own(hub_data)
    if hub_similarity is not None and min(images.num, captions.num) > figure_k:
        result.figures[figure_keys.K_OCCURRENCE] = {"k": figure_k, "series": hub_data[hub_similarity]}
    if figures and images.dim == 2:
        result.figures[figure_keys.EMBEDDINGS_2D] = embeddings_2d_series(images, captions, relevance)
    multiplicity_measure = uncertainty_measure_for((images, captions), uncertainty_measure)
    if figures and multiplicity_measure is not None:
        result.figures[figure_keys.UNCERTAINTY_MULTIPLICITY] = multiplicity_series(
            images, captions, relevance, multiplicity_measure)
    result.meta["about"] = [f"lambda selected on the validation split for {name}: {format_number(value, 3)}"
                            for name, value in result.meta["selected_lambda"].items()]
    if not result.rows:
        notes.append("no (similarity, re-ranker) pair could be evaluated; see Skipped")
    if hubness_ks:
        notes.append(f"hs-sum: sum of the skewness of N_k for k = {', '.join(map(str, hubness_ks))} over both "
                     "directions; a constant N_k (no hubs at all) counts as skewness 0")
    if num_folds is not None:
        result.meta["num_folds"] = num_folds
        notes.append(f"folds: R@K and rsum averaged over {num_folds} consecutive folds of {images.num // num_folds} "
                     "images and their captions, each re-scored on its own (COCO 1K protocol when 5 folds of 5K-test)")
    if any(not get_reranker(r).returns_scores for r in rerankers):
        notes.append("matching re-rankers (gm/rgm) return top-k lists: R@K from the run with k = K; "
                     "R-Precision, MAP@R and PMRP need a full ranking and are left empty")
    return result
