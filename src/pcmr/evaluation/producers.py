"""Producers: what an evaluation adds to its table after the rows are scored (columns, figures).

:func:`pcmr.evaluation.evaluate.evaluate_embeddings` scores the rows of every similarity x re-ranker
(:mod:`pcmr.evaluation.rows`), then calls every registered producer in registration order with one
:class:`EvaluationContext`: the embeddings, the relevance, the settings, the score matrices of the
scored similarities and the report being built. A producer adds columns to rows or a figure to
``context.report.figures`` and may append a note; it never re-scores (the score matrices are in the
context) and never re-encodes (the model-level producers, :data:`MODEL_PRODUCERS`, are the ones that
see the model and its split: :class:`ModelContext`).

Adding a metric or a figure is one module: a function taking the context, registered with
:func:`register_producer` (``@register_producer("name")``; ``model=True`` for a producer of the
model's evaluation). The built-in producers are in :mod:`pcmr.evaluation.standard_producers`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from pcmr.data.split import RetrievalSplit
from pcmr.evaluation.score_cache import ScoreCache
from pcmr.evaluation.settings import EvaluationSettings
from pcmr.gaussian import Gaussian
from pcmr.point_set import uncertainty_measure_for
from pcmr.registry import Registry
from pcmr.report import Report

__all__ = ["EvaluationContext", "MODEL_PRODUCERS", "ModelContext", "PRODUCERS", "Producer", "register_producer",
           "run_producers", "OCCURRENCE_FIGURE_K"]

#: the k of the N_k histogram in the ``k_occurrence`` figure
OCCURRENCE_FIGURE_K = 10


@dataclass
class EvaluationContext:
    """Everything one :func:`~pcmr.evaluation.evaluate.evaluate_embeddings` call knows, for its producers.

    Attributes:
        images, captions: ``Gaussian [N_img, D]`` / ``[N_cap, D]``; relevance: BoolTensor ``[N_img, N_cap]``.
        settings: the resolved :class:`~pcmr.evaluation.settings.EvaluationSettings`.
        similarities, rerankers: the checked names; similarity_options: options per similarity.
        image_labels, caption_labels: class labels ``[N, C]`` (both or None).
        val: ``(images, captions, relevance)`` of the validation split, or None.
        extra_positives, num_folds, hubness_ks: as :func:`evaluate_embeddings` takes them.
        cache: the :class:`~pcmr.evaluation.score_cache.ScoreCache` shared by the relevance modes.
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


@dataclass
class ModelContext:
    """What a model-level producer sees: the evaluated :class:`pcmr.Model`, its split, the evaluator
    (its settings: ``uncertainty_measure``, ``batch_size``, ``device``, ``progress``, ...), the
    split's embeddings and the merged report."""

    model: Any
    split: RetrievalSplit
    evaluator: Any
    images: Gaussian
    captions: Gaussian
    report: Report


@dataclass(frozen=True)
class Producer:
    """A registered producer: its name and the function that adds to the report."""

    name: str
    produce: Callable[[Any], None]


#: producers of one table (:class:`EvaluationContext`), run in registration order
PRODUCERS: Registry[Producer] = Registry("evaluation producer")
#: producers of a model's evaluation (:class:`ModelContext`), run in registration order after the modes merge
MODEL_PRODUCERS: Registry[Producer] = Registry("model evaluation producer")


def register_producer(name: str, *, model: bool = False) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    """Decorator: register ``function(context)`` as the producer ``name`` (``model=True``: of a model's
    evaluation, called with a :class:`ModelContext`)."""

    def decorate(function: Callable[[Any], None]) -> Callable[[Any], None]:
        (MODEL_PRODUCERS if model else PRODUCERS).register(Producer(name, function), name=name)
        return function

    return decorate


def run_producers(context: Any, registry: Registry[Producer] = PRODUCERS) -> None:
    """Call every producer of ``registry`` on ``context``, in registration order."""
    for producer in registry.values():
        producer.produce(context)
