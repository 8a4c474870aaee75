"""The study's one adapter to the rest of pcmr: config overrides, training, evaluation.

Everything the study runner needs from pcmr's config layer (recipe + dotted overrides), trainer
(new run or ``--resume`` of an interrupted one) and evaluation (encoding, the evaluation table,
the uncertainty-vs-corruption series, scores for binary selection) is called from this module
only, so a change in those APIs touches one file.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from pcmr.atomic import atomic_write_text
from pcmr.data import offers_split
from pcmr.encode.inputs import model_device
from pcmr.evaluation import EncodedEvaluation, encode_split, score_matrix, unsupported_reason
from pcmr.evaluation import columns as schema
from pcmr.evaluation.figures import corruption_series
from pcmr.evaluation.model import evaluate_modes
from pcmr.gaussian import DEFAULT_UNCERTAINTY_MEASURE
from pcmr.hub import Model, load
from pcmr.inference import NO_RERANKING, get_reranker
from pcmr.metrics.query_blind import query_blind_r_precision
from pcmr.metrics.signal import uncertainty_signal
from pcmr.models import create_model
from pcmr.relevance import I2T, T2I
from pcmr.report.figure_keys import UNCERTAINTY_R1
from pcmr.run_defaults import load_split, run_defaults
from pcmr.similarity import get_similarity
from pcmr.study.analysis import (
    binary_selection,
    caption_wildcard_counts,
    least_squares_slope,
    relevant_count_correlation,
    stratified_spearman,
)
from pcmr.study.spec import AnalysisOptions, StudyError
from pcmr.train import check_config, load_config
from pcmr.train.config import RunConfig
from pcmr.train.lifecycle import ConfigMismatchError, start_or_resume
from pcmr.train.loading import run_config
from pcmr.train.recipes import find_recipe
from pcmr.train.run import load_run_split
from pcmr.train.trainer import torch_seed

__all__ = ["ITEM_UNCERTAINTY", "UNCERTAINTY_MEASURE", "evaluate_run", "null_statistics", "override_items",
           "read_item_uncertainty", "record_provenance", "resolve_config", "schedule_text", "split_digest", "split_faults", "train_run",
           "write_item_uncertainty", "write_text"]

UNCERTAINTY_MEASURE = DEFAULT_UNCERTAINTY_MEASURE
#: the controlled split of the binary-selection analysis (ProbVSE Sec. 5; offered by shapes)
BINARY_SELECTION_SPLIT = "binary_selection"


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
    except ConfigMismatchError as exc:
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
    for side, key in schema.CORRUPTION_SLOPE.items():
        if side in series:
            out[key] = _finite(least_squares_slope(series[side]["ratios"], series[side]["mean_uncertainty"]))
    return out


def _binary_selection_columns(trained: Model, config: RunConfig, similarities: Sequence[str],
                              evaluation: EncodedEvaluation) -> dict[str, dict[str, float]]:
    """``{similarity: {binsel_*: accuracy}}`` on the shapes ``binary_selection`` split."""

    split = load_run_split(config, BINARY_SELECTION_SPLIT)
    roles = split.info.get("roles")
    if not roles or split.num_images == 0:
        return {}
    images, captions = encode_split(trained.network, split, evaluation.model.text_vocabulary, batch_size=evaluation.batch_size,
                                    device=evaluation.device)
    out = {}
    for name in similarities:
        options = dict(trained.similarity_options.get(name, {}))
        if unsupported_reason(name, images, captions, options) is not None:
            continue
        scores = score_matrix(name, images, captions, options)  # [3N, 2N]
        out[name] = {schema.binary_selection(k): v for k, v in binary_selection(scores, roles).items()}
    return out


def _untrained_encoding(evaluation: EncodedEvaluation, config: RunConfig) -> tuple[Any, Any, Any]:
    """``(model, images, captions)``: an untrained model of the run's configuration, drawn from the run's
    own seed, and the test items it encodes (the null every uncertainty statistic is read against).

    The model is drawn on the CPU (the same weights whatever the evaluation device) and then moved to
    the evaluation's device, where the trained model is evaluated (``train.device``)."""

    options = config.model.options
    device = model_device(evaluation.model.network, evaluation.device)
    with torch.random.fork_rng(devices=[]), torch.device("cpu"):  # the run's own seed, on the CPU generator
        torch.manual_seed(torch_seed(config.train.seed))
        initial_model = create_model(config.model.name, **{**options, "vocab_size": len(evaluation.model.text_vocabulary)})
    initial_model.to(device)
    initial = encode_split(initial_model, evaluation.split, evaluation.model.text_vocabulary, batch_size=evaluation.batch_size,
                           device=device)
    return initial_model, initial[0], initial[1]


def _signal_columns(evaluation: EncodedEvaluation, trained: Model, config: RunConfig,
                    initial: tuple[Any, Any]) -> dict[str, float | None]:
    """The trained-signal gate per modality (:func:`pcmr.metrics.signal.uncertainty_signal`): the test
    items encoded by the trained model and by an untrained one of the same configuration (``initial``:
    its images and captions); plus the learned match-probability ``a``, ``b`` where the run has them."""

    num_samples = int(config.loss.options.get("num_samples", 1) or 1)
    out: dict[str, float | None] = {}
    for side, now, before in (("image", evaluation.images, initial[0]), ("caption", evaluation.captions, initial[1])):
        if not (_has_variance(now) and _has_variance(before)):
            continue
        gate = uncertainty_signal(now, before, num_samples=num_samples)
        for key in schema.SIGNAL_KEYS:
            out[schema.uncertainty_signal(side, key)] = float(gate[key])
    for name, options in trained.similarity_options.items():  # the learned options (match_prob's a, b)
        for key in get_similarity(name).learned_options:
            if key in options:
                out[schema.learned_option(key)] = float(options[key])
    return out


def _uncertainties(images: Any, captions: Any) -> tuple[Any, Any]:
    """Per-item uncertainty ``[N_img]``, ``[N_cap]`` (None for a side without variances)."""
    return (images.uncertainty(UNCERTAINTY_MEASURE) if _has_variance(images) else None,
            captions.uncertainty(UNCERTAINTY_MEASURE) if _has_variance(captions) else None)


def _relevant_rho_columns(relevance: Any, images: Any, captions: Any, strata: Any, *,
                          untrained: bool) -> dict[str, Any]:
    """``<side>_uncertainty_relevant_rho``, and for captions the same within strata of wildcard count
    (``..._rho_strata``) where the split records them; of the untrained model with ``untrained``."""
    image_u, caption_u = _uncertainties(images, captions)
    out: dict[str, Any] = {}
    for side, value in relevant_count_correlation(relevance, image_u, caption_u).items():
        out[schema.relevant_count_rho(side, untrained=untrained)] = _finite(value)
    if caption_u is not None and strata is not None:
        counts = relevance.sum(0).cpu().numpy()
        out[schema.relevant_count_rho("caption", strata=True, untrained=untrained)] = _finite(
            stratified_spearman(caption_u.detach().double().cpu().numpy(), counts, strata))
    return out


class _AnalysisColumns:
    """The study's analysis columns (``docs/study.md``) as extras of the evaluator: per run the
    uncertainty-vs-corruption slopes, per relevance mode the correlation of uncertainty with the
    number of relevant items, and on the ``nns`` rows R@1 of the least / most uncertain decile and
    binary-selection accuracy."""

    def __init__(self, trained: Model, config: RunConfig, similarities: Sequence[str], analysis: AnalysisOptions,
                 run_dir: Path | None = None) -> None:
        self.trained, self.config, self.similarities, self.analysis = trained, config, list(similarities), analysis
        self.run_dir = run_dir
        self._initial: tuple[Any, Any, Any] | None = None
        self._run: dict[str, Any] | None = None
        self._modes: dict[str, dict[str, Any]] = {}
        self._binary: dict[str, dict[str, float]] | None = None

    def _untrained(self, evaluation: EncodedEvaluation) -> tuple[Any, Any, Any]:
        if self._initial is None:
            self._initial = _untrained_encoding(evaluation, self.config)
            if self.run_dir is not None:  # per-item uncertainty, for the agreement across seeds
                write_item_uncertainty(self.run_dir, evaluation.images, evaluation.captions, self._initial[1],
                                       self._initial[2])
        return self._initial

    def _run_columns(self, evaluation: EncodedEvaluation) -> dict[str, Any]:
        if self._run is None:
            self._run = {}
            if not (_has_variance(evaluation.images) or _has_variance(evaluation.captions)):
                return self._run
            untrained_model, initial_images, initial_captions = self._untrained(evaluation)
            if self.analysis.corruption:
                self._run.update(_corruption_columns(evaluation.model.network, evaluation.split, evaluation.model.text_vocabulary,
                                                     evaluation.device, evaluation.batch_size, self.analysis))
                untrained = _corruption_columns(untrained_model, evaluation.split, evaluation.model.text_vocabulary,
                                                evaluation.device, evaluation.batch_size, self.analysis)
                self._run.update({schema.of_untrained(key): value for key, value in untrained.items()})
            if self.analysis.signal:
                self._run.update(_signal_columns(evaluation, self.trained, self.config,
                                                 (initial_images, initial_captions)))
        return self._run

    def _mode_columns(self, evaluation: EncodedEvaluation, mode: str) -> dict[str, Any]:
        if mode not in self._modes:
            columns = dict(self._run_columns(evaluation))
            images, captions = evaluation.images, evaluation.captions
            if self.analysis.relevant_count and (_has_variance(images) or _has_variance(captions)):
                relevance = evaluation.relevance[mode]
                strata = caption_wildcard_counts(evaluation.split)
                _, initial_images, initial_captions = self._untrained(evaluation)
                columns.update(_relevant_rho_columns(relevance, images, captions, strata, untrained=False))
                columns.update(_relevant_rho_columns(relevance, initial_images, initial_captions, strata,
                                                     untrained=True))
            self._modes[mode] = columns
        return self._modes[mode]

    def _binary_columns(self, evaluation: EncodedEvaluation) -> dict[str, dict[str, float]]:
        if self._binary is None:
            self._binary = {}
            if self.analysis.binary_selection and offers_split(self.config.data.name, BINARY_SELECTION_SPLIT):
                self._binary = _binary_selection_columns(self.trained, self.config, self.similarities, evaluation)
        return self._binary

    def __call__(self, evaluation: EncodedEvaluation, mode: str, row: Mapping[str, Any]) -> dict[str, Any]:
        columns = dict(self._mode_columns(evaluation, mode))
        if get_reranker(row["rerank"]).is_identity:
            figure = evaluation.reports[mode].figures.get(UNCERTAINTY_R1) or {}
            series = figure.get("series", {}).get(row["similarity"]) if self.analysis.deciles else None
            if series:
                for direction in schema.DIRECTIONS:
                    columns[schema.r1_by_uncertainty(direction, "least")] = series[direction][0]
                    columns[schema.r1_by_uncertainty(direction, "most")] = series[direction][-1]
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
            self._modes[mode] = {schema.query_blind_r_precision(I2T): _finite(query_blind_r_precision(relevant)),
                                 schema.query_blind_r_precision(T2I): _finite(query_blind_r_precision(relevant.T))}
        return dict(self._modes[mode])


def evaluate_run(run_dir: Path, similarities: Sequence[str] | None, rerankers: Sequence[str] | None,
                 relevance_modes: Sequence[str], analysis: AnalysisOptions) -> list[dict[str, Any]]:
    """Evaluate the selected model of ``run_dir`` on its test split under each relevance mode, with
    :func:`pcmr.evaluation.model.evaluate_modes`, the one evaluation of a model (the analysis columns are its
    extras).

    Returns one flat row per (similarity, re-ranker, relevance mode) with every metric of the
    evaluation table plus the analysis columns and the query-blind R-Precision (``docs/study.md``). The
    evaluation tables are also saved under ``run_dir/eval-<mode>/``.
    """

    trained = load(run_dir)
    config = run_config(trained)
    if config is None:
        raise StudyError(f"{run_dir} records no run config (config.yaml); it is not a run of this study")
    defaults = run_defaults(trained)
    similarities = list(similarities or defaults.eval.similarities)
    rerankers = list(rerankers or defaults.eval.rerankers)
    if not any(get_reranker(name).is_identity for name in rerankers):  # the analysis columns describe the
        rerankers.insert(0, NO_RERANKING)  # raw scores: the nns rows carry them
    analysis_columns = _AnalysisColumns(trained, config, similarities, analysis, run_dir)
    reports = evaluate_modes(
        trained, similarities=similarities, rerankers=rerankers, relevance_modes=relevance_modes,
        uncertainty_measure=UNCERTAINTY_MEASURE, extras=[analysis_columns, _QueryBlindColumns()],
        extra_positives=[], num_folds=None,
        corruption=False, meta={"run": str(run_dir)})
    schedule = schedule_text(config.train.schedule_summary())
    rows: list[dict[str, Any]] = []
    for mode, report in reports.items():
        report.meta["relevance"] = mode
        report.save(run_dir / f"eval-{mode}", plots=False)
        rows.extend({"similarity": row["similarity"], "rerank": row["rerank"], "relevance": mode,
                     **{k: v for k, v in row.items() if k not in ("similarity", "rerank")}, "schedule": schedule}
                    for row in report.rows)
    return rows


ITEM_UNCERTAINTY = "item_uncertainty.json"


def item_uncertainty_key(side: str, untrained: bool) -> str:
    """The key of one side's per-item uncertainties in ``item_uncertainty.json`` (``image``,
    ``image_untrained``, ...)."""
    return f"{side}_untrained" if untrained else side


def write_item_uncertainty(run_dir: Path, images: Any, captions: Any, initial_images: Any,
                           initial_captions: Any) -> None:
    """``run_dir/item_uncertainty.json``: each test item's uncertainty under the trained and the
    untrained model (``{"image": [...], "caption": [...], "image_untrained": ..., "caption_untrained": ...}``,
    sides without variances left out), read back by the study to measure agreement across seeds."""
    out: dict[str, list[float]] = {}
    for side, now, before in (("image", images, initial_images), ("caption", captions, initial_captions)):
        if _has_variance(now) and _has_variance(before):
            for untrained, embeddings in ((False, now), (True, before)):
                out[item_uncertainty_key(side, untrained)] = [
                    float(v) for v in embeddings.uncertainty(UNCERTAINTY_MEASURE).double().cpu()]
    atomic_write_text(Path(run_dir) / ITEM_UNCERTAINTY, json.dumps(out) + "\n")


def read_item_uncertainty(run_dir: Path) -> dict[str, list[float]]:
    """What :func:`write_item_uncertainty` wrote (an empty mapping when the run has none)."""
    path = Path(run_dir) / ITEM_UNCERTAINTY
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise StudyError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); expected a mapping of "
                         "side to a list of numbers") from None
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise StudyError(f"{path}: expected a mapping of side (image, caption, ...) to a list of numbers")
    return data


def schedule_text(summary: Mapping[str, Any]) -> str:
    """One line of the schedule a run used, in epochs (``TrainConfig.schedule_summary``), for the
    study's ``schedule`` column: ``"step: 6 epochs, lr x 0.1 every 3"``."""
    text = f"{summary['schedule']}: {summary['epochs']} epochs"
    if summary.get("warmup_epochs"):
        text += f", {summary['warmup_epochs']} frozen warm-up"
    if summary["schedule"] == "step":
        text += f", lr x {summary['step_gamma']:g} every {summary['step_period']}"
    if summary["schedule"] == "plateau":
        text += (f", lr x {summary['plateau_factor']:g} at epochs 1 + {summary['plateau_patience'] + 1}k, k >= 1"
                 f" (ReduceLROnPlateau in mode 'min' fed a rising rsum)")
    return text


def null_statistics(run_dir: Path, relevance_modes: Sequence[str], analysis: AnalysisOptions,
                    seeds: Sequence[int]) -> list[dict[str, Any]]:
    """The uncertainty statistics of untrained models of ``run_dir``'s configuration (its model options and
    vocabulary), one initialisation per seed in ``seeds`` (torch seeded with ``torch_seed(seed)``), on its test
    split: one row per seed and relevance mode with the columns the trained runs carry under the same names
    (``<side>_uncertainty_relevant_rho``, ``..._rho_strata``, the corruption slopes). The split, its relevance
    and strata are loaded once; only these statistics are computed."""
    trained = load(run_dir)
    config = run_config(trained)
    if config is None:
        raise StudyError(f"{run_dir} records no run config (config.yaml); it is not a run of this study")
    defaults = run_defaults(trained)
    split = load_split(None, defaults.split, defaults.data)
    vocab = trained.text_vocabulary
    relevance = {mode: split.relevance_by_mode(mode).matrix() for mode in relevance_modes}
    strata = caption_wildcard_counts(split)
    options = {**config.model.options, "vocab_size": len(vocab)}
    batch_size = defaults.eval.batch_size
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(torch_seed(seed))
            model = create_model(config.model.name, **options)
        device = trained.device
        model.to(device)
        images, captions = encode_split(model, split, vocab, batch_size=batch_size, device=device)
        shared: dict[str, Any] = {}
        if analysis.corruption:
            shared.update(_corruption_columns(model, split, vocab, device, batch_size, analysis))
        for mode, matrix in relevance.items():
            row = {"init": int(seed), "relevance": mode, **shared}
            if analysis.relevant_count:
                row.update(_relevant_rho_columns(matrix, images, captions, strata, untrained=False))
            rows.append(row)
    return rows


def split_counts(recipe: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """What a run of ``recipe`` with ``overrides`` is evaluated on: the test split's ``images``,
    ``captions``, ``distinct_texts``, ``captions_relevant_to_every_image``,
    ``images_relevant_to_every_caption`` and ``digest`` (:func:`split_digest`)."""
    config = resolve_config(recipe, overrides)
    split = load_run_split(config, config.eval.split)
    relevance = split.relevance_matrix()  # [N_img, N_cap]
    return {"split": f"{config.data.name} {config.eval.split} split", "images": int(relevance.shape[0]),
            "captions": int(split.num_captions), "distinct_texts": len(set(split.caption_texts)),
            "captions_relevant_to_every_image": int(relevance.all(dim=0).sum()),
            "images_relevant_to_every_caption": int(relevance.all(dim=1).sum()), "digest": split_digest(split)}


def split_faults(recipe: str, overrides: Mapping[str, Any]) -> tuple[list[str], str]:
    """``(faults, digest)`` of the test split a run of ``recipe`` with ``overrides`` is evaluated on:
    caption texts written more than once, captions relevant to every image, images relevant to every
    caption (each fault one line naming the split and the counts; empty when it has none), and the
    split's :func:`split_digest`."""
    counts = split_counts(recipe, overrides)
    where = counts["split"]
    faults = []
    repeated = counts["captions"] - counts["distinct_texts"]
    if repeated:
        faults.append(f"{where}: {repeated} of its {counts['captions']} captions repeat a text written before "
                      f"({counts['distinct_texts']} distinct)")
    for count, what in ((counts["captions_relevant_to_every_image"], "captions are relevant to every image"),
                        (counts["images_relevant_to_every_caption"], "images are relevant to every caption")):
        if count:
            faults.append(f"{where}: {count} {what}")
    return faults, counts["digest"]


def split_digest(split: Any) -> str:
    """SHA-256 (hex, first 16 characters) of a split's images (their pixels or features), caption texts,
    written pairs and relevance: two machines that generate the same data give the same digest."""
    digest = hashlib.sha256()
    images = getattr(split.images, "pixels", None)
    if images is None:
        images = getattr(split.images, "features", None)
    if images is not None:
        array = np.ascontiguousarray(np.asarray(images))
        digest.update(str(array.shape).encode() + str(array.dtype).encode() + array.tobytes())
    for text in split.caption_texts:
        digest.update(text.encode("utf-8") + b"\n")
    digest.update(np.ascontiguousarray(np.asarray(split.caption_image, dtype=np.int64)).tobytes())
    digest.update(np.packbits(split.relevance_matrix().cpu().numpy(), axis=1).tobytes())
    return digest.hexdigest()[:16]


def record_provenance(run_dir: Path, record: Mapping[str, Any]) -> None:
    """Add ``record`` (``pcmr.study.provenance.provenance``) to the run's summary ``run.json`` as its
    ``provenance`` key (atomically; nothing when the run has no summary)."""
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        return
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise StudyError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(summary, dict):
        summary["provenance"] = dict(record)
        atomic_write_text(path, json.dumps(summary, indent=2) + "\n")
