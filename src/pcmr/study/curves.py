"""Validation curves of a study: is every recipe on its plateau at the study's budget?

Every run records its validation metrics after each epoch (``run.json``, ``history``). For each
recipe and training variant, :func:`curves_markdown` gives the mean over seeds of the validation
metric at half, three quarters and all of the epochs, the median best epoch and the gain over the
last quarter of training; a recipe whose mean gained less than :data:`PLATEAU_GAIN` points over that
last quarter is marked as on its plateau. :func:`plot_validation_curves` draws the curves
(``curves.png``: one panel per training variant, the mean over seeds of each recipe as a line, each
seed as a thin line).
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pcmr.evaluation.columns import MEAN_R_PRECISION
from pcmr.report import format_table
from pcmr.report.plots import new_figure, save_figure

__all__ = ["CURVE_METRIC", "PLATEAU_GAIN", "Curves", "curves_markdown", "plot_validation_curves", "read_curve"]

#: the validation metric of the curves (mean of i2t and t2i R-Precision, in percent)
CURVE_METRIC = MEAN_R_PRECISION
#: a mean gain below this many points over the last quarter of the epochs counts as a plateau
PLATEAU_GAIN = 1.0
CURVE_COLUMNS = ("recipe", "variant", "seeds", "epochs", "at 1/2", "at 3/4", "at end", "best epoch (median)",
                 "gain, last quarter", "plateau")

#: (recipe label, training variant) -> one curve per seed, each a list of (epoch, value)
Curves = dict[tuple[str, str], list[list[tuple[int, float]]]]


def read_curve(run_dir: str | os.PathLike[str], metric: str = CURVE_METRIC) -> list[tuple[int, float]]:
    """``[(epoch, value), ...]`` of ``metric`` from a run's validation history (empty when the run
    has no ``run.json`` or never validated)."""
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        return []
    history = json.loads(path.read_text()).get("history") or []
    return [(int(record["epoch"]), float(record["val"][metric])) for record in history
            if isinstance(record.get("val"), Mapping) and metric in record["val"]]


def _mean_curve(seed_curves: Sequence[Sequence[tuple[int, float]]]) -> list[tuple[int, float]]:
    by_epoch: dict[int, list[float]] = {}
    for curve in seed_curves:
        for epoch, value in curve:
            by_epoch.setdefault(epoch, []).append(value)
    return [(epoch, statistics.fmean(values)) for epoch, values in sorted(by_epoch.items())]


def _at(curve: Sequence[tuple[int, float]], fraction: float) -> float:
    """The value at the first validated epoch at or after ``fraction`` of the last one."""
    last = curve[-1][0]
    return next(value for epoch, value in curve if epoch >= fraction * last)


def curves_markdown(curves: Curves, *, title: str, metric: str = CURVE_METRIC) -> str:
    """The plateau table of :func:`plot_validation_curves`'s curves (see the module docstring)."""
    lines = [f"# {title}: validation curves", "",
             f"Validation `{metric}` (percent) during training, mean over seeds, at half, three quarters "
             f"and all of each run's epochs; a recipe is on its plateau when its mean gained less than "
             f"{PLATEAU_GAIN:g} point over the last quarter. Figure: `curves.png`.", ""]
    table: list[dict[str, Any]] = []
    for (label, variant), seed_curves in sorted(curves.items()):
        seed_curves = [curve for curve in seed_curves if curve]
        if not seed_curves:
            continue
        mean = _mean_curve(seed_curves)
        gain = mean[-1][1] - _at(mean, 0.75)
        best = statistics.median(max(curve, key=lambda point: point[1])[0] for curve in seed_curves)
        table.append({"recipe": label, "variant": variant, "seeds": len(seed_curves), "epochs": mean[-1][0],
                      "at 1/2": round(_at(mean, 0.5), 1), "at 3/4": round(_at(mean, 0.75), 1),
                      "at end": round(mean[-1][1], 1), "best epoch (median)": best,
                      "gain, last quarter": round(gain, 1), "plateau": "yes" if gain < PLATEAU_GAIN else "no"})
    if not table:
        return "\n".join([*lines, "No run has a validation history.", ""])
    return "\n".join([*lines, format_table(table, CURVE_COLUMNS), ""])


def plot_validation_curves(curves: Curves, path: str | os.PathLike[str], *, metric: str = CURVE_METRIC) -> Path:
    """``curves.png``: one panel per training variant; per recipe, the mean over seeds (line and
    markers) and every seed (thin line), validation ``metric`` against epochs."""
    from matplotlib.ticker import MaxNLocator  # matplotlib is imported only where a figure is drawn

    variants = list(dict.fromkeys(variant for _, variant in sorted(curves)))
    labels = sorted({label for label, _ in curves})
    figure = new_figure(5.0 * max(1, len(variants)) + 2.6, 4.0)
    axes = figure.subplots(1, max(1, len(variants)), sharey=True, squeeze=False)[0]
    for ax, variant in zip(axes, variants):
        for number, label in enumerate(labels):
            seed_curves = [curve for curve in curves.get((label, variant), []) if curve]
            if not seed_curves:
                continue
            colour = f"C{number % 10}"
            for curve in seed_curves:
                ax.plot([e for e, _ in curve], [v for _, v in curve], color=colour, linewidth=0.6, alpha=0.35)
            mean = _mean_curve(seed_curves)
            ax.plot([e for e, _ in mean], [v for _, v in mean], "o-", color=colour, linewidth=1.8, markersize=2.5,
                    label=label if ax is axes[0] else None)
        ax.set_title(f"trained on {variant}", fontsize=10)
        ax.set_xlabel("epoch", fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"validation {metric} (%)", fontsize=9)
    handles, names = axes[0].get_legend_handles_labels()
    if names:  # right of the last panel: never over a curve
        axes[-1].legend(handles, names, fontsize=9, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return save_figure(figure, path)
