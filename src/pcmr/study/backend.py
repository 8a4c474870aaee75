"""The study's one adapter to the rest of pcmr: config overrides, training, evaluation.

Everything the study runner needs from pcmr's config layer (recipe + dotted overrides), trainer
(new run or ``--resume`` of an interrupted one) and evaluation (encoding, the evaluation table,
the uncertainty-vs-corruption series, scores for binary selection) is called from this module
only, so a change in those APIs touches one file.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml

from pcmr.atomic import atomic_write_text
from pcmr.evaluation import encode_split, evaluate_embeddings, score_matrix, unsupported_reason
from pcmr.evaluation.figures import corruption_series
from pcmr.study.analysis import binary_selection, least_squares_slope, relevant_count_correlation
from pcmr.study.spec import AnalysisOptions, StudyError
from pcmr.train import Trainer, check_config, load_config, save_config
from pcmr.train.recipes import find_recipe
from pcmr.train.run import CONFIG_FILE, RUN_FILE, load_run, load_run_split

__all__ = ["UNCERTAINTY_MEASURE", "evaluate_run", "override_items", "resolve_config", "train_run", "write_text"]

UNCERTAINTY_MEASURE = "log_det"
#: config keys that may differ between a run folder's config and the study's without changing results
_FREE_KEYS = (("train", "device"), ("train", "progress"), ("train", "log_every"), ("data", "num_workers"))


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


def _comparable(config: Any) -> dict[str, Any]:
    data = config.to_dict()
    for section, key in _FREE_KEYS:
        data.get(section, {}).pop(key, None)
    return data


def _first_difference(a: Any, b: Any, prefix: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{prefix}{key}.")
    return f"{prefix.rstrip('.')}: {a!r} in the run folder, {b!r} in the study"


def train_run(recipe: str, overrides: Mapping[str, Any], run_dir: Path) -> float:
    """Train into ``run_dir``: a new run, the continuation of an interrupted one (pcmr's resume from
    the newest complete checkpoint), or nothing when its training finished. Returns seconds spent."""

    start = time.perf_counter()
    config = resolve_config(recipe, overrides)
    saved_path = run_dir / CONFIG_FILE
    if run_dir.exists() and not saved_path.is_file():  # killed before its config was written: start afresh
        shutil.rmtree(run_dir)
    if saved_path.is_file():
        saved = load_config(saved_path)
        if _comparable(saved) != _comparable(config):
            raise StudyError(f"run folder {run_dir} was trained with another config "
                             f"({_first_difference(_comparable(saved), _comparable(config))}); "
                             f"delete the folder to train it again with the study's config")
        summary = run_dir / RUN_FILE
        if summary.is_file() and json.loads(summary.read_text(encoding="utf-8")).get("status") == "finished":
            return 0.0
        Trainer(saved, run_dir, resume=True).fit()
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(config, saved_path)
        Trainer(config, run_dir).fit()
    return time.perf_counter() - start


def _source_relevance(split: Any) -> torch.Tensor:
    """BoolTensor ``[N_img, N_cap]``: each caption relevant to the image it was written for only."""
    matrix = torch.zeros(split.num_images, split.num_captions, dtype=torch.bool)
    matrix[torch.as_tensor(split.caption_image, dtype=torch.long), torch.arange(split.num_captions)] = True
    return matrix


def _relevance(split: Any, mode: str) -> torch.Tensor:
    return split.relevance_matrix() if mode == "exact" else _source_relevance(split)


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


def evaluate_run(run_dir: Path, similarities: Sequence[str] | None, rerankers: Sequence[str] | None,
                 relevance_modes: Sequence[str], analysis: AnalysisOptions) -> list[dict[str, Any]]:
    """Evaluate the selected model of ``run_dir`` on its test split under each relevance mode.

    Returns one flat row per (similarity, re-ranker, relevance mode) with every metric of the
    evaluation table plus the analysis columns (``docs/study.md``). The evaluation tables are also
    saved under ``run_dir/eval-<mode>/``.
    """

    trained = load_run(run_dir)
    config = trained.config
    device = config.train.device
    batch_size = config.eval.batch_size
    similarities = list(similarities or config.eval.similarities)
    rerankers = list(rerankers or config.eval.rerankers)
    if "nns" not in rerankers:  # the analysis columns describe the raw scores: the nns rows carry them
        rerankers.insert(0, "nns")
    test = load_run_split(config, config.eval.split)
    images, captions = encode_split(trained.model, test, trained.vocab, batch_size=batch_size, device=device)
    val = None
    if any("rgm" in r.split("+") for r in rerankers):  # RGM's lambda is selected on the validation split
        val_split = load_run_split(config, config.data.val_split)
        val = (val_split, *encode_split(trained.model, val_split, trained.vocab, batch_size=batch_size,
                                        device=device))
    run_columns: dict[str, Any] = {}
    if analysis.corruption and (_has_variance(images) or _has_variance(captions)):
        run_columns.update(_corruption_columns(trained.model, test, trained.vocab, device, batch_size, analysis))
    per_similarity: dict[str, dict[str, float]] = {}
    if analysis.binary_selection and config.data.name == "shapes":
        per_similarity = _binary_selection_columns(trained, similarities, device, batch_size)
    rows: list[dict[str, Any]] = []
    for mode in relevance_modes:
        relevance = _relevance(test, mode)
        val_triplet = (val[1], val[2], _relevance(val[0], mode)) if val is not None else None
        result = evaluate_embeddings(
            images, captions, relevance, similarities=similarities, rerankers=rerankers,
            similarity_options={k: dict(v) for k, v in trained.similarity_options.items()},
            image_labels=getattr(test, "image_labels", None), caption_labels=getattr(test, "caption_labels", None),
            val=val_triplet, uncertainty_measure=UNCERTAINTY_MEASURE,
            meta={"run": str(run_dir), "relevance": mode})
        result.save(run_dir / f"eval-{mode}", plots=False)
        mode_columns = dict(run_columns)
        if analysis.relevant_count and (_has_variance(images) or _has_variance(captions)):
            rho = relevant_count_correlation(
                relevance, images.uncertainty(UNCERTAINTY_MEASURE) if _has_variance(images) else None,
                captions.uncertainty(UNCERTAINTY_MEASURE) if _has_variance(captions) else None)
            for side, value in rho.items():
                mode_columns[f"{side}_uncertainty_relevant_rho"] = _finite(value)
        deciles = (result.figures.get("uncertainty_r1") or {}).get("series", {}) if analysis.deciles else {}
        for row in result.rows:
            extra: dict[str, Any] = {}
            if row["rerank"] == "nns":
                series = deciles.get(row["similarity"])
                if series:
                    for direction in ("i2t", "t2i"):
                        extra[f"{direction}_r1_least_uncertain"] = series[direction][0]
                        extra[f"{direction}_r1_most_uncertain"] = series[direction][-1]
                extra.update(per_similarity.get(row["similarity"], {}))
            rows.append({"similarity": row["similarity"], "rerank": row["rerank"], "relevance": mode,
                         **{k: v for k, v in row.items() if k not in ("similarity", "rerank")},
                         **mode_columns, **extra})
    return rows
