"""``RetrievalEvaluator``: the one way pcmr evaluates a model on a retrieval split, and
``evaluate_embeddings``, the evaluation table of encoded images and captions.

Training validation (``pcmr.train.validation``), ``pcmr evaluate``, ``pcmr demo`` and ``pcmr study``
all build a :class:`RetrievalEvaluator` and call :meth:`RetrievalEvaluator.evaluate` with a
:class:`pcmr.Model` (the network with its vocabulary and trained score parameters, never passed apart);
what differs between them is only configuration: which similarities, re-rankers and relevance
modes, whether figures are drawn, and *extras*, callables that add columns to the rows (the
study's analysis columns).

Evaluating: the split is encoded once (``encode_split``), the validation split only when a
re-ranker tunes a parameter on it (RGM's lambda, HAL/RGM paper Sec. 3.3) that is not fixed in
``rerank_options``. Each relevance mode (:func:`relevance_modes`) gives one table
(:func:`evaluate_embeddings`, the lambda selected under the same mode); the tables are merged into one
:class:`~pcmr.report.Report` whose rows carry their mode in the ``relevance`` column
(:func:`merge_relevance_results`). Class labels (PMRP, PCME Sec. 4.1.2) are used under every mode;
extra positive sets (CxC, ECCV Caption), folds and the figures under the first mode only. The modes
share one :class:`~pcmr.evaluation.table.ScoreCache`; after merging, the model-level producers
(:data:`pcmr.evaluation.producers.MODEL_PRODUCERS`: uncertainty under occlusion and word erasure) run.

Relevance modes: COCO and Flickr30k only annotate which captions were *written* for an image, so their
protocol counts a caption that fits another image as a miss ("source" relevance: false negatives
included). Where a dataset knows the relation exactly (the shapes grammar, CUB classes), pcmr reports
both: ``exact`` (the dataset's relation) and ``source`` (only the written caption counts), so a reader
sees how the COCO-style protocol ranks methods differently. A split whose relation is just the written
pairs (COCO, Flickr30k) has one mode, ``source``.

:func:`evaluate_embeddings` checks its input, scores the rows (:func:`pcmr.evaluation.table.score_rows`:
each similarity's score matrix once per evaluation, from the ``ScoreCache`` shared by the relevance
modes), then runs the registered producers (:mod:`pcmr.evaluation.producers`: the abstention columns
and the figures) and writes the report's notes. A row per (similarity, re-ranker):

- re-rankers that return scores (``nns``, ``is``, ``csls``): every metric on the re-scored matrix --
  R@K, R-Precision, MAP@R, PMRP (where labels exist), extra positive sets, folds, hubness;
- matchings (``gm``, ``rgm`` and compositions such as ``csls+rgm``) give top-k lists only: R@K from
  the run with ``k = K`` and N_k from the same lists; R-Precision, MAP@R, PMRP and folds need a
  ranking of the whole gallery and are left empty. A matching's tuned parameter (RGM's lambda) is
  chosen per direction on the validation split (``select_lambda``, sum of R@K) or taken from
  ``rerank_options``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import torch
from torch import Tensor

from pcmr.data.batching import ENCODE_BATCH_SIZE
from pcmr.data.split import RetrievalSplit
from pcmr.encode.checks import check_finite_embeddings, coco_id_problem, naming_source
from pcmr.encode.fingerprint import gallery_fingerprint
from pcmr.encode.inputs import encode_split
from pcmr.evaluation.columns import EVALUATION_COLUMNS, SELECTION_METRICS, format_number, selection_value
from pcmr.evaluation.producers import MODEL_PRODUCERS, ModelContext, run_producers
from pcmr.evaluation.table import (
    EvaluationContext,
    EvaluationSettings,
    ScoreCache,
    check_setting_names,
    score_rows,
    setting_names,
)
from pcmr.gaussian import Gaussian
from pcmr.hub import Model
from pcmr.inference import get_reranker, list_rerankers
from pcmr.metrics import COCO_NUM_FOLDS, HUBNESS_KS, load_extra_positives
from pcmr.metrics.defaults import DEFAULT_SELECT_ON
from pcmr.progress import phase, status_line
from pcmr.relevance import relevance_mode
from pcmr.report import Report
from pcmr.report.figure_keys import RISK_COVERAGE
from pcmr.scoring import check_names
from pcmr.similarity import list_similarities

__all__ = ["EncodedEvaluation", "ExtraColumns", "PRIMARY_METRIC", "RetrievalEvaluator", "SELECTION_METRICS", "evaluate_embeddings",
           "evaluate_model", "evaluator_setting_names", "merge_relevance_results", "needs_validation",
           "relevance_modes", "selection_value"]

#: The metric a :class:`RetrievalEvaluator` names as its primary one unless told otherwise (rsum; the
#: metrics that rank models, :data:`SELECTION_METRICS`, and their values, :func:`selection_value`, are
#: defined with the other columns in :mod:`pcmr.evaluation.columns`).
PRIMARY_METRIC = DEFAULT_SELECT_ON


@dataclass
class EncodedEvaluation:
    """What an extra sees: the model, the split, its embeddings and the relevance of every mode.

    Attributes:
        model: the evaluated :class:`pcmr.Model` (its network, vocabulary and trained score parameters).
        split: the evaluated split; images ``Gaussian [N_img, D]``, captions ``Gaussian [N_cap, D]``.
        relevance: ``{mode: BoolTensor [N_img, N_cap]}``.
        reports: ``{mode: Report}``, the table of each mode before merging (figures included).
        similarity_options: the options the similarities were scored with.
        device, batch_size: where and how the split was encoded.
    """

    model: Model
    split: RetrievalSplit
    images: Gaussian
    captions: Gaussian
    relevance: dict[str, torch.Tensor]
    reports: dict[str, Report]
    similarity_options: dict[str, dict[str, Any]]
    device: torch.device | str | None
    batch_size: int


#: ``extra(evaluation, mode, row) -> {column: value}``: columns added to one row (of relevance ``mode``)
ExtraColumns = Callable[[EncodedEvaluation, str, Mapping[str, Any]], Mapping[str, Any]]


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    """Run the block with one torch thread (then restore the caller's setting).

    The evaluation of encoded embeddings is thousands of small operations on matrices of a few
    million entries: a second thread mostly waits for work (and an idle OpenMP worker keeps spinning,
    taking a core from other processes), so one thread is faster on small and shared machines; the
    compiled loops then run serially too. It also makes the values independent of the number of
    cores (a float32 reduction split across threads can change the last bits of a score).
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def needs_validation(rerankers: Sequence[str], rerank_options: Mapping[str, Mapping[str, Any]] | None = None) -> bool:
    """Whether a re-ranker of ``rerankers`` tunes a parameter (its registry entry's
    ``tuned_parameter``) that ``rerank_options`` does not fix (unknown names: no)."""
    options = rerank_options or {}
    for name in rerankers:
        if name not in list_rerankers():
            continue  # rejected later with the list of accepted names
        tuned = get_reranker(name).tuned_parameter
        if tuned is not None and options.get(name, {}).get(tuned) is None:
            return True
    return False


@dataclass(frozen=True)
class RetrievalEvaluator(EvaluationSettings):
    """How to evaluate: on which split, with which settings, modes and extras.

    The scoring settings (``similarities``, ``rerankers``, ``rerank_options``, ``ks``, ``lambda_grid``,
    ``uncertainty_measure``, ``seed``, ``figures``, ``progress``) are the keyword-only fields of
    :class:`~pcmr.evaluation.table.EvaluationSettings`, declared there once with their defaults and
    passed on to :func:`evaluate_embeddings` as they are; the fields below are what only the
    evaluation of a model on a split has.

    Args:
        split: the split to evaluate (its ``relevance`` is the exact relation).
        val_split: where tuned re-ranker parameters are selected (needed only for those).
        relevance_modes: modes to report (None: every mode the split has, the exact relation first).
        extras: callables adding columns to each row (see :data:`ExtraColumns`), applied in order.
        batch_size, device: encoding (``progress`` also shows encoding bars; None: only on a terminal).
        extra_positives: names of positive sets (``"cxc"``, ``"eccv"``); None: both on COCO 5K-test.
        num_folds: fold-averaged R@K (None: 5 on COCO 5K-test, none otherwise).
        corruption: the uncertainty-vs-corruption figure (re-encodes occluded items);
        hubness: hubness columns (``hs_sum``).
        meta: extra report metadata (e.g. ``{"run": path}``).
        primary_metric: the metric that ranks models (one of :data:`SELECTION_METRICS`); training's
            model selection reads it (:meth:`primary_value`).
    """

    split: RetrievalSplit
    val_split: RetrievalSplit | None = None
    relevance_modes: Sequence[str] | None = None
    extras: Sequence[ExtraColumns] = ()
    batch_size: int = ENCODE_BATCH_SIZE
    device: torch.device | str | None = None
    extra_positives: Sequence[str] | None = None
    num_folds: int | None = None
    corruption: bool = True
    hubness: bool = True
    meta: dict[str, Any] = field(default_factory=dict)
    primary_metric: str = PRIMARY_METRIC

    def __post_init__(self) -> None:
        if self.primary_metric not in SELECTION_METRICS:
            raise ValueError(f"primary_metric {self.primary_metric!r}: expected one of {', '.join(SELECTION_METRICS)}")

    def primary_value(self, row: Mapping[str, Any]) -> float:
        """The :attr:`primary_metric` of one report row (or of training's validation metrics)."""
        return selection_value(row, self.primary_metric)

    @property
    def greater_is_better(self) -> bool:
        """Whether a higher :attr:`primary_metric` ranks a model higher (the schema's direction of the
        column, :data:`EVALUATION_COLUMNS`)."""
        return EVALUATION_COLUMNS.column(self.primary_metric).higher_is_better is not False

    def improves(self, value: float, best: float | None) -> bool:
        """Whether a primary value ``value`` beats ``best`` (None: nothing yet) in the metric's direction."""
        if best is None:
            return True
        return value > best if self.greater_is_better else value < best

    @property
    def needs_validation(self) -> bool:
        """Whether a re-ranker selects a parameter on :attr:`val_split` (see :func:`needs_validation`)."""
        return needs_validation(self.rerankers, self.rerank_options)

    def evaluate(self, model: Model, out_dir: str | os.PathLike[str] | None = None) -> Report:
        """The merged table of every relevance mode of ``model`` (a :class:`pcmr.Model`: its network,
        vocabulary and trained score parameters), then the model-level producers (the
        uncertainty-vs-corruption figure); saved under ``out_dir`` when given."""
        reports, encoded = self._evaluate(model)
        result = merge_relevance_results(list(reports.items()))
        if RISK_COVERAGE in result.figures:  # what the curve belongs to (pcmr search --risk-curve checks it)
            result.figures[RISK_COVERAGE]["fingerprint"] = gallery_fingerprint(
                model.network, getattr(self.split, "name", None), getattr(self.split, "split", None),
                encoded.images.num, encoded.captions.num)
        run_producers(ModelContext(model, self.split, self, encoded.images, encoded.captions, result),
                      MODEL_PRODUCERS)
        if out_dir is not None:
            with phase(f"writing the report and figures to {out_dir}", self.progress):
                result.save(out_dir)
        return result

    def evaluate_modes(self, model: Model) -> dict[str, Report]:
        """``{mode: Report}``, one table per relevance mode of ``model`` (the first is the primary one),
        every row with its extra columns."""
        return self._evaluate(model)[0]

    def _encode(self, model: Model, split: RetrievalSplit, what: str) -> tuple[Gaussian, Gaussian]:
        with phase(f"encoding the {getattr(split, 'split', '')} split{what}", self.progress):
            return encode_split(model.network, split, model.text_vocabulary, batch_size=self.batch_size,
                                device=self.device, progress=cast(bool, self.progress))

    def _evaluate(self, model: Model) -> tuple[dict[str, Report], EncodedEvaluation]:
        if not isinstance(model, Model):
            raise TypeError(f"RetrievalEvaluator.evaluate takes a pcmr.Model (pcmr.load, or pcmr.Model(network, "
                            f"vocabulary, similarity_options=...)), got {type(model).__name__}")
        options = {name: dict(values) for name, values in model.similarity_options.items()}
        split = self.split
        with naming_source(f"the embeddings of {split!r} encoded by {self.meta.get('run', 'the model')}"):
            images, captions = self._encode(model, split, "")
        modes = relevance_modes(split, self.relevance_modes)
        val_embeddings = None
        if self.val_split is not None and self.needs_validation:
            val_embeddings = self._encode(model, self.val_split, " (to select RGM's lambda)")
        info = {"model": model.config.name, "dataset": getattr(split, "name", None),
                "split": getattr(split, "split", None), "val_split": getattr(self.val_split, "split", None),
                "device": str(images.device), **self.meta}
        extra_sets, extra_note = _load_extra_positives(split, self.extra_positives)
        num_folds = self.num_folds
        if num_folds is None and split.info.get("coco_5k_test"):
            num_folds = COCO_NUM_FOLDS
        reports: dict[str, Report] = {}
        cache = ScoreCache()  # scores, lambda-selection runs and PMRP: computed once, for every mode
        with _one_torch_thread():  # many small operations: one thread is faster, and values never depend on cores
            for position, (mode, matrix) in enumerate(modes.items()):
                reports[mode] = self._evaluate_mode(position == 0, mode, matrix, images, captions, val_embeddings,
                                                    extra_sets, num_folds, options, info, cache)
        if extra_note:
            next(iter(reports.values())).meta["notes"].append(extra_note)
        encoded = EncodedEvaluation(model, split, images, captions, dict(modes), reports, options,
                                    self.device, self.batch_size)
        for mode, report in reports.items():
            report.rows[:] = [self._with_extras(encoded, mode, row) for row in report.rows]
        return reports, encoded

    def _with_extras(self, encoded: EncodedEvaluation, mode: str, row: dict[str, Any]) -> dict[str, Any]:
        added: dict[str, Any] = {}
        for extra in self.extras:
            added.update(extra(encoded, mode, row))
        return {**row, **added}

    def _evaluate_mode(self, primary: bool, mode: str, matrix: torch.Tensor, images: Gaussian, captions: Gaussian,
                       val_embeddings: tuple[Gaussian, Gaussian] | None, extra_sets: list[Any],
                       num_folds: int | None, options: dict[str, dict[str, Any]], info: dict[str, Any],
                       cache: ScoreCache) -> Report:
        """The table of one relevance mode (extra positive sets and folds under the primary mode only)."""
        split = self.split
        status_line(f"evaluating with {mode} relevance ({len(self.similarities)} similarities x "
                    f"{len(self.rerankers)} re-rankers)", self.progress)
        val = None
        if val_embeddings is not None and self.val_split is not None:  # lambda selected under the same mode
            val = (*val_embeddings, self.val_split.relevance_by_mode(mode).matrix())
        settings = EvaluationSettings(**{name: getattr(self, name) for name in setting_names()})
        return evaluate_embeddings(
            images, captions, matrix, settings=settings, extra_positives=extra_sets if primary else (),
            similarity_options=options, image_labels=split.image_labels, caption_labels=split.caption_labels,
            val=val, num_folds=num_folds if primary else None, meta=info,
            hubness_ks=HUBNESS_KS if self.hubness else (), shared=cache)


def evaluator_setting_names() -> tuple[str, ...]:
    """The settings a :class:`RetrievalEvaluator` takes by keyword: every field but ``split``."""
    return tuple(name for name in setting_names(RetrievalEvaluator) if name != "split")


def evaluate_model(model: Model, split: RetrievalSplit, *, out_dir: str | os.PathLike[str] | None = None,
                   relevance: Sequence[str] | None = None, **settings: Any) -> Report:
    """Encode ``split`` (and ``val_split`` when a re-ranker tunes a parameter on it) with ``model`` (a
    :class:`pcmr.Model`: its network, vocabulary and trained score parameters) and build the evaluation
    table: :meth:`RetrievalEvaluator.evaluate` with these settings.

    ``settings`` are fields of :class:`RetrievalEvaluator` (``similarities``, ``rerankers``,
    ``val_split``, ``rerank_options``, ``batch_size``, ``device``, ``progress``, ``ks``,
    ``lambda_grid``, ``uncertainty_measure``, ``extra_positives``, ``num_folds``, ``meta``, ...),
    declared there and in :class:`~pcmr.evaluation.table.EvaluationSettings` once with their
    defaults; an unknown one is a TypeError naming it with its near miss. Similarities the
    model cannot support are skipped with a reason; RGM's lambda is selected on ``val_split``; PMRP is
    reported where the split has class labels; the uncertainty-vs-corruption figure is drawn from
    occlusion / word-erasure series of the split's items. ``extra_positives`` names positive sets of
    ``pcmr.metrics.load_extra_positives`` (``"cxc"``, ``"eccv"``); None means both for a COCO split
    whose ids are those of COCO 5K-test when the ``eccv-caption`` package is installed (otherwise a
    note says why they are absent). ``num_folds`` adds fold-averaged R@K (see
    :func:`evaluate_embeddings`); None means 5 folds for a COCO split of 5000
    images (the COCO 1K protocol) and none otherwise. With ``out_dir`` the result is also saved there
    (Markdown, CSV, JSON, PNG). ``relevance`` names the relevance modes to report (None: every mode the
    split has); each row carries its mode in the ``relevance`` column.
    """
    check_setting_names(settings, evaluator_setting_names())
    if "rerank_options" in settings:
        settings["rerank_options"] = {k: dict(v) for k, v in (settings["rerank_options"] or {}).items()}
    if "meta" in settings:
        settings["meta"] = dict(settings["meta"] or {})
    evaluator = RetrievalEvaluator(split, relevance_modes=relevance, **settings)
    return evaluator.evaluate(model, out_dir=out_dir)


def _load_extra_positives(split: RetrievalSplit, names: Sequence[str] | None) -> tuple[list[Any], str | None]:
    """CxC / ECCV Caption positives for ``split`` and a note, if any (see :class:`RetrievalEvaluator`)."""

    requested = list(names) if names is not None else list(split.info.get("extra_positive_sets", ()))
    problem = coco_id_problem(split) if requested else None  # ids that are not COCO ids would mislabel
    if problem is not None:
        if names is not None:
            raise ValueError(problem)
        return [], f"CxC / ECCV Caption metrics not reported ({problem})"
    extras, problems = [], []
    for name in requested:
        try:
            extra = load_extra_positives(name, split.image_ids, split.caption_ids)
        except (ImportError, ValueError, TypeError) as err:
            if names is not None:
                raise
            problems.append(f"{name}: {err}")
            continue
        if int(extra.i2t.indptr[-1]) == 0 and int(extra.t2i.indptr[-1]) == 0:
            problems.append(f"{name}: no image or caption id of the split is in COCO 5K-test")
            continue
        extras.append(extra)
    note = f"CxC / ECCV Caption metrics not reported ({'; '.join(problems)})" if problems else None
    return extras, note


# ---------------------------------------------------------------- relevance modes
def relevance_modes(split: RetrievalSplit, requested: Sequence[str] | None = None) -> dict[str, Tensor]:
    """``{mode: BoolTensor [N_img, N_cap]}`` for a split, the primary mode first.

    ``exact`` is the split's relation and is offered only where it differs from the written pairs;
    ``source`` is :meth:`~pcmr.data.RetrievalSplit.source_relevance`. ``requested`` keeps only those
    modes (None: every mode the split has); a requested mode the split does not know raises.
    """
    exact = split.relevance_matrix()
    source = split.source_relevance().matrix()
    modes = {"exact": exact, "source": source} if not bool((exact == source).all()) else {"source": source}
    if requested is None:
        return modes
    requested = [relevance_mode(mode) for mode in requested]
    for mode in requested:
        if mode not in modes:
            raise ValueError(
                f"relevance mode {mode!r}: split {getattr(split, 'name', '?')}/{getattr(split, 'split', '?')} "
                f"knows only the written pairs (modes: {', '.join(modes)})"
            )
    return {mode: modes[mode] for mode in modes if mode in requested}


def _tagged(row: dict[str, Any], mode: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        out[key] = value
        if key == "rerank":
            out["relevance"] = mode
    return out


def merge_relevance_results(results: Sequence[tuple[str, Report]]) -> Report:
    """One result from one result per mode: every row tagged with its ``relevance``; meta, skipped
    pairs and figures from the first (primary) mode."""
    first = results[0][1]
    merged = Report(title=first.title, meta=dict(first.meta), skipped=list(first.skipped), figures=dict(first.figures),
                    schema=first.schema)
    for mode, result in results:
        merged.rows.extend(_tagged(row, mode) for row in result.rows)
    modes = [mode for mode, _ in results]
    merged.meta["relevance_modes"] = modes
    notes = list(merged.meta.get("notes") or [])
    if "exact" in modes:
        notes.append("relevance: exact = the dataset's relation (every caption that fits an image); source = only "
                     "the captions written for an image count (the COCO / Flickr30k protocol, false negatives "
                     "included); PMRP, extra positive sets and figures are reported under the first mode")
    else:
        notes.append("relevance: source = the captions written for an image (the split knows no other relation)")
    merged.meta["notes"] = notes
    return merged


# ---------------------------------------------------------------- the table of encoded embeddings
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
        settings: what is scored and how (:class:`~pcmr.evaluation.table.EvaluationSettings`:
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
        shared: the :class:`~pcmr.evaluation.table.ScoreCache` of earlier calls on the same
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
