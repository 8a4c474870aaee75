"""Producers: what an evaluation adds to its table after the rows are scored (columns, figures), and the
built-in ones.

:func:`pcmr.evaluation.evaluator.evaluate_embeddings` scores the rows of every similarity x re-ranker
(:func:`pcmr.evaluation.table.score_rows`), then calls every registered producer in registration order
with the table's :class:`~pcmr.evaluation.table.EvaluationContext`: the embeddings, the relevance, the
settings, the score matrices of the scored similarities and the report being built. A producer adds
columns to rows or a figure to ``context.report.figures`` and may append a note; it never re-scores (the
score matrices are in the context) and never re-encodes (the model-level producers,
:data:`MODEL_PRODUCERS`, are the ones that see the model and its split: :class:`ModelContext`).

Adding a metric or a figure is one module: a function taking the context, registered with
:func:`register_producer` (``@register_producer("name")``; ``model=True`` for a producer of the
model's evaluation). The built-in producers are the functions below, in the order they run:
uncertainty deciles, abstention (columns of the identity rows and the risk-coverage figure), the PCA
ellipses, the k-occurrence histogram, the 2-D ellipses, uncertainty against multiplicity, and (for a
model's evaluation) uncertainty under occlusion and word erasure; their numeric series are computed in
:mod:`pcmr.evaluation.figures`. A new module of producers is made built in by importing it in
``pcmr/evaluation/__init__.py`` (it then registers after these).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pcmr.data.split import RetrievalSplit
from pcmr.evaluation.figures import (
    CORRUPTION_ITEMS,
    CORRUPTION_RATIOS,
    abstention_columns,
    abstention_series,
    corruption_series,
    decile_series,
    embeddings_2d_series,
    multiplicity_series,
    occurrence_histogram,
    pca_ellipse_series,
    reference_abstention_series,
)
from pcmr.evaluation.table import EvaluationContext
from pcmr.gaussian import Gaussian
from pcmr.inference import get_reranker
from pcmr.metrics.driver import DIRECTIONS
from pcmr.progress import phase
from pcmr.registry import Registry
from pcmr.report import Report, figure_keys

__all__ = ["EvaluationContext", "MODEL_PRODUCERS", "ModelContext", "PRODUCERS", "Producer", "list_producers",
           "register_producer", "run_producers"]


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


# ---------------------------------------------------------------- the built-in producers
@register_producer(figure_keys.UNCERTAINTY_R1)
def uncertainty_deciles(context: EvaluationContext) -> None:
    """R@1 per uncertainty decile of the queries (PCME Fig. 6), per scored similarity."""
    if context.settings.figures and not context.deciles_possible:
        context.notes.append("no uncertainty-decile figure: it needs at least 10 queries with a relevant item in "
                             "each direction")
    measure = context.measure
    if not context.deciles_possible or measure is None:
        return
    series = {name: decile_series(scores, context.relevance, context.images, context.captions, measure)
              for name, scores in context.scores.items()}
    if series:
        context.report.figures[figure_keys.UNCERTAINTY_R1] = {"measure": measure, "series": series}


@register_producer("abstention")
def abstention(context: EvaluationContext) -> None:
    """The abstention columns of each similarity's identity row (the raw scores), and the risk-coverage
    figure of a model with uncertainty (the model's own score first: the margin and multiplicity
    references are drawn for it)."""
    if not context.deciles_possible:
        return
    measure, data = context.measure, {}
    for name, scores in context.scores.items():
        if measure is not None:
            data[name] = abstention_series(scores, context.relevance, context.images, context.captions, measure)
            columns = abstention_columns(data[name])
        else:  # a point model: the deterministic references a sigma is compared against
            columns = abstention_columns(reference_abstention_series(scores, context.relevance))
        for row in context.report.rows:
            if row["similarity"] == name and get_reranker(row["rerank"]).is_identity:
                row.update(columns)
    if data:
        own = context.own(data)
        context.report.figures[figure_keys.RISK_COVERAGE] = {"measure": measure, "series": {
            name: data[name] for name in sorted(data, key=lambda n: n != own)}}


@register_producer(figure_keys.EMBEDDINGS_PCA)
def embeddings_pca(context: EvaluationContext) -> None:
    """Ellipses of the Gaussians projected on their two main axes."""
    images, captions = context.images, context.captions
    if context.settings.figures and all(isinstance(g, Gaussian) and g.logvar is not None for g in (images, captions)) \
            and images.dim > 2:
        context.report.figures[figure_keys.EMBEDDINGS_PCA] = pca_ellipse_series(images, captions, context.relevance)


@register_producer(figure_keys.K_OCCURRENCE)
def k_occurrence(context: EvaluationContext) -> None:
    """The N_k histogram of the model's own score (its re-scoring re-rankers), at :attr:`figure_k`."""
    if not context.settings.figures:
        return
    figure_k = context.figure_k
    data: dict[str, dict[str, Any]] = {}
    for (name, rerank), counts in context.k_occurrence.items():
        data.setdefault(name, {})[f"{name}/{rerank}"] = {d: occurrence_histogram(counts[d][figure_k])
                                                          for d in DIRECTIONS}
    shown = context.own(data)
    if shown is not None and min(context.images.num, context.captions.num) > figure_k:
        context.report.figures[figure_keys.K_OCCURRENCE] = {"k": figure_k, "series": data[shown]}


@register_producer(figure_keys.EMBEDDINGS_2D)
def embeddings_2d(context: EvaluationContext) -> None:
    """The PCME Fig. 5 ellipses of a 2-D model."""
    if context.settings.figures and context.images.dim == 2:
        context.report.figures[figure_keys.EMBEDDINGS_2D] = embeddings_2d_series(
            context.images, context.captions, context.relevance)


@register_producer(figure_keys.UNCERTAINTY_MULTIPLICITY)
def uncertainty_multiplicity(context: EvaluationContext) -> None:
    """Uncertainty against the number of relevant items, per modality."""
    measure = context.measure
    if context.settings.figures and measure is not None:
        context.report.figures[figure_keys.UNCERTAINTY_MULTIPLICITY] = multiplicity_series(
            context.images, context.captions, context.relevance, measure)


@register_producer(figure_keys.UNCERTAINTY_VS_CORRUPTION, model=True)
def uncertainty_vs_corruption(context: ModelContext) -> None:
    """Mean uncertainty under occlusion and word erasure (PCME Fig. 7): the one producer that encodes
    (the corrupted items of the split's first :data:`CORRUPTION_ITEMS`), skipped with ``corruption=False``."""
    evaluator, split = context.evaluator, context.split
    if not evaluator.corruption or (context.images.is_point and context.captions.is_point):
        return
    items = min(CORRUPTION_ITEMS, max(split.num_images, split.num_captions))
    with phase(f"uncertainty under occlusion and word erasure ({len(CORRUPTION_RATIOS)} ratios x up to "
               f"{items} items; skip with corruption=False, pcmr evaluate --no-corruption)", evaluator.progress):
        series = corruption_series(context.model.network, split, context.model.text_vocabulary,
                                   evaluator.uncertainty_measure, max_items=CORRUPTION_ITEMS,
                                   batch_size=evaluator.batch_size, device=evaluator.device)
    if series:
        context.report.figures[figure_keys.UNCERTAINTY_VS_CORRUPTION] = series


def list_producers() -> list[str]:
    """The registered evaluation producers (``pcmr list producers``): those of one table, then those of a
    model's evaluation, each in registration order (the built-in ones of this module first)."""
    return [*PRODUCERS.names(), *MODEL_PRODUCERS.names()]
