"""The study's figures: ``claims.png`` (every judged claim with its interval, drawn by
:mod:`pcmr.study.forest`) and ``recipes.png``
(one metric of every recipe, mean and interval over seeds, under each training-relevance variant
and each evaluation relevance mode).

Both are drawn with matplotlib's Agg canvas through :mod:`pcmr.report.plots` (headless, written
atomically).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pcmr.evaluation.columns import RSUM, metric_bounds
from pcmr.report.plots import new_figure, save_figure
from pcmr.study.claims import Judgement
from pcmr.study.forest import VERDICT_COLOURS, claims_figure, forest_rows
from pcmr.study.report import recipe_metric_table

__all__ = ["VERDICT_COLOURS", "metric_bounds", "plot_claims", "plot_recipes", "recipe_order"]


def plot_claims(judgements: Sequence[Judgement], path: str | os.PathLike[str]) -> Path:
    """``claims.png``: the forest plot of ``judgements`` (:mod:`pcmr.study.forest`), one row per claim
    and condition, effects in units of each claim's minimum effect, grouped by claim family."""
    rows, common = forest_rows(judgements)
    return save_figure(claims_figure(rows, common), path)


def recipe_order(table: Mapping[tuple[str, str, str], tuple[float, float, int]], variants: Sequence[str],
                 mode: str) -> list[str]:
    """The recipes of ``table`` (``(recipe, variant, relevance) -> (mean, ...)``) from the bottom row of
    the figure up: ascending by their mean under ``mode`` for ``variants[0]``, a recipe without it
    below every one with it; ties by the next variant, and so on; last by name (the same order
    whatever order the rows came in)."""
    def key(recipe: str) -> tuple[Any, ...]:
        means = [table.get((recipe, variant, mode), (-math.inf,))[0] for variant in variants]
        return (*[-math.inf if math.isnan(m) else m for m in means], recipe)
    return sorted({entry[0] for entry in table}, key=key)


def plot_recipes(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str], *, metric: str = RSUM,
                 variants: Sequence[str] = ("exact", "source"), level: float = 0.95,
                 headline: Mapping[str, str] | None = None) -> Path:
    """``metric`` of every recipe (its headline similarity, see
    :func:`pcmr.study.report.first_similarities`; NNS): one panel per evaluation relevance
    mode, one marker per training variant in ``variants``, mean with its interval over seeds.
    Recipes are sorted by the first panel's first variant, so a different order in the next panel
    is a different ranking of the methods; recipes without that variant (tied) by the next variant,
    and so on, then by name (:func:`recipe_order`)."""
    table = recipe_metric_table(rows, metric, level, headline=headline)
    modes = list(dict.fromkeys(str(r["relevance"]) for r in rows)) or ["-"]
    recipes = recipe_order(table, variants, modes[0])
    figure = new_figure(4.6 * len(modes) + 2.8, max(2.8, 0.3 * len(recipes) + 1.4))
    axes = figure.subplots(1, len(modes), sharey=True, squeeze=False)[0]
    markers = ("o", "s", "^", "D", "v")
    bounds = metric_bounds(metric)
    low, high = (-math.inf, math.inf) if bounds is None else bounds
    drawn: list[float] = []
    for ax, mode in zip(axes, modes):
        for number, variant in enumerate(variants):
            offset = (number - (len(variants) - 1) / 2) * 0.22
            colour = f"C{number}"
            label: str | None = f"trained on {variant}"
            for position, recipe in enumerate(recipes):
                cell = table.get((recipe, variant, mode))
                if cell is None:
                    continue
                mean, half, _ = cell
                if not math.isnan(half):  # an interval past the metric's range is cut at its bound
                    ends = [max(low, mean - half), min(high, mean + half)]
                    ax.plot(ends, [position + offset] * 2, color=colour, linewidth=1.5)
                    drawn += ends
                ax.plot([mean], [position + offset], markers[number % len(markers)], color=colour, markersize=5,
                        label=label, clip_on=False)
                drawn.append(mean)
                label = None  # one legend entry per variant
        ax.set_title(f"evaluated with {mode} relevance", fontsize=10)
        ax.set_xlabel(metric, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    cut = "" if bounds is None else f"; intervals cut at {low:g} and {high:g}"
    figure.supxlabel(f"mean and {100 * level:g} % interval over seeds{cut}", fontsize=9)
    finite = [v for v in drawn if math.isfinite(v)]
    if finite:
        pad = max(1.0, 0.05 * (max(finite) - min(finite)))
        axes[0].set_xlim(max(low, min(finite) - pad), min(high, max(finite) + pad))
        for ax in axes[1:]:
            ax.set_xlim(axes[0].get_xlim())
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:
        more = ax.get_legend_handles_labels()
        handles += [h for h, lab in zip(*more) if lab not in labels]
        labels += [lab for lab in more[1] if lab not in labels]
    if labels:  # to the right of the last panel: never over a recipe's marks
        axes[-1].legend(handles, labels, fontsize=9, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    axes[0].set_yticks(range(len(recipes)))
    axes[0].set_yticklabels(recipes, fontsize=9)
    axes[0].set_ylim(-0.6, len(recipes) - 0.4)
    return save_figure(figure, path)
