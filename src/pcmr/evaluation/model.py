"""The one evaluation of a trained model: a :class:`pcmr.Model` (what :func:`pcmr.load` returns) and a split.

``pcmr evaluate``, ``pcmr demo``, the study and library users (``pcmr.evaluate(model)``) all call
:func:`evaluate` (or :func:`model_evaluator` / :func:`evaluate_modes`), so a model is evaluated with the
same defaults wherever it is evaluated: each setting left out comes from its run's defaults
(:func:`pcmr.run_defaults.run_defaults`, the table there), and the model brings its own vocabulary and
trained score parameters. A caller that checks its own settings before any data is read (``pcmr
evaluate``) first asks :func:`selection` for the split name and the checked similarity and re-ranker
names, then :func:`evaluation_split` for the split: the run's defaults are read here, below the
command, never by the command itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pcmr.data import RetrievalSplit
from pcmr.evaluation.evaluator import RetrievalEvaluator, evaluator_setting_names, needs_validation
from pcmr.evaluation.table import check_setting_names
from pcmr.hub import Model
from pcmr.inference import list_rerankers
from pcmr.report import Report
from pcmr.run_defaults import evaluation_device, load_split, run_defaults
from pcmr.scoring import check_names
from pcmr.similarity import list_similarities

__all__ = ["Selection", "evaluate", "evaluate_modes", "evaluation_split", "model_evaluator", "selection"]


@dataclass(frozen=True)
class Selection:
    """What one evaluation of a model reports: the split's name and the checked similarity and re-ranker
    names (``"all"`` expanded, repeats dropped, in the order given)."""

    split: str
    similarities: list[str]
    rerankers: list[str]


def selection(model: Model, *, split: str | None = None, similarities: Sequence[str] | None = None,
              rerankers: Sequence[str] | None = None) -> Selection:
    """The :class:`Selection` of ``model``'s evaluation: each of ``split``, ``similarities`` and
    ``rerankers`` left out (None or empty) is the run's default; every name is checked against its
    registry (ValueError naming the unknown name, its near miss and the accepted names)."""
    defaults = run_defaults(model)
    return Selection(split or defaults.split,
                     check_names("similarity", list(similarities or defaults.eval.similarities), list_similarities()),
                     check_names("re-ranker", list(rerankers or defaults.eval.rerankers), list_rerankers()))


def evaluation_split(model: Model, split: str, data: str | None = None, data_name: str | None = None) -> RetrievalSplit:
    """The split ``split`` of ``data`` (a dataset name or folder, format ``data_name``; None: the run's own
    data), read as :func:`pcmr.run_defaults.load_split` reads it for ``model``."""
    return load_split(data, split, run_defaults(model).data, data_name, model=model)


def model_evaluator(model: Model, split: RetrievalSplit | str | None = None, *,
                    val_split: RetrievalSplit | str | None = None, data: str | None = None,
                    data_name: str | None = None, **settings: Any) -> RetrievalEvaluator:
    """The :class:`~pcmr.evaluation.RetrievalEvaluator` of ``model`` on ``split``, every setting left out
    taken from the model's run defaults; ``model`` is moved to the evaluation device.

    Args:
        model: a trained model from :func:`pcmr.load`.
        split, val_split: splits, or split names of ``data`` (None: the run's).
        data, data_name: a dataset name or folder (and its format) the split names refer to (None: the
            run's dataset).
        settings: fields of :class:`~pcmr.evaluation.RetrievalEvaluator` (and of
            :class:`~pcmr.evaluation.table.EvaluationSettings` it extends), declared there once; an
            unknown one is a TypeError naming it with its near miss. Left out or None, these come from the
            run: ``similarities``, ``rerankers``, ``batch_size`` (also when 0), ``device`` (the
            evaluation device) and ``meta`` (``{"run": the run or model folder}``).
    """
    check_setting_names(settings, [name for name in evaluator_setting_names() if name != "val_split"])
    defaults = run_defaults(model)
    dev = evaluation_device(model, settings.pop("device", None), defaults)
    if model.device != dev:
        model.to(dev)
    if not isinstance(split, RetrievalSplit):
        split = load_split(data, split or defaults.split, defaults.data, data_name, model=model)
    similarities, rerankers = settings.pop("similarities", None), settings.pop("rerankers", None)
    chosen_rerankers = list(rerankers if rerankers is not None else defaults.eval.rerankers)
    options = {name: dict(values) for name, values in (settings.pop("rerank_options", None) or {}).items()}
    if needs_validation(chosen_rerankers, options) and not isinstance(val_split, RetrievalSplit):
        val_split = load_split(data, val_split or defaults.val_split, defaults.data, data_name, model=model)
    elif not isinstance(val_split, RetrievalSplit):
        val_split = None
    folder = model.run_dir or model.source
    meta = settings.pop("meta", None)
    return RetrievalEvaluator(
        split, val_split=val_split,
        similarities=list(similarities if similarities is not None else defaults.eval.similarities),
        rerankers=chosen_rerankers, rerank_options=options,
        batch_size=settings.pop("batch_size", None) or defaults.eval.batch_size,
        device=dev, meta=dict(meta) if meta is not None else ({"run": str(folder)} if folder is not None else {}),
        **settings)


def evaluate(model: Model, split: RetrievalSplit | str | None = None, *,
             out_dir: str | os.PathLike[str] | None = None, **settings: Any) -> Report:
    """The evaluation table of ``model`` on ``split``: :func:`model_evaluator` with ``settings``, evaluated
    with the model's vocabulary and trained score parameters (saved under ``out_dir`` when given)."""
    evaluator = model_evaluator(model, split, **settings)
    return evaluator.evaluate(model, out_dir=out_dir)


def evaluate_modes(model: Model, split: RetrievalSplit | str | None = None, **settings: Any) -> dict[str, Report]:
    """``{relevance mode: Report}``: :func:`evaluate` with one table per relevance mode (the study's form)."""
    evaluator = model_evaluator(model, split, **settings)
    return evaluator.evaluate_modes(model)
