"""``RetrievalEvaluator``: the one way pcmr evaluates a model on a retrieval split.

Training validation (``pcmr.train.validation``), ``pcmr evaluate``, ``pcmr demo`` and ``pcmr study``
all build a :class:`RetrievalEvaluator` and call :meth:`RetrievalEvaluator.evaluate` with a
:class:`pcmr.Model` (the network with its vocabulary and trained score parameters, never passed apart);
what differs between them is only configuration: which similarities, re-rankers and relevance
modes, whether figures are drawn, and *extras*, callables that add columns to the rows (the
study's analysis columns).

Evaluating: the split is encoded once (``encode_split``), the validation split only when a
re-ranker tunes a parameter on it (RGM's lambda, HAL/RGM paper Sec. 3.3) that is not fixed in
``rerank_options``. Each relevance mode (:data:`pcmr.relevance.RELEVANCE_MODES`) gives one table
(:func:`pcmr.evaluation.evaluate.evaluate_embeddings`, the lambda selected under the same mode);
the tables are merged into one :class:`~pcmr.report.Report` whose rows carry their mode in the
``relevance`` column. Class labels (PMRP, PCME Sec. 4.1.2) are used under every mode; extra
positive sets (CxC, ECCV Caption), folds and the figures under the first mode only. The modes share
one :class:`~pcmr.evaluation.score_cache.ScoreCache`; after merging, the model-level producers
(:data:`pcmr.evaluation.producers.MODEL_PRODUCERS`: uncertainty under occlusion and word erasure) run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from pcmr.data.batching import ENCODE_BATCH_SIZE
from pcmr.data.split import RetrievalSplit
from pcmr.encode.checks import coco_id_problem, naming_source
from pcmr.encode.fingerprint import gallery_fingerprint
from pcmr.encode.inputs import encode_split
from pcmr.evaluation.columns import EVALUATION_COLUMNS, SELECTION_METRICS, selection_value
from pcmr.evaluation.evaluate import evaluate_embeddings
from pcmr.evaluation.producers import MODEL_PRODUCERS, ModelContext, run_producers
from pcmr.evaluation.relevance_modes import merge_relevance_results, relevance_modes
from pcmr.evaluation.score_cache import ScoreCache
from pcmr.evaluation.settings import EvaluationSettings, check_setting_names, setting_names
from pcmr.gaussian import Gaussian
from pcmr.hub import Model
from pcmr.inference import get_reranker, list_rerankers
from pcmr.metrics import COCO_NUM_FOLDS, HUBNESS_KS, load_extra_positives
from pcmr.metrics.defaults import DEFAULT_SELECT_ON
from pcmr.progress import phase, status_line
from pcmr.report import Report
from pcmr.report.figure_keys import RISK_COVERAGE

__all__ = ["EncodedEvaluation", "ExtraColumns", "PRIMARY_METRIC", "RetrievalEvaluator", "SELECTION_METRICS",
           "evaluate_model", "evaluator_setting_names", "needs_validation",
           "selection_value"]

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
    :class:`~pcmr.evaluation.settings.EvaluationSettings`, declared there once with their defaults and
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
    declared there and in :class:`~pcmr.evaluation.settings.EvaluationSettings` once with their
    defaults; an unknown one is a TypeError naming it with its near miss. Similarities the
    model cannot support are skipped with a reason; RGM's lambda is selected on ``val_split``; PMRP is
    reported where the split has class labels; the uncertainty-vs-corruption figure is drawn from
    occlusion / word-erasure series of the split's items. ``extra_positives`` names positive sets of
    ``pcmr.metrics.load_extra_positives`` (``"cxc"``, ``"eccv"``); None means both for a COCO split
    whose ids are those of COCO 5K-test when the ``eccv-caption`` package is installed (otherwise a
    note says why they are absent). ``num_folds`` adds fold-averaged R@K (see
    :func:`~pcmr.evaluation.evaluate.evaluate_embeddings`); None means 5 folds for a COCO split of 5000
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
