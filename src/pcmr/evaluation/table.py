"""One evaluation table of encoded embeddings: what it scores, what it knows, its scores and its rows.

:func:`pcmr.evaluation.evaluator.evaluate_embeddings` builds one table per relevance mode from the pieces
here, in this order:

- :class:`EvaluationSettings`: what is scored and how, declared once with their defaults. Every entry
  that evaluates takes these settings under the same names and with the same defaults:
  ``evaluate_embeddings`` (encoded embeddings), :class:`pcmr.evaluation.RetrievalEvaluator` (a model on
  a split; its dataclass extends this one with what only a model evaluation has: splits, encoding,
  extras, corruption) and :func:`pcmr.evaluation.model.evaluate` / ``model_evaluator`` (a loaded model,
  every setting left out taken from its run). Keyword arguments are checked against the fields here
  (:func:`check_setting_names`), so an unknown one is named with its near miss, e.g.
  ``unknown evaluation setting 'reranker' (did you mean 'rerankers'?); expected one of: ...``.
- :class:`EvaluationContext`: everything one table knows while it is built (the embeddings, the
  relevance, the settings, the score matrices and the report); the rows fill it, then the producers
  (:mod:`pcmr.evaluation.producers`) read it.
- :class:`ScoreCache`: the work that does not depend on the relevance relation. The score matrices, a
  matching's runs and the PMRP columns are the same under every mode, so they are computed under the
  first mode and read back under the others. A cache belongs to one pair of embeddings (test and
  validation), one set of similarity options and one seed: the evaluator makes one per evaluation
  and hands it to each ``evaluate_embeddings`` call of that evaluation (one per mode);
  :meth:`ScoreCache.score_matrix` computes each ``(similarity, part)`` matrix once (``part``: ``test``
  or ``val``), with the seed it is given; :meth:`ScoreCache.lambda_runs` and
  :meth:`ScoreCache.test_runs_of` hand out the dictionaries a matching's runs are kept in
  (``select_lambda``'s ``runs`` on validation, :class:`KeptRuns` on test): a mode that selects a
  lambda another mode selected runs no matching again; :meth:`ScoreCache.known_pmrp` /
  :meth:`ScoreCache.keep_pmrp`: the PMRP columns of a (similarity, re-ranker), which depend on the
  class labels only.
- :func:`score_rows`: one row per (similarity, re-ranker). Each row is one call of the bidirectional
  driver ``pcmr.metrics.evaluate_directions`` (image->text on ``S``, text->image on ``S.T``), which
  re-scores each direction (and each fold) with the re-ranker; a matching's tuned parameter (RGM's
  lambda) is selected per direction on the validation split (``select_lambda``, sum of R@K) or taken
  from ``rerank_options``.
- Degenerate scores and tables (:func:`degenerate_score_warning`, :func:`collapsed_recall_warning`): a
  score that is constant, or with most queries' top scores tied across a large part of the gallery
  (:data:`DEGENERATE_GALLERY_SHARE`; identical items, the same caption written for several images, tie
  legitimately), ranks nothing. Every metric of pcmr counts tied items at chance (docs/metrics.md), so
  the numbers are not inflated, but they describe no model either: the report flags such rows (a
  ``warning`` per row, listed under "Warnings" in ``results.md`` and printed by ``pcmr evaluate``), and
  training validation does not select a model on such a score (``pcmr.train.validation``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor

from pcmr.evaluation.columns import ordered, pmrp, recall, table_row, tuned_value
from pcmr.gaussian import DEFAULT_UNCERTAINTY_MEASURE, Gaussian
from pcmr.inference import DEFAULT_LAMBDA_GRID, Reranker, get_reranker, select_lambda
from pcmr.metrics import DEFAULT_KS, evaluate_directions
from pcmr.metrics.defaults import DEFAULT_RERANKERS, DEFAULT_SIMILARITIES
from pcmr.metrics.driver import DIRECTIONS, PMRP_ZETAS
from pcmr.point_set import uncertainty_measure_for
from pcmr.progress import status_line
from pcmr.relevance import I2T, T2I
from pcmr.report import Report
from pcmr.scoring import DEFAULT_SEED, score_matrix, unsupported_reason
from pcmr.suggest import unknown_name

__all__ = ["DEGENERATE_FRACTION", "DEGENERATE_GALLERY_SHARE", "EvaluationContext", "EvaluationSettings", "KeptRuns",
           "OCCURRENCE_FIGURE_K", "PMRP_COLUMNS", "ScoreCache", "check_setting_names", "collapsed_recall_warning",
           "degenerate_score_warning", "score_rows", "setting_names"]


# ---------------------------------------------------------------- settings
@dataclass(frozen=True, kw_only=True)
class EvaluationSettings:
    """What is scored and how, for any evaluation of embeddings (keyword-only fields).

    Attributes:
        similarities, rerankers: names (``["all"]`` for every registered one).
        rerank_options: parameters per re-ranker name: ``beta`` (is), ``csls_k`` (csls), ``lam`` (rgm;
            a fixed lambda instead of selecting one on the validation split).
        ks: cut-offs of R@K; lambda_grid: lambda candidates for RGM (HAL/RGM paper Sec. 3.3).
        uncertainty_measure: ``Gaussian.uncertainty`` measure for the decile and abstention analyses.
        seed: seeds the samples of sampled similarities (``match_prob``).
        figures: compute the figures' data (uncertainty deciles, k-occurrence, 2-D embeddings).
        progress: False prints nothing; None only on a terminal; True always (status lines on stderr).
    """

    similarities: Sequence[str] = DEFAULT_SIMILARITIES
    rerankers: Sequence[str] = DEFAULT_RERANKERS
    rerank_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    ks: Sequence[int] = DEFAULT_KS
    lambda_grid: Sequence[float] = DEFAULT_LAMBDA_GRID
    uncertainty_measure: str = DEFAULT_UNCERTAINTY_MEASURE
    seed: int = DEFAULT_SEED
    figures: bool = True
    progress: bool | None = False


def setting_names(cls: type[Any] = EvaluationSettings) -> tuple[str, ...]:
    """The field names of the settings dataclass ``cls`` (:class:`EvaluationSettings` or a subclass)."""
    return tuple(f.name for f in fields(cls))


def check_setting_names(given: Iterable[str] | Mapping[str, Any], accepted: Iterable[str]) -> None:
    """Raise a TypeError naming each key of ``given`` that is not in ``accepted`` (with its near miss)."""
    accepted = list(accepted)
    unknown = [name for name in given if name not in accepted]
    if unknown:
        raise TypeError(unknown_name("evaluation setting", unknown, accepted))


# ---------------------------------------------------------------- the relevance-independent work
@dataclass
class ScoreCache:
    """The relevance-independent work of one evaluation (the module docstring gives the contract).

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

    def lambda_runs(self, name: str, rerank: str) -> dict[str, dict[tuple[float, int], Tensor]]:
        """Per direction, where the lambda selection of ``rerank`` on ``name``'s validation scores keeps its runs."""
        return {d: self.runs.setdefault((name, rerank, d), {}) for d in DIRECTIONS}

    def test_runs_of(self, name: str, rerank: str, direction: str) -> dict[tuple[Any, int], Tensor]:
        """Where a matching ``rerank`` keeps its runs on ``name``'s test scores in ``direction``."""
        return self.test_runs.setdefault((name, rerank, direction), {})

    def known_pmrp(self, name: str, rerank: str) -> dict[str, Any] | None:
        """The PMRP columns of ``(name, rerank)`` computed under an earlier mode, else None."""
        return self.pmrp.get((name, rerank))

    def keep_pmrp(self, name: str, rerank: str, columns: dict[str, Any]) -> None:
        """Remember the PMRP columns of ``(name, rerank)`` for the later modes."""
        self.pmrp[(name, rerank)] = columns


@dataclass(frozen=True)
class KeptRuns:
    """A matching re-ranker whose runs (``topk_rescored``) are kept in ``runs`` by its parameters and K:
    the driver's interface (``returns_scores``, ``fitted``, ``rescore``, ``topk_rescored``) for one
    direction of one score matrix."""

    reranker: Reranker
    runs: dict[tuple[Any, int], Tensor]

    @property
    def returns_scores(self) -> bool:
        return self.reranker.returns_scores

    def fitted(self, size: tuple[int, ...]) -> KeptRuns:
        return KeptRuns(self.reranker.fitted(size), self.runs)

    def rescore(self, scores: Tensor) -> Tensor:
        return self.reranker.rescore(scores)

    def topk_rescored(self, rescored: Tensor, k: int) -> Tensor:
        key = (tuple(sorted(self.reranker.parameters().items())), k)
        if key not in self.runs:
            self.runs[key] = self.reranker.topk_rescored(rescored, k)
        return self.runs[key]


# ---------------------------------------------------------------- what one table knows
#: the k of the N_k histogram in the ``k_occurrence`` figure
OCCURRENCE_FIGURE_K = 10


@dataclass
class EvaluationContext:
    """Everything one :func:`~pcmr.evaluation.evaluator.evaluate_embeddings` call knows: the rows fill it,
    then its producers (:mod:`pcmr.evaluation.producers`) read it.

    Attributes:
        images, captions: ``Gaussian [N_img, D]`` / ``[N_cap, D]``; relevance: BoolTensor ``[N_img, N_cap]``.
        settings: the resolved :class:`EvaluationSettings`.
        similarities, rerankers: the checked names; similarity_options: options per similarity.
        image_labels, caption_labels: class labels ``[N, C]`` (both or None).
        val: ``(images, captions, relevance)`` of the validation split, or None.
        extra_positives, num_folds, hubness_ks: as :func:`evaluate_embeddings` takes them.
        cache: the :class:`ScoreCache` shared by the relevance modes.
        report: the report being built (rows, figures, meta, notes).
        scores: ``{similarity: S [N_img, N_cap]}`` of every similarity that was scored, in order.
        k_occurrence: ``{(similarity, re-ranker): {direction: {k: N_k}}}`` of the rows that re-score a
            full matrix (when hubness is reported).
    """

    images: Gaussian
    captions: Gaussian
    relevance: Tensor
    settings: EvaluationSettings
    similarities: list[str]
    rerankers: list[str]
    similarity_options: dict[str, dict[str, Any]]
    rerank_options: dict[str, dict[str, Any]]
    image_labels: Tensor | None
    caption_labels: Tensor | None
    val: tuple[Gaussian, Gaussian, Tensor] | None
    extra_positives: Sequence[Any]
    num_folds: int | None
    hubness_ks: tuple[int, ...]
    cache: ScoreCache
    report: Report
    scores: dict[str, Tensor] = field(default_factory=dict)
    k_occurrence: dict[tuple[str, str], Any] = field(default_factory=dict)

    @property
    def notes(self) -> list[str]:
        """The report's notes (a producer appends to them)."""
        notes: list[str] = self.report.meta["notes"]
        return notes

    @property
    def measure(self) -> str | None:
        """The uncertainty measure the analyses can use on these embeddings (None: point embeddings)."""
        return uncertainty_measure_for((self.images, self.captions), self.settings.uncertainty_measure)

    @property
    def deciles_possible(self) -> bool:
        """Whether the uncertainty analyses can be drawn: figures asked for, and at least 10 queries with a
        relevant item in each direction."""
        relevance = self.relevance
        return self.settings.figures and min(int(relevance.any(dim=1).sum()), int(relevance.any(dim=0).sum())) >= 10

    @property
    def figure_k(self) -> int:
        """The k of the ``k_occurrence`` figure: 10, or the largest hubness k when 10 is not one of them."""
        return OCCURRENCE_FIGURE_K if OCCURRENCE_FIGURE_K in self.hubness_ks else max(self.hubness_ks, default=0)

    def own(self, data: dict[str, Any]) -> str | None:
        """The similarity a one-score figure shows: the model's own (the first of its trained options)
        when ``data`` has it, else the first requested one ``data`` has."""
        return next((name for name in [*self.similarity_options, *self.similarities] if name in data), None)


# ---------------------------------------------------------------- the rows
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


# ---------------------------------------------------------------- degenerate scores and tables
#: share of queries with a wide tie at the top above which a score counts as degenerate
DEGENERATE_FRACTION = 0.5
#: a tie at the top is wide when it holds at least this share of the gallery (and two items or more)
DEGENERATE_GALLERY_SHARE = 0.1


def degenerate_score_warning(scores: Tensor, name: str = "the score") -> str | None:
    """A sentence when ``scores [N_img, N_cap]`` is constant or when, in either direction, more than
    :data:`DEGENERATE_FRACTION` of the queries have their top score shared by at least
    :data:`DEGENERATE_GALLERY_SHARE` of the gallery (two items or more); else None."""
    if scores.numel() < 2:
        return None
    first = scores.reshape(-1)[0]
    if bool((scores == first).all()):
        return (f"degenerate score: every {name} value is {float(first):.6g} (a constant score ranks nothing; "
                f"ties count at chance level)")
    for direction, matrix in (("image->text", scores), ("text->image", scores.T)):
        num_queries, num_gallery = matrix.shape
        if num_gallery < 2 or num_queries == 0:
            continue
        wide = max(2, math.ceil(DEGENERATE_GALLERY_SHARE * num_gallery))
        tied = torch.zeros(num_queries, dtype=torch.bool, device=matrix.device)
        for start in range(0, num_queries, 1024):  # [b, G] comparisons, a block at a time
            block = matrix[start:start + 1024]
            top = block.max(dim=1, keepdim=True).values
            tied[start:start + 1024] = (block == top).sum(dim=1) >= wide
        share = float(tied.double().mean())
        if share > DEGENERATE_FRACTION:
            return (f"degenerate score: for {100 * share:.0f}% of the {direction} queries at least {wide} of "
                    f"{num_gallery} items tie for the top {name} value (ties count at chance level; the ranking "
                    f"carries little information)")
    return None


def collapsed_recall_warning(rows: Sequence[Mapping[str, Any]], ks: Sequence[int] = DEFAULT_KS) -> str | None:
    """A warning when, in an evaluation table, R@K is the same for every K of ``ks`` in both directions
    for every row (a model that retrieves everything or nothing at once: collapsed scores), else None."""
    flat: list[list[float]] = []
    for row in rows:
        for direction in DIRECTIONS:
            values = [row.get(recall(direction, k)) for k in ks]
            numbers = [float(v) for v in values if isinstance(v, (int, float))]
            if len(numbers) != len(values):
                return None
            flat.append(numbers)
    if not flat or any(max(v) - min(v) > 1e-9 for v in flat):
        return None
    recalls = ", ".join(f"R@{k}" for k in ks)
    if all(v[0] >= 100.0 - 1e-9 for v in flat):
        return None  # every query finds its items at rank 1: a perfect model, not a collapsed one
    return (f"{recalls} are equal in every row and both directions: the model's scores look collapsed "
            f"(near-constant); check the training run")
