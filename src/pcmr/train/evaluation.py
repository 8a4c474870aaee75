"""The one way to evaluate a trained model: a :class:`pcmr.Model` (what :func:`pcmr.load` returns) and a split.

``pcmr evaluate``, ``pcmr demo`` and ``pcmr study`` all call :func:`run_evaluator` (or its shorthand
:func:`evaluate_run`), so a run is evaluated with the same defaults wherever it is evaluated. Each
setting left out comes from the run config the model records (``RUN/config.yaml``, or the
``run_config.json`` of a ``save_pretrained`` folder), else from the library's defaults:

==================  ===============================  ==========================================
setting             from the run config              otherwise
==================  ===============================  ==========================================
split               ``eval.split``                   ``test``
val_split           ``data.val_split``               ``val`` (loaded only when a re-ranker tunes)
similarities        ``eval.similarities``            ``DEFAULT_SIMILARITIES``
rerankers           ``eval.rerankers``               ``DEFAULT_RERANKERS``
batch_size          ``eval.batch_size``              ``ENCODE_BATCH_SIZE``
device              ``train.device``                 the model's device
data                the run's dataset (``data``)     ``--data`` is required
==================  ===============================  ==========================================
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from pcmr.data import ENCODE_BATCH_SIZE, RetrievalSplit, Vocabulary
from pcmr.evaluation import DEFAULT_RERANKERS, DEFAULT_SIMILARITIES, RetrievalEvaluator
from pcmr.evaluation.evaluator import needs_validation
from pcmr.hub import Model
from pcmr.report import Report
from pcmr.train.loading import load_split, run_config

__all__ = ["evaluate_run", "evaluate_run_modes", "evaluation_device", "run_evaluator"]


def evaluation_device(model: Model, device: torch.device | str | None = None) -> torch.device:
    """Where ``model`` is evaluated: ``device``, else its run's ``train.device`` (when this machine has
    it: a CUDA run opened where CUDA is absent stays on the model's device), else the model's device."""
    if device is not None:
        return torch.device(device)
    config = run_config(model)
    if config is not None:
        trained_on = torch.device(config.train.device)
        if trained_on.type != "cuda" or torch.cuda.is_available():
            return trained_on
    return model.device


def run_evaluator(model: Model, split: RetrievalSplit | str | None = None, *,
                  val_split: RetrievalSplit | str | None = None, data: str | None = None,
                  data_name: str | None = None, similarities: Sequence[str] | None = None,
                  rerankers: Sequence[str] | None = None,
                  rerank_options: dict[str, dict[str, Any]] | None = None,
                  batch_size: int | None = None, device: torch.device | str | None = None,
                  meta: dict[str, Any] | None = None, **settings: Any) -> RetrievalEvaluator:
    """The :class:`~pcmr.evaluation.RetrievalEvaluator` of ``model`` on ``split``, every setting left out
    taken from the model's run config (see the module docstring); ``model`` is moved to the device.

    Args:
        model: a trained model from :func:`pcmr.load`.
        split, val_split: splits, or split names of ``data`` (None: the run's).
        data, data_name: a dataset name or folder (and its format) the split names refer to (None: the
            run's dataset).
        similarities, rerankers, rerank_options, batch_size, device: as the evaluator takes them.
        meta: report metadata (default ``{"run": the run or model folder}``).
        settings: any other field of :class:`~pcmr.evaluation.RetrievalEvaluator` (``relevance_modes``,
            ``extras``, ``progress``, ``num_folds``, ``corruption``, ...).
    """
    config = run_config(model)
    dev = evaluation_device(model, device)
    if model.device != dev:
        model.to(dev)
    if not isinstance(split, RetrievalSplit):
        split = load_split(data, split or (config.eval.split if config is not None else "test"), config, data_name,
                           model=model)
    chosen_rerankers = list(rerankers if rerankers is not None else
                            (config.eval.rerankers if config is not None else DEFAULT_RERANKERS))
    options = {name: dict(values) for name, values in (rerank_options or {}).items()}
    if needs_validation(chosen_rerankers, options) and not isinstance(val_split, RetrievalSplit):
        name = val_split or (config.data.val_split if config is not None else "val")
        val_split = load_split(data, name, config, data_name, model=model)
    elif not isinstance(val_split, RetrievalSplit):
        val_split = None
    folder = model.run_dir or model.source
    return RetrievalEvaluator(
        split, val_split=val_split,
        similarities=list(similarities if similarities is not None else
                          (config.eval.similarities if config is not None else DEFAULT_SIMILARITIES)),
        rerankers=chosen_rerankers, rerank_options=options,
        batch_size=batch_size or (config.eval.batch_size if config is not None else ENCODE_BATCH_SIZE),
        device=dev, meta=dict(meta) if meta is not None else ({"run": str(folder)} if folder is not None else {}),
        **settings)


def evaluate_run(model: Model, split: RetrievalSplit | str | None = None, *,
                 out_dir: str | os.PathLike[str] | None = None, **settings: Any) -> Report:
    """The evaluation table of ``model`` on ``split``: :func:`run_evaluator` with ``settings``, evaluated
    with the model's vocabulary and trained score parameters (saved under ``out_dir`` when given)."""
    evaluator = run_evaluator(model, split, **settings)
    return evaluator.evaluate(model.network, _vocabulary(model), model.similarity_options, out_dir=out_dir)


def evaluate_run_modes(model: Model, split: RetrievalSplit | str | None = None, **settings: Any) -> dict[str, Report]:
    """``{relevance mode: Report}``: :func:`evaluate_run` with one table per relevance mode (the study's form)."""
    evaluator = run_evaluator(model, split, **settings)
    return evaluator.evaluate_modes(model.network, _vocabulary(model), model.similarity_options)


def _vocabulary(model: Model) -> Vocabulary:
    return model.vocabulary if model.vocabulary is not None else Vocabulary([])
