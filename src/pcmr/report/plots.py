"""PNG figures of an evaluation, drawn from small numeric series (no pyplot, no global backend).

Each function takes the JSON-ready series stored in :attr:`pcmr.report.Report.figures` and writes one
PNG with matplotlib's Agg canvas, so it works headless and never changes the user's backend.

- ``uncertainty_r1``: R@1 per uncertainty decile of the queries, both directions (PCME Fig. 6).
- ``k_occurrence``: distribution of the k-occurrence counts N_k of the gallery items, log-log
  (HAL/RGM §3.4, hubness).
- ``uncertainty_vs_corruption``: mean uncertainty against the occlusion ratio of images and the
  word-erasure ratio of captions (PCME Fig. 7).
- ``embeddings_2d``: means and one-standard-deviation ellipses of a 2-D model (PCME Fig. 5), the
  most specific and the most generic captions in different colours.
- ``uncertainty_multiplicity``: each item's uncertainty against its true number of relevant items,
  images and captions (PCME §5.1: uncertainty should grow with multiplicity).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pcmr.atomic import atomic_write
from pcmr.relevance import DIRECTIONS, I2T, T2I
from pcmr.report import figure_keys
from pcmr.report.figure_keys import aurc_key
from pcmr.suggest import unknown_name

__all__ = [
    "ellipse_axes",
    "new_figure",
    "save_figure",
    "plot_uncertainty_deciles",
    "plot_k_occurrence",
    "plot_uncertainty_vs_corruption",
    "plot_embedding_ellipses",
    "plot_uncertainty_multiplicity",
    "save_figures",
    "FIGURES",
]


def new_figure(width: float, height: float):
    """A matplotlib Figure on its own Agg canvas (no pyplot state; headless)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure, path: str | os.PathLike[str]) -> Path:
    """Lay out ``figure`` and write it to ``path`` as PNG, atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    return atomic_write(path, lambda handle: figure.savefig(handle, format="png"))


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_DASHES = ("-", "--", ":", "-.")
_DIRECTIONS = ((I2T, "image → text (queries: images)"), (T2I, "text → image (queries: captions)"))


def plot_uncertainty_deciles(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """R@1 per uncertainty decile of the queries (PCME Fig. 6), one line per score, two panels.

    ``data = {"measure": str, "series": {label: {"i2t": [R@1 per bin], "t2i": [...]}}}``; bin 1 holds
    the least uncertain tenth of the queries.
    """
    figure = new_figure(10.5, 3.8)
    axes = figure.subplots(1, 2, sharey=True)
    labels = list(data["series"])
    for ax, (direction, title) in zip(axes, _DIRECTIONS):
        for number, label in enumerate(labels):
            values = data["series"][label].get(direction)
            if not values:
                continue
            # equal curves (common: every score ranks alike) stay visible: each line has its own marker,
            # dash pattern and a small sideways shift within its decile
            shift = (number - (len(labels) - 1) / 2) * min(0.08, 0.5 / max(len(labels), 1))
            ax.plot([b + 1 + shift for b in range(len(values))], values, marker=_MARKERS[number % len(_MARKERS)],
                    linestyle=_DASHES[number % len(_DASHES)], markersize=5, linewidth=1.3, alpha=0.9,
                    label=label, clip_on=False, zorder=3 + number)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(f"uncertainty decile of the query ({data.get('measure', 'uncertainty')}, 1 = most certain)")
        ax.set_xticks(range(1, 11))
        ax.set_xlim(0.5, 10.5)
        ax.set_ylim(0.0, 100.0)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("R@1 (%)")
    if labels:
        axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    figure.suptitle("R@1 per uncertainty decile", fontsize=11)
    return save_figure(figure, path)


def _readable_log_axis(axis: Any, limits: tuple[float, float]) -> None:
    """Label a log axis readably: its decades, or, when fewer than two decades fall inside
    ``limits`` (a short range such as 1 to 8), ticks at 1, 2, 5 times each power of ten, written as
    plain numbers. Minor ticks stay unlabelled (their labels overlap on a short range)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    low, high = sorted(limits)
    decades = [10.0 ** e for e in range(math.floor(math.log10(max(low, 1e-300))), math.ceil(math.log10(high)) + 1)]
    if sum(low <= d <= high for d in decades) < 2:
        axis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def plot_k_occurrence(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Distribution of k-occurrence counts N_k (log-log), one line per score/re-ranker, two panels.

    ``data = {"k": int, "series": {label: {"i2t": {"values": [...], "frequency": [...]}, "t2i": ...}}}``
    where ``frequency[j]`` gallery items have ``N_k = values[j]``. Items with ``N_k = 0`` cannot be
    drawn on a log axis; their number is given in the legend.
    """
    figure = new_figure(9.5, 4.6)
    axes = figure.subplots(1, 2)
    galleries = {I2T: "gallery: captions", T2I: "gallery: images"}
    for ax, (direction, title) in zip(axes, _DIRECTIONS):
        for number, (label, series) in enumerate(data["series"].items()):
            hist = series.get(direction)
            if not hist:
                continue
            pairs = [(v, f) for v, f in zip(hist["values"], hist["frequency"]) if v > 0 and f > 0]
            zeros = sum(f for v, f in zip(hist["values"], hist["frequency"]) if v == 0)
            if pairs:  # own marker and dash per series: equal histograms stay visible (smaller on top)
                xs, ys = zip(*pairs)
                ax.plot(xs, ys, marker=_MARKERS[number % len(_MARKERS)], markersize=7 - 1.2 * (number % 4),
                        linestyle=_DASHES[number % len(_DASHES)], linewidth=0.8, alpha=0.85, zorder=3 + number,
                        label=f"{label} ({zeros} never retrieved)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            _readable_log_axis(axis, limits)
        ax.set_title(f"{title}\n{galleries[direction]}", fontsize=9)
        ax.set_xlabel(f"N_{data['k']} (times retrieved in a top-{data['k']} list)")
        ax.set_ylabel("number of gallery items")
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[1]:  # below the panel: never over a point
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), borderaxespad=0.0)
    figure.suptitle(f"k-occurrence distribution (k = {data['k']}), log-log", fontsize=11)
    return save_figure(figure, path)


def plot_uncertainty_vs_corruption(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Mean uncertainty against the corruption ratio (PCME Fig. 7): images under occlusion, captions
    under word erasure.

    ``data = {"measure": str, "image": {"ratios": [...], "mean_uncertainty": [...]},
    "caption": {"ratios": [...], "mean_uncertainty": [...]}}``; either modality may be missing.
    """
    panels = [(m, t) for m, t in (("image", "images: occlusion"), ("caption", "captions: word erasure"))
              if data.get(m)]
    figure = new_figure(4.5 * max(len(panels), 1), 3.6)
    axes = figure.subplots(1, max(len(panels), 1), squeeze=False)[0]
    for ax, (modality, title) in zip(axes, panels):
        series = data[modality]
        ax.plot(series["ratios"], series["mean_uncertainty"], marker="o", color="C0" if modality == "image" else "C1")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("occlusion ratio" if modality == "image" else "word-erasure ratio")
        ax.set_ylabel(f"mean uncertainty ({data.get('measure', 'uncertainty')})")
        ax.grid(alpha=0.3)
    figure.suptitle("uncertainty vs corruption", fontsize=11)
    return save_figure(figure, path)


def plot_embedding_ellipses(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Means and 1-std ellipses of 2-D Gaussian embeddings (PCME Fig. 5).

    ``data = {"image": {"mean": [[x, y], ...], "std": [[sx, sy], ...] | None},
    "caption": {"mean": ..., "std": ..., "multiplicity": [int, ...] (optional), "text": [str, ...] (optional)}}``.
    With ``multiplicity``, captions above its median are drawn as "generic", the others as "specific".
    """
    from matplotlib.patches import Ellipse

    figure = new_figure(6.4, 6.0)
    ax = figure.subplots()
    groups: list[tuple[str, dict[str, Any], list[int], str, str]] = []
    image = data.get("image")
    if image:
        groups.append(("images", image, list(range(len(image["mean"]))), "C0", "s"))
    caption = data.get("caption")
    if caption:
        rows = list(range(len(caption["mean"])))
        multiplicity = caption.get("multiplicity")
        if multiplicity:
            cut = sorted(multiplicity)[len(multiplicity) // 2]
            specific = [i for i in rows if multiplicity[i] < cut] or [i for i in rows if multiplicity[i] <= cut]
            generic = [i for i in rows if i not in specific]
            groups.append((f"specific captions ({min(multiplicity[i] for i in specific)}-"
                           f"{max(multiplicity[i] for i in specific)} relevant images)", caption, specific, "C1", "o"))
            if generic:
                groups.append((f"generic captions ({min(multiplicity[i] for i in generic)}-"
                               f"{max(multiplicity[i] for i in generic)} relevant images)", caption, generic, "C2", "^"))
        else:
            groups.append(("captions", caption, rows, "C1", "o"))
    for label, series, rows, color, marker in groups:
        means = [series["mean"][i] for i in rows]
        stds = series.get("std")
        ax.scatter([m[0] for m in means], [m[1] for m in means], s=14, c=color, marker=marker,
                   label=f"{label}, n={len(rows)}", zorder=3)
        if stds:
            for i in rows:
                (x, y), (sx, sy) = series["mean"][i], stds[i]
                ax.add_patch(Ellipse((x, y), 2 * sx, 2 * sy, facecolor=color, edgecolor=color, alpha=0.12))
    if caption and caption.get("text"):
        for (x, y), text in list(zip(caption["mean"], caption["text"]))[:6]:
            ax.annotate(text[:28], (x, y), fontsize=6, alpha=0.8, xytext=(3, 3), textcoords="offset points")
    ax.set_aspect("equal", adjustable="datalim")
    ax.autoscale_view()
    ax.set_xlabel("dimension 1")
    ax.set_ylabel("dimension 2")
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    ax.set_title("2-D embeddings: means and 1-std ellipses", fontsize=11)
    return save_figure(figure, path)


def plot_uncertainty_multiplicity(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Uncertainty against true multiplicity, images and captions (PCME §5.1), two panels.

    ``data = {"measure": str, "image": side, "caption": side}``, ``side = {"multiplicity": [...],
    "uncertainty": [...], "rho": float, "bins": {"multiplicity": [...], "uncertainty": [...]}}``
    (:func:`pcmr.evaluation.figures.multiplicity_series`); items as dots, bin means as a line.
    """
    panels = [(m, t) for m, t in (("image", "images"), ("caption", "captions")) if data.get(m)]
    figure = new_figure(4.6 * max(len(panels), 1), 3.8)
    axes = figure.subplots(1, max(len(panels), 1), squeeze=False)[0]
    for ax, (modality, title) in zip(axes, panels):
        side = data[modality]
        color = "C0" if modality == "image" else "C1"
        ax.scatter(side["multiplicity"], side["uncertainty"], s=5, alpha=0.25, color=color, label="items")
        ax.plot(side["bins"]["multiplicity"], side["bins"]["uncertainty"], marker="o", color="k",
                linewidth=1.2, label="mean per multiplicity bin")
        if min(side["multiplicity"], default=0) > 0 and max(side["multiplicity"]) > 10 * min(side["multiplicity"]):
            ax.set_xscale("log")
        rho = side["rho"]
        ax.set_title(f"{title}: Spearman rho = {'n/a' if rho != rho else f'{rho:+.2f}'}", fontsize=10)
        other = "images" if modality == "caption" else "captions"
        ax.set_xlabel(f"relevant {other} (true multiplicity)")
        ax.set_ylabel(f"uncertainty ({data.get('measure', 'uncertainty')})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)  # below: never over a mark
    figure.suptitle("uncertainty vs multiplicity", fontsize=11)
    return save_figure(figure, path)


def plot_risk_coverage(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Risk-coverage curves (the precision of the answered queries when the most uncertain are withheld),
    one panel per direction: each similarity's uncertainty, and the first similarity's top-1-margin and
    true-multiplicity references; AURC in the legend (lower is better).

    ``data = {"measure": str, "series": {similarity: {"i2t": side, "t2i": side}}}``, ``side`` as written by
    :func:`pcmr.evaluation.abstention.abstention_series`."""
    series = data.get("series", {})
    figure = new_figure(10.0, 4.2)
    axes = figure.subplots(1, 2, squeeze=False)[0]
    for ax, direction in zip(axes, DIRECTIONS):
        for index, (name, sides) in enumerate(series.items()):
            side = sides[direction]
            ax.plot(side["coverage"], side["risk"], color=f"C{index}", linewidth=1.6,
                    label=f"{name} uncertainty (AURC {100 * side[aurc_key()]:.1f})")
            if index == 0:
                ax.plot(side["coverage"], side["margin_risk"], color="0.45", linestyle="--", linewidth=1.2,
                        label=f"top-1 margin (AURC {100 * side[aurc_key('margin')]:.1f})")
                ax.plot(side["coverage"], side["multiplicity_risk"], color="0.2", linestyle=":", linewidth=1.2,
                        label=f"true multiplicity (AURC {100 * side[aurc_key('multiplicity')]:.1f})")
                ax.axhline(side["random"], color="0.7", linewidth=0.8, label="no abstention")
        ax.set_xlim(0.0, 1.0)
        ax.set_ylim(0.0, 1.0)
        ax.set_xlabel("coverage (share of queries answered, least uncertain first)")
        ax.set_ylabel("risk (1 - R-Precision of the answered)")
        ax.set_title({I2T: "image -> text", T2I: "text -> image"}[direction], fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)  # below: never over a mark
    figure.suptitle("risk-coverage: does abstaining on uncertain queries help?", fontsize=11)
    return save_figure(figure, path)


def ellipse_axes(covariance: Any) -> tuple[float, float, float]:
    """``(width, height, angle in degrees)`` of the one-standard-deviation ellipse of a 2 x 2 covariance."""
    values, vectors = np.linalg.eigh(np.asarray(covariance, dtype=np.float64))
    values = np.clip(values, 0.0, None)
    angle = float(np.degrees(np.arctan2(vectors[1, 1], vectors[0, 1])))
    return 2.0 * float(np.sqrt(values[1])), 2.0 * float(np.sqrt(values[0])), angle


def plot_pca_ellipses(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Gaussians of any dimension on the two principal axes of their means, one-standard-deviation ellipses
    of the exactly projected covariances (``data`` from :func:`pcmr.evaluation.abstention.pca_ellipse_series`):
    the most specific and the most generic captions, and a few images."""
    from matplotlib.patches import Ellipse

    figure = new_figure(6.6, 6.0)
    ax = figure.subplots()
    caption, image = data["caption"], data["image"]
    multiplicity = caption.get("multiplicity") or [0] * len(caption["mean"])
    cut = sorted(multiplicity)[len(multiplicity) // 2] if multiplicity else 0
    specific = [i for i, m in enumerate(multiplicity) if m < cut] or [i for i, m in enumerate(multiplicity) if m <= cut]
    generic = [i for i in range(len(multiplicity)) if i not in specific]
    groups = [("images", image, list(range(len(image["mean"]))), "C0", "s")]
    if specific:
        groups.append((f"specific captions ({min(multiplicity[i] for i in specific)}-"
                       f"{max(multiplicity[i] for i in specific)} relevant images)", caption, specific, "C1", "o"))
    if generic:
        groups.append((f"generic captions ({min(multiplicity[i] for i in generic)}-"
                       f"{max(multiplicity[i] for i in generic)} relevant images)", caption, generic, "C2", "^"))
    for label, side, rows, color, marker in groups:
        ax.scatter([side["mean"][i][0] for i in rows], [side["mean"][i][1] for i in rows], s=16, c=color,
                   marker=marker, label=f"{label}, n={len(rows)}", zorder=3)
        for i in rows:
            width, height, angle = ellipse_axes(side["covariance"][i])
            ax.add_patch(Ellipse(tuple(side["mean"][i]), width, height, angle=angle, facecolor=color,
                                 edgecolor=color, alpha=0.12))
    ax.set_aspect("equal", adjustable="datalim")
    ax.autoscale_view()
    explained = data.get("explained", [float("nan")] * 2)
    ax.set_xlabel(f"principal axis 1 ({100 * explained[0]:.0f} % of the means' variance)")
    ax.set_ylabel(f"principal axis 2 ({100 * explained[1]:.0f} %)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=1)
    ax.grid(alpha=0.3)
    ax.set_title("Gaussians on the means' two principal axes: 1-std ellipses", fontsize=11)
    return save_figure(figure, path)


#: figure name -> drawing function; the PNG is saved as ``<name>.png``.
FIGURES: dict[str, Callable[[dict[str, Any], str | os.PathLike[str]], Path]] = {
    figure_keys.UNCERTAINTY_R1: plot_uncertainty_deciles,
    figure_keys.K_OCCURRENCE: plot_k_occurrence,
    figure_keys.UNCERTAINTY_VS_CORRUPTION: plot_uncertainty_vs_corruption,
    figure_keys.EMBEDDINGS_2D: plot_embedding_ellipses,
    figure_keys.UNCERTAINTY_MULTIPLICITY: plot_uncertainty_multiplicity,
    figure_keys.RISK_COVERAGE: plot_risk_coverage,
    figure_keys.EMBEDDINGS_PCA: plot_pca_ellipses,
}


def save_figures(figures: dict[str, Any], out_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Draw every known figure present in ``figures`` into ``out_dir/<name>.png``; returns the paths."""
    unknown = [name for name in figures if name not in FIGURES]
    if unknown:
        raise ValueError(unknown_name("figure name", unknown, sorted(FIGURES)))
    return {name: FIGURES[name](data, Path(out_dir) / f"{name}.png") for name, data in figures.items() if data}
