"""The rows of an evaluation table: one per (similarity, re-ranker), scored from the cached score matrices.

For each similarity the ``[N_img, N_cap]`` score matrix comes from the evaluation's
:class:`~pcmr.evaluation.score_cache.ScoreCache` (computed once for every relevance mode). Each
(similarity, re-ranker) row is one call of the bidirectional driver ``pcmr.metrics.evaluate_directions``
(image->text on ``S``, text->image on ``S.T``), which re-scores each direction (and each fold) with the
re-ranker; a matching's tuned parameter (RGM's lambda) is selected per direction on the validation split
(``select_lambda``, sum of R@K) or taken from ``rerank_options``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from torch import Tensor

from pcmr.evaluation.columns import ordered, pmrp, table_row, tuned_value
from pcmr.evaluation.degenerate import degenerate_score_warning
from pcmr.evaluation.producers import EvaluationContext
from pcmr.evaluation.score_cache import KeptRuns
from pcmr.inference import Reranker, get_reranker, select_lambda
from pcmr.metrics import evaluate_directions
from pcmr.metrics.driver import DIRECTIONS, PMRP_ZETAS
from pcmr.progress import status_line
from pcmr.relevance import I2T, T2I
from pcmr.scoring import unsupported_reason

__all__ = ["PMRP_COLUMNS", "score_rows"]

#: the PMRP columns of a row (they depend on the class labels only, not on the relevance mode)
PMRP_COLUMNS = tuple(pmrp(d, z) for d in DIRECTIONS for z in [*map(str, PMRP_ZETAS), "mean"])


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


def _scores(context: EvaluationContext, name: str) -> tuple[Tensor, Tensor | None] | None:
    """The test and validation score matrices of ``name`` (None, noted in Skipped, when it cannot score)."""
    images, captions, val, report = context.images, context.captions, context.val, context.report
    options = context.similarity_options.get(name, {})
    reason = unsupported_reason(name, images, captions, options)
    if reason is not None:
        report.skipped.append({"similarity": name, "rerank": "*", "reason": reason})
        return None
    seed, device = context.settings.seed, images.device
    try:
        scores = context.cache.score_matrix(name, "test", images, captions, options, seed)  # [N_img, N_cap]
        val_scores = (context.cache.score_matrix(name, "val", val[0].to(device), val[1].to(device), options, seed)
                      if val else None)
    except ValueError as err:
        report.skipped.append({"similarity": name, "rerank": "*", "reason": str(err)})
        return None
    report.meta["similarity_options"][name] = {k: v for k, v in options.items() if isinstance(v, (int, float))}
    return scores, val_scores


def _row(context: EvaluationContext, name: str, rerank: str, scores: Tensor,
         val_dirs: dict[str, tuple[Tensor, Tensor]] | None, degenerate: str | None) -> dict[str, Any]:
    """The row of ``(name, rerank)`` (its selected lambdas recorded in the report's meta)."""
    settings, cache, ks = context.settings, context.cache, context.settings.ks
    params = dict(context.rerank_options.get(rerank, {}))
    base = get_reranker(rerank, **params)
    per_direction = _tuned_directions(base, params, val_dirs, ks, settings.lambda_grid,
                                      cache.lambda_runs(name, rerank))
    row: dict[str, Any] = {"similarity": name, "rerank": rerank}
    if degenerate is not None:
        row["warning"] = degenerate
    if base.tuned_parameter is not None and params.get(base.tuned_parameter) is None:
        for d, (_, value) in per_direction.items():
            context.report.meta["selected_lambda"][f"{name}/{rerank}/{d}"] = value
    known_pmrp = cache.known_pmrp(name, rerank)  # PMRP depends on the class labels only
    methods: dict[str, Any] = {d: method if method.returns_scores else KeptRuns(method, cache.test_runs_of(name, rerank, d))
                               for d, (method, _) in per_direction.items()}
    evaluation = evaluate_directions(
        scores, context.relevance, reranker=methods, ks=ks, num_folds=context.num_folds,
        extra_positives=context.extra_positives, hubness_ks=context.hubness_ks,
        image_labels=context.image_labels if known_pmrp is None else None,
        caption_labels=context.caption_labels if known_pmrp is None else None)
    lists = not base.returns_scores
    row.update(table_row(evaluation.report, ks, context.extra_positives if not lists else (), lists,
                         context.num_folds))
    if known_pmrp is None:
        cache.keep_pmrp(name, rerank, {key: row[key] for key in PMRP_COLUMNS if key in row})
    else:
        row.update(known_pmrp)
    if lists:
        row.update({tuned_value(d): value for d, (_, value) in per_direction.items()})
    elif context.hubness_ks:
        context.k_occurrence[(name, rerank)] = evaluation.k_occurrence
    return ordered(row, ks)


def _score_similarity(context: EvaluationContext, name: str) -> None:
    """The rows of one similarity, each re-ranker in turn, with a timed status line."""
    progress, images, captions = context.settings.progress, context.images, context.captions
    started = time.perf_counter()
    status_line(f"  {name}: scoring {images.num} images x {captions.num} captions, then "
                f"{', '.join(context.rerankers)} ...", progress)
    scored = _scores(context, name)
    if scored is None:
        return
    scores, val_scores = scored
    context.scores[name] = scores
    timings = [f"scores {time.perf_counter() - started:.1f} s"]
    degenerate = degenerate_score_warning(scores, name)  # every row of this score carries it
    val_dirs = None
    if val_scores is not None and context.val is not None:
        val_relevance = context.val[2].to(images.device)
        val_dirs = {I2T: (val_scores, val_relevance), T2I: (val_scores.T, val_relevance.T)}
    for rerank in context.rerankers:
        rerank_started = time.perf_counter()
        context.report.rows.append(_row(context, name, rerank, scores, val_dirs, degenerate))
        lists = not get_reranker(rerank).returns_scores
        tuned = " with lambda selected on validation" if lists and val_dirs is not None else ""
        timings.append(f"{rerank}{tuned} {time.perf_counter() - rerank_started:.1f} s")
    status_line(f"  {name}: done in {time.perf_counter() - started:.1f} s ({'; '.join(timings)})", progress)


def score_rows(context: EvaluationContext) -> None:
    """Append the rows of every similarity x re-ranker to ``context.report`` (skipped pairs with their reason)."""
    for name in context.similarities:
        _score_similarity(context, name)
