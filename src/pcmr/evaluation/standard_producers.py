"""The built-in producers of an evaluation (:mod:`pcmr.evaluation.producers`), in the order they run:
uncertainty deciles, abstention (columns of the identity rows and the risk-coverage figure), the PCA
ellipses, the k-occurrence histogram, the 2-D ellipses, uncertainty against multiplicity, and (for a
model's evaluation) uncertainty under occlusion and word erasure."""

from __future__ import annotations

from typing import Any

from pcmr.evaluation.abstention import (
    abstention_columns,
    abstention_series,
    pca_ellipse_series,
    reference_abstention_series,
)
from pcmr.evaluation.figures import (
    CORRUPTION_ITEMS,
    CORRUPTION_RATIOS,
    corruption_series,
    decile_series,
    embeddings_2d_series,
    multiplicity_series,
    occurrence_histogram,
)
from pcmr.evaluation.producers import (
    MODEL_PRODUCERS,
    PRODUCERS,
    EvaluationContext,
    ModelContext,
    register_producer,
)
from pcmr.gaussian import Gaussian
from pcmr.inference import get_reranker
from pcmr.metrics.driver import DIRECTIONS
from pcmr.progress import phase
from pcmr.report import figure_keys

__all__ = ["list_producers"]


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
