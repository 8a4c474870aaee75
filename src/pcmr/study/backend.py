"""The study's one adapter to the rest of pcmr: config overrides, training, evaluation.

Everything the study runner needs from pcmr's config layer (recipe + dotted overrides), trainer
(new run or ``--resume`` of an interrupted one) and evaluation (encoding, the evaluation table,
the uncertainty-vs-corruption series, scores for binary selection) is called from this module
only, so a change in those APIs touches one file.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml

from pcmr.atomic import atomic_write_text
from pcmr.config import ConfigError
from pcmr.evaluation import (
    EncodedEvaluation,
    RetrievalEvaluator,
    encode_split,
    score_matrix,
    unsupported_reason,
)
from pcmr.evaluation.evaluator import needs_validation
from pcmr.evaluation.figures import corruption_series
from pcmr.metrics.query_blind import query_blind_r_precision
from pcmr.metrics.signal import uncertainty_signal
from pcmr.models import create_model
from pcmr.study.analysis import binary_selection, least_squares_slope, relevant_count_correlation
from pcmr.study.spec import AnalysisOptions, StudyError
from pcmr.train import check_config, load_config
from pcmr.train.lifecycle import start_or_resume
from pcmr.train.recipes import find_recipe
from pcmr.train.run import load_run, load_run_split
from pcmr.train.trainer import torch_seed

__all__ = ["UNCERTAINTY_MEASURE", "evaluate_run", "override_items", "resolve_config", "schedule_text", "train_run",
           "write_text"]

UNCERTAINTY_MEASURE = "log_det"


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (readers see the old file or the whole new one)."""

    atomic_write_text(Path(path), text)


def _flow(value: Any) -> str:
    """``value`` as one line of YAML, so the override parser reads back the same value."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9).strip()
    return text[:-3].strip() if text.endswith("...") else text


def override_items(overrides: Mapping[str, Any]) -> list[str]:
    """``{"train.lr": 1e-3}`` -> ``["train.lr=0.001"]`` (the ``--set key=value`` form)."""
    return [f"{key}={_flow(value)}" for key, value in overrides.items()]


def resolve_config(recipe: str, overrides: Mapping[str, Any]) -> Any:
    """The run config of ``recipe`` (a recipe name or YAML path) with dotted-key overrides applied
    by pcmr's own override parser, checked as ``pcmr train`` checks it."""

    config = load_config(find_recipe(recipe), override_items(overrides))
    check_config(config)
    return config


def train_run(recipe: str, overrides: Mapping[str, Any], run_dir: Path) -> float:
    """Train into ``run_dir`` through pcmr's run lifecycle (:func:`pcmr.train.lifecycle.start_or_resume`,
    under the run lock): a new run, the continuation of an interrupted one from its newest complete
    checkpoint, or nothing when its training finished. Returns seconds spent."""

    start = time.perf_counter()
    config = resolve_config(recipe, overrides)
    try:
        start_or_resume(config, run_dir)
    except ConfigError as exc:
        if "another config" not in str(exc):
            raise
        raise StudyError(f"{exc} (the study's config)") from None
    return time.perf_counter() - start


def _has_variance(embeddings: Any) -> bool:
    """True for Gaussian embeddings with variances (not points, not sets of points)."""
    return getattr(embeddings, "is_point", True) is False


def _finite(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _corruption_columns(model: Any, split: Any, vocab: Any, device: Any, batch_size: int,
                        options: AnalysisOptions) -> dict[str, float | None]:

    series = corruption_series(model, split, vocab, UNCERTAINTY_MEASURE, max_items=options.max_items,
                               batch_size=batch_size, device=device) or {}
    out: dict[str, float | None] = {}
    if "image" in series:
        out["image_uncertainty_occlusion_slope"] = _finite(
            least_squares_slope(series["image"]["ratios"], series["image"]["mean_uncertainty"]))
    if "caption" in series:
        out["caption_uncertainty_erasure_slope"] = _finite(
            least_squares_slope(series["caption"]["ratios"], series["caption"]["mean_uncertainty"]))
    return out


def _binary_selection_columns(trained: Any, similarities: Sequence[str], device: Any,
                              batch_size: int) -> dict[str, dict[str, float]]:
    """``{similarity: {binsel_*: accuracy}}`` on the shapes ``binary_selection`` split."""

    split = load_run_split(trained.config, "binary_selection")
    roles = split.info.get("roles")
    if not roles or split.num_images == 0:
        return {}
    images, captions = encode_split(trained.model, split, trained.vocab, batch_size=batch_size, device=device)
    out = {}
    for name in similarities:
        options = dict(trained.similarity_options.get(name, {}))
        if unsupported_reason(name, images, captions, options) is not None:
            continue
        scores = score_matrix(name, images, captions, options)  # [3N, 2N]
        out[name] = {f"binsel_{k}": v for k, v in binary_selection(scores, roles).items()}
    return out


def _signal_columns(evaluation: EncodedEvaluation, trained: Any) -> dict[str, float | None]:
    """The trained-signal gate per modality (:func:`pcmr.metrics.signal.uncertainty_signal`): the test
    items encoded by the trained model and by an untrained one of the same configuration; plus the
    learned match-probability ``a``, ``b`` where the run has them."""

    config = trained.config
    options = {k: v for k, v in config.model.items() if k != "name"}
    with torch.random.fork_rng(devices=[]):  # the run's own seed, not whatever this process drew before
        torch.manual_seed(torch_seed(config.train.seed))
        initial_model = create_model(config.model["name"], **{**options, "vocab_size": len(trained.vocab)})
    initial = encode_split(initial_model, evaluation.split, trained.vocab, batch_size=evaluation.batch_size,
                           device=evaluation.device)
    num_samples = int(config.loss.get("num_samples", 1) or 1)
    out: dict[str, float | None] = {}
    for side, now, before in (("image", evaluation.images, initial[0]), ("caption", evaluation.captions, initial[1])):
        if not (_has_variance(now) and _has_variance(before)):
            continue
        gate = uncertainty_signal(now, before, num_samples=num_samples)
        out[f"{side}_uncertainty_signal"] = float(gate["signal"])
        for key in ("spread", "spread_init", "floor"):
            out[f"{side}_uncertainty_{key}"] = float(gate[key])
    match = trained.similarity_options.get("match_prob") or {}
    for key in ("a", "b"):
        if key in match:
            out[f"match_{key}"] = float(match[key])
    return out


class _AnalysisColumns:
    """The study's analysis columns (``docs/study.md``) as extras of the evaluator: per run the
    uncertainty-vs-corruption slopes, per relevance mode the correlation of uncertainty with the
    number of relevant items, and on the ``nns`` rows R@1 of the least / most uncertain decile and
    binary-selection accuracy."""

    def __init__(self, trained: Any, similarities: Sequence[str], analysis: AnalysisOptions) -> None:
        self.trained, self.similarities, self.analysis = trained, list(similarities), analysis
        self._run: dict[str, Any] | None = None
        self._modes: dict[str, dict[str, Any]] = {}
        self._binary: dict[str, dict[str, float]] | None = None

    def _run_columns(self, evaluation: EncodedEvaluation) -> dict[str, Any]:
        if self._run is None:
            self._run = {}
            if self.analysis.corruption and (_has_variance(evaluation.images) or _has_variance(evaluation.captions)):
                self._run.update(_corruption_columns(evaluation.model, evaluation.split, evaluation.vocab,
                                                     evaluation.device, evaluation.batch_size, self.analysis))
            if self.analysis.signal and (_has_variance(evaluation.images) or _has_variance(evaluation.captions)):
                self._run.update(_signal_columns(evaluation, self.trained))
        return self._run

    def _mode_columns(self, evaluation: EncodedEvaluation, mode: str) -> dict[str, Any]:
        if mode not in self._modes:
            columns = dict(self._run_columns(evaluation))
            images, captions = evaluation.images, evaluation.captions
            if self.analysis.relevant_count and (_has_variance(images) or _has_variance(captions)):
                rho = relevant_count_correlation(
                    evaluation.relevance[mode],
                    images.uncertainty(UNCERTAINTY_MEASURE) if _has_variance(images) else None,
                    captions.uncertainty(UNCERTAINTY_MEASURE) if _has_variance(captions) else None)
                for side, value in rho.items():
                    columns[f"{side}_uncertainty_relevant_rho"] = _finite(value)
            self._modes[mode] = columns
        return self._modes[mode]

    def _binary_columns(self, evaluation: EncodedEvaluation) -> dict[str, dict[str, float]]:
        if self._binary is None:
            self._binary = {}
            if self.analysis.binary_selection and self.trained.config.data.name == "shapes":
                self._binary = _binary_selection_columns(self.trained, self.similarities, evaluation.device,
                                                         evaluation.batch_size)
        return self._binary

    def __call__(self, evaluation: EncodedEvaluation, mode: str, row: Mapping[str, Any]) -> dict[str, Any]:
        columns = dict(self._mode_columns(evaluation, mode))
        if row["rerank"] == "nns":
            figure = evaluation.reports[mode].figures.get("uncertainty_r1") or {}
            series = figure.get("series", {}).get(row["similarity"]) if self.analysis.deciles else None
            if series:
                for direction in ("i2t", "t2i"):
                    columns[f"{direction}_r1_least_uncertain"] = series[direction][0]
                    columns[f"{direction}_r1_most_uncertain"] = series[direction][-1]
            columns.update(self._binary_columns(evaluation).get(row["similarity"], {}))
        return columns


class _QueryBlindColumns:
    """Per relevance mode, the R-Precision of the query-blind ranking of the evaluated split
    (``pcmr.metrics.query_blind``; both directions), the baseline of the study's benchmark check."""

    def __init__(self) -> None:
        self._modes: dict[str, dict[str, float | None]] = {}

    def __call__(self, evaluation: EncodedEvaluation, mode: str, row: Mapping[str, Any]) -> dict[str, Any]:
        if mode not in self._modes:
            relevant = evaluation.relevance[mode]  # [N_img, N_cap]
            self._modes[mode] = {"i2t_query_blind_r_precision": _finite(query_blind_r_precision(relevant)),
                                 "t2i_query_blind_r_precision": _finite(query_blind_r_precision(relevant.T))}
        return dict(self._modes[mode])


def evaluate_run(run_dir: Path, similarities: Sequence[str] | None, rerankers: Sequence[str] | None,
                 relevance_modes: Sequence[str], analysis: AnalysisOptions) -> list[dict[str, Any]]:
    """Evaluate the selected model of ``run_dir`` on its test split under each relevance mode, with
    :class:`pcmr.evaluation.RetrievalEvaluator` (the analysis columns are its extras).

    Returns one flat row per (similarity, re-ranker, relevance mode) with every metric of the
    evaluation table plus the analysis columns and the query-blind R-Precision (``docs/study.md``). The evaluation tables are also
    saved under ``run_dir/eval-<mode>/``.
    """

    trained = load_run(run_dir)
    config = trained.config
    similarities = list(similarities or config.eval.similarities)
    rerankers = list(rerankers or config.eval.rerankers)
    if "nns" not in rerankers:  # the analysis columns describe the raw scores: the nns rows carry them
        rerankers.insert(0, "nns")
    analysis_columns = _AnalysisColumns(trained, similarities, analysis)
    evaluator = RetrievalEvaluator(
        load_run_split(config, config.eval.split),
        val_split=load_run_split(config, config.data.val_split) if needs_validation(rerankers) else None,
        similarities=similarities, rerankers=rerankers, relevance_modes=relevance_modes,
        batch_size=config.eval.batch_size, device=config.train.device, uncertainty_measure=UNCERTAINTY_MEASURE,
        extras=[analysis_columns, _QueryBlindColumns()], extra_positives=[], num_folds=None, corruption=False,
        meta={"run": str(run_dir)})
    reports = evaluator.evaluate_modes(trained.model, trained.vocab, trained.similarity_options)
    schedule = schedule_text(config.train.schedule_summary())
    rows: list[dict[str, Any]] = []
    for mode, report in reports.items():
        report.meta["relevance"] = mode
        report.save(run_dir / f"eval-{mode}", plots=False)
        rows.extend({"similarity": row["similarity"], "rerank": row["rerank"], "relevance": mode,
                     **{k: v for k, v in row.items() if k not in ("similarity", "rerank")}, "schedule": schedule}
                    for row in report.rows)
    return rows


def schedule_text(summary: Mapping[str, Any]) -> str:
    """One line of the schedule a run used, in epochs (``TrainConfig.schedule_summary``), for the
    study's ``schedule`` column: ``"step: 6 epochs, lr x 0.1 every 3"``."""
    text = f"{summary['schedule']}: {summary['epochs']} epochs"
    if summary.get("warmup_epochs"):
        text += f", {summary['warmup_epochs']} frozen warm-up"
    if summary["schedule"] == "step":
        text += f", lr x {summary['step_gamma']:g} every {summary['step_period']}"
    return text
