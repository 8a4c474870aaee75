"""``EvaluationSettings``: the settings of an evaluation, declared once with their defaults.

Every entry that evaluates takes these settings under the same names and with the same defaults:
:func:`pcmr.evaluation.evaluate.evaluate_embeddings` (encoded embeddings),
:class:`pcmr.evaluation.RetrievalEvaluator` (a model on a split; its dataclass extends this one with
what only a model evaluation has: splits, encoding, extras, corruption) and
:func:`pcmr.evaluation.model.evaluate` / ``model_evaluator`` (a loaded model, every setting left out
taken from its run). Keyword arguments are checked against the fields here (:func:`check_setting_names`),
so an unknown one is named with its near miss, e.g.
``unknown evaluation setting 'reranker' (did you mean 'rerankers'?); expected one of: ...``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from pcmr.gaussian import DEFAULT_UNCERTAINTY_MEASURE
from pcmr.inference import DEFAULT_LAMBDA_GRID
from pcmr.metrics import DEFAULT_KS
from pcmr.metrics.defaults import DEFAULT_RERANKERS, DEFAULT_SIMILARITIES
from pcmr.scoring import DEFAULT_SEED
from pcmr.suggest import unknown_name

__all__ = ["EvaluationSettings", "check_setting_names", "setting_names"]


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
