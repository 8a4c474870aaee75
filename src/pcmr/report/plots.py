"""PNG figures of an evaluation, drawn from small numeric series (no pyplot, no global backend).

Each function takes the JSON-ready series stored in :attr:`pcmr.report.Report.figures` and writes one
PNG with matplotlib's Agg canvas, so it works headless and never changes the user's backend.

- ``uncertainty_r1``: R@1 per uncertainty decile of the queries, both directions (PCME Fig. 6).
- ``k_occurrence``: the tail of the distribution of the k-occurrence counts N_k of the gallery items
  under the model's own score, log-log (HAL/RGM §3.4, hubness).
- ``uncertainty_vs_corruption``: mean uncertainty against the occlusion ratio of images and the
  word-erasure ratio of captions (PCME Fig. 7).
- ``embeddings_2d``: means and one-standard-deviation ellipses of a 2-D model (PCME Fig. 5), the
  most specific and the most generic captions in different colours.
- ``risk_coverage``: the risk of the answered queries against coverage, abstaining on uncertainty.
- ``embeddings_pca``: Gaussians of any dimension on the two principal axes of their means.
- ``uncertainty_multiplicity``: each item's uncertainty against its true number of relevant items,
  images and captions (PCME §5.1: uncertainty should grow with multiplicity).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

from pcmr.atomic import atomic_write
from pcmr.relevance import DIRECTIONS, I2T, T2I
from pcmr.report import figure_keys
from pcmr.report.figure_keys import aurc_key
from pcmr.suggest import unknown_name

__all__ = [
    "ellipse_axes",
    "legend_below",
    "new_figure",
    "save_figure",
    "plot_uncertainty_deciles",
    "plot_k_occurrence",
    "plot_uncertainty_vs_corruption",
    "plot_embedding_ellipses",
    "plot_uncertainty_multiplicity",
    "coinciding_curves",
    "save_figures",
    "FIGURES",
]


def new_figure(width: float, height: float, layout: Literal["constrained"] | None = None):
    """A matplotlib Figure on its own Agg canvas (no pyplot state; headless). ``layout="constrained"``
    lets matplotlib place titles, labels and legends placed ``"outside ..."`` the axes; otherwise
    :func:`save_figure` applies ``tight_layout``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    # constrained: a margin of 8 points around everything, so nothing touches the edge
    engine = ConstrainedLayoutEngine(w_pad=8 / 72, h_pad=8 / 72) if layout == "constrained" else None
    figure = Figure(figsize=(width, height), dpi=110, layout=engine)
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure, path: str | os.PathLike[str]) -> Path:
    """Lay out ``figure`` (``tight_layout`` unless it has its own layout) and write it to ``path`` as PNG, atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if figure.get_layout_engine() is None:
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
    """Label a log axis readably: its decades, or, when fewer than three decades fall inside
    ``limits`` (a short range such as 1 to 8), ticks at 1, 2, 5 times each power of ten, written as
    plain numbers. Minor ticks stay unlabelled (their labels overlap on a short range)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    low, high = sorted(limits)
    decades = [10.0 ** e for e in range(math.floor(math.log10(max(low, 1e-300))), math.ceil(math.log10(high)) + 1)]
    if sum(low <= d <= high for d in decades) < 3:
        axis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def occurrence_tail(values: list[int], frequency: list[int]) -> tuple[list[int], list[int]]:
    """The tail of a k-occurrence histogram: for each distinct ``N_k > 0``, how many gallery items
    were retrieved at least that often (non-increasing, so it reads as one smooth curve)."""
    pairs = sorted((v, f) for v, f in zip(values, frequency) if v > 0 and f > 0)
    remaining = sum(f for _, f in pairs)
    xs, ys = [], []
    for value, count in pairs:
        xs.append(value)
        ys.append(remaining)
        remaining -= count
    return xs, ys


def plot_k_occurrence(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Hubness: how many gallery items were retrieved at least ``N_k`` times (log-log, the tail of the
    k-occurrence distribution), one line per re-ranker of the model's own score, two panels.

    ``data = {"k": int, "series": {label: {"i2t": {"values": [...], "frequency": [...]}, "t2i": ...}}}``
    where ``frequency[j]`` gallery items have ``N_k = values[j]``. A heavy tail (hubs) reads as a line
    reaching far right. Items with ``N_k = 0`` cannot be drawn on a log axis; their number is given in
    the legend.
    """
    figure = new_figure(10.0, 5.6, layout="constrained")
    axes = figure.subplots(1, 2)
    galleries = {I2T: "gallery: captions", T2I: "gallery: images"}
    for ax, (direction, title) in zip(axes, _DIRECTIONS):
        for number, (label, series) in enumerate(data["series"].items()):
            hist = series.get(direction)
            if not hist:
                continue
            xs, ys = occurrence_tail(hist["values"], hist["frequency"])
            zeros = sum(f for v, f in zip(hist["values"], hist["frequency"]) if v == 0)
            if xs:  # own colour, marker and dash per series: equal curves stay visible (smaller on top)
                ax.plot(xs, ys, marker=_MARKERS[number % len(_MARKERS)], markersize=6 - (number % 4),
                        linestyle=_DASHES[number % len(_DASHES)], linewidth=1.4, alpha=0.9, zorder=3 + number,
                        drawstyle="steps-post", color=f"C{number}", label=f"{label} ({zeros} never retrieved)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            _readable_log_axis(axis, limits)
        ax.set_title(f"{title}\n{galleries[direction]}", fontsize=9)
        ax.set_xlabel(f"N_{data['k']} (times retrieved in a top-{data['k']} list)", fontsize=9)
        ax.set_ylabel(f"gallery items retrieved at least N_{data['k']} times", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[1]:
            legend_below(ax, figure, fontsize=8, frameon=False)
    figure.suptitle(f"k-occurrence (k = {data['k']}): the tail of the distribution, log-log", fontsize=11)
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


def _relevant_text(values: list[int]) -> str:
    """``1 relevant image``, ``387 relevant images`` or ``2-5 relevant images``."""
    low, high = min(values), max(values)
    return f"{low} relevant image{'' if low == 1 else 's'}" if low == high else f"{low}-{high} relevant images"


def _caption_groups(caption: dict[str, Any]) -> list[tuple[str, list[int], str, str]]:
    """``(label, rows, colour, marker)`` of the captions: split at the median ``multiplicity`` into
    specific and generic ones when it is given."""
    rows = list(range(len(caption["mean"])))
    multiplicity = caption.get("multiplicity")
    if not multiplicity or not rows:
        return [("captions", rows, "C1", "o")] if rows else []
    cut = sorted(multiplicity)[len(multiplicity) // 2]
    specific = [i for i in rows if multiplicity[i] < cut] or [i for i in rows if multiplicity[i] <= cut]
    generic = [i for i in rows if i not in specific]
    groups = [(f"specific captions ({_relevant_text([multiplicity[i] for i in specific])})", specific, "C1", "o")]
    if generic:
        groups.append((f"generic captions ({_relevant_text([multiplicity[i] for i in generic])})", generic, "C2", "^"))
    return groups


def _draw_gaussians(ax: Any, groups: list[tuple[str, str, str, str, list[list[float]], list[tuple[float, float, float]]]]
                    ) -> list[tuple[tuple[float, float], str]]:
    """Means as markers and one-standard-deviation ellipses (``(width, height, angle)``, may be empty)
    of each group ``(label, noun, colour, marker, means, shapes)``. Ellipses are outlined above every
    fill and lightly filled, equal ones drawn once, so none hides another. Returns a note per point where several means
    coincide ("8 captions at this point"), for :func:`_finish_gaussians`."""
    from matplotlib.colors import to_rgba
    from matplotlib.patches import Ellipse

    for number, (label, _, colour, marker, means, shapes) in enumerate(groups):
        ax.scatter([m[0] for m in means], [m[1] for m in means], s=22, c=colour, marker=marker, zorder=20,
                   edgecolors="white", linewidths=0.5, label=f"{label}, n={len(means)}")
        red, green, blue, _ = to_rgba(colour)
        unique = {tuple(round(float(v), 6) for v in (x, y, width, height, angle)): (x, y, width, height, angle)
                  for (x, y), (width, height, angle) in zip(means, shapes)}  # equal ellipses drawn once
        fill = min(0.08, 0.3 / max(len(unique), 1))  # however many overlap, the fill stays light
        for x, y, width, height, angle in unique.values():  # fills below every outline: no outline is hidden
            ax.add_patch(Ellipse((x, y), width, height, angle=angle, facecolor=(red, green, blue, fill),
                                 edgecolor="none", zorder=2))
            ax.add_patch(Ellipse((x, y), width, height, angle=angle, facecolor="none",
                                 edgecolor=(red, green, blue, 0.9), linewidth=1.2, zorder=3 + 0.1 * number))
    points = [(float(m[0]), float(m[1]), noun) for _, noun, _, _, means, _ in groups for m in means]
    if not points:
        return []
    reach = [max(width, height) / 2 for *_, shapes in groups for width, height, _ in shapes] or [0.0]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    span = max(max(xs) - min(xs), max(ys) - min(ys)) + 2 * max(reach)  # about the plotted range
    tolerance = 5e-3 * span if span > 0 else 1.0  # half a marker wide: points that look like one
    clusters: list[tuple[tuple[float, float], dict[str, int]]] = []  # (first point, count per noun)
    for x, y, noun in points:  # a point joins the first cluster within the tolerance of its first point
        counts = next((c for (cx, cy), c in clusters if abs(x - cx) <= tolerance and abs(y - cy) <= tolerance), None)
        if counts is None:
            counts = {}
            clusters.append(((x, y), counts))
        counts[noun] = counts.get(noun, 0) + 1
    return [(point, ", ".join(f"{n} {noun if n > 1 else noun[:-1]}" for noun, n in counts.items()) + " at this point")
            for point, counts in clusters if sum(counts.values()) > 1]


#: where a note about coinciding means may go, relative to its point: (dx, dy) in points, alignment
_NOTE_PLACES = ((6, 6, "left", "bottom"), (6, -6, "left", "top"), (-6, 6, "right", "bottom"),
                (-6, -6, "right", "top"), (6, 20, "left", "bottom"), (6, -20, "left", "top"),
                (-6, 20, "right", "bottom"), (-6, -20, "right", "top"))


def _finish_gaussians(figure: Any, ax: Any, notes: list[tuple[tuple[float, float], str]], title: str) -> None:
    """Equal axes, legend below, title; then each note "N captions at this point" beside its point
    where it overlaps no other note (tried in :data:`_NOTE_PLACES`); notes with no free place are
    counted in the legend instead."""
    from matplotlib.lines import Line2D

    ax.set_aspect("equal", adjustable="datalim")
    ax.autoscale_view()
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=11)
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    legend_below(ax, figure, fontsize=8, ncol=1, frameon=False)
    if not notes:
        return
    figure.canvas.draw()  # the final layout: notes are placed in display space
    renderer = figure.canvas.get_renderer()
    area = ax.get_window_extent(renderer)
    placed: list[Any] = []
    left_out = 0
    for point, text in sorted(notes, key=lambda note: (-note[0][1], note[0][0])):
        for dx, dy, ha, va in _NOTE_PLACES:
            note = ax.annotate(text, point, xytext=(dx, dy), textcoords="offset points", ha=ha, va=va, fontsize=8,
                               zorder=30, bbox={"boxstyle": "round,pad=0.2", "facecolor": "white",
                                                "edgecolor": "0.6", "alpha": 0.9})
            note.set_in_layout(False)
            box = note.get_window_extent(renderer).expanded(1.05, 1.1)
            inside = area.x0 <= box.x0 and box.x1 <= area.x1 and area.y0 <= box.y0 and box.y1 <= area.y1
            if inside and not any(box.overlaps(other) for other in placed):
                placed.append(box)
                break
            note.remove()
        else:
            left_out += 1
    if left_out:
        handles.append(Line2D([], [], linestyle="none"))
        labels.append(f"{left_out} more point{'s' if left_out > 1 else ''} where several means coincide")
        legend_below(ax, figure, handles=handles, labels=labels, fontsize=8, ncol=1, frameon=False)


def plot_embedding_ellipses(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Means and 1-std ellipses of 2-D Gaussian embeddings (PCME Fig. 5).

    ``data = {"image": {"mean": [[x, y], ...], "std": [[sx, sy], ...] | None},
    "caption": {"mean": ..., "std": ..., "multiplicity": [int, ...] (optional)}}``.
    With ``multiplicity``, captions above its median are drawn as "generic", the others as "specific".
    """
    figure = new_figure(6.4, 7.0, layout="constrained")
    ax = figure.subplots()
    groups = []
    for side, noun, named in (("image", "images", [("images", None, "C0", "s")]), ("caption", "captions", None)):
        series = data.get(side)
        if not series:
            continue
        stds = series.get("std")
        for label, rows, colour, marker in (named or _caption_groups(series)):
            rows = list(range(len(series["mean"]))) if rows is None else rows
            shapes = [(2 * stds[i][0], 2 * stds[i][1], 0.0) for i in rows] if stds else []
            groups.append((label, noun, colour, marker, [series["mean"][i] for i in rows], shapes))
    notes = _draw_gaussians(ax, groups)
    ax.set_xlabel("dimension 1")
    ax.set_ylabel("dimension 2")
    _finish_gaussians(figure, ax, notes, "2-D embeddings: means and 1-std ellipses")
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


def legend_below(ax: Any, figure: Any, **kwargs: Any) -> None:
    """The legend of ``ax`` below its x label (44 points under the axes: clear of the tick labels and
    the label at any figure size); a constrained layout makes room for it."""
    from matplotlib.transforms import offset_copy

    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0),
              bbox_transform=offset_copy(ax.transAxes, fig=figure, y=-44, units="points"), **kwargs)


def _data_range(values: list[float], low: float, high: float, *, pad: float = 0.06, least: float = 0.05) -> tuple[float, float]:
    """Axis limits that follow ``values`` (finite ones), padded, at least ``least`` wide, inside ``[low, high]``."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return low, high
    bottom, top = min(finite), max(finite)
    middle, half = (bottom + top) / 2, max(top - bottom, least) / 2 * (1 + 2 * pad)
    bottom, top = max(low, middle - half), min(high, middle + half)
    return bottom, top


def plot_risk_coverage(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Risk-coverage curves (the precision of the answered queries when the most uncertain are withheld),
    one panel per direction: each similarity's uncertainty, and the first similarity's (the model's own
    score, listed first) top-1-margin and true-multiplicity references; AURC in the legend (lower is
    better). The risk axis follows the curves (it is not stretched to 0-1).

    ``data = {"measure": str, "series": {similarity: {"i2t": side, "t2i": side}}}``, ``side`` as written by
    :func:`pcmr.evaluation.figures.abstention_series`."""
    series = data.get("series", {})
    figure = new_figure(10.0, 5.4, layout="constrained")
    axes = figure.subplots(1, 2, squeeze=False)[0]
    for ax, direction in zip(axes, DIRECTIONS):
        drawn: list[float] = []
        for index, (names, side) in enumerate(coinciding_curves(series, direction)):
            shared = "identical curves, " if len(names) > 1 else ""  # docs/evaluation.md says why
            ax.plot(side["coverage"], side["risk"], color=f"C{index}", linewidth=1.6,
                    label=f"{', '.join(names)} uncertainty ({shared}AURC {100 * side[aurc_key()]:.1f})")
            drawn += side["risk"]
            if index == 0:
                name = names[0]
                ax.plot(side["coverage"], side["margin_risk"], color="0.45", linestyle="--", linewidth=1.2,
                        label=f"top-1 margin of {name} (AURC {100 * side[aurc_key('margin')]:.1f})")
                ax.plot(side["coverage"], side["multiplicity_risk"], color="0.2", linestyle=":", linewidth=1.2,
                        label=f"true multiplicity, fewest relevant first "
                              f"(AURC {100 * side[aurc_key('multiplicity')]:.1f})")
                ax.axhline(side["random"], color="0.7", linewidth=0.8, label="no abstention")
                drawn += side["margin_risk"] + side["multiplicity_risk"] + [side["random"]]
        ax.set_xlim(0.0, 1.0)
        ax.set_ylim(*_data_range(drawn, 0.0, 1.0))
        ax.set_xlabel("coverage (share of queries answered, least uncertain first)", fontsize=9)
        ax.set_ylabel("risk (1 - R-Precision of the answered)", fontsize=9)
        ax.set_title({I2T: "image -> text", T2I: "text -> image"}[direction], fontsize=10)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[1]:
            legend_below(ax, figure, fontsize=8, ncol=1, frameon=False)
    figure.suptitle("risk-coverage: does abstaining on uncertain queries help?", fontsize=11)
    return save_figure(figure, path)


def coinciding_curves(series: dict[str, Any], direction: str) -> list[tuple[list[str], dict[str, Any]]]:
    """The risk-coverage curves of ``series`` (``{similarity: {direction: side}}``) in one direction,
    those with equal coverage and risk merged: ``[(similarities, side)]`` in the order of ``series``.
    Every similarity answers by the same query uncertainty, so two similarities whose rankings give
    every query the same R-Precision draw one curve."""
    groups: list[tuple[list[str], dict[str, Any]]] = []
    for name, sides in series.items():
        side = sides[direction]
        for names, first in groups:
            if first["coverage"] == side["coverage"] and np.allclose(first["risk"], side["risk"], rtol=0, atol=1e-12):
                names.append(name)
                break
        else:
            groups.append(([name], side))
    return groups


def ellipse_axes(covariance: Any) -> tuple[float, float, float]:
    """``(width, height, angle in degrees)`` of the one-standard-deviation ellipse of a 2 x 2 covariance."""
    values, vectors = np.linalg.eigh(np.asarray(covariance, dtype=np.float64))
    values = np.clip(values, 0.0, None)
    angle = float(np.degrees(np.arctan2(vectors[1, 1], vectors[0, 1])))
    return 2.0 * float(np.sqrt(values[1])), 2.0 * float(np.sqrt(values[0])), angle


def plot_pca_ellipses(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Gaussians of any dimension on the two principal axes of their means, one-standard-deviation ellipses
    of the exactly projected covariances (``data`` from :func:`pcmr.evaluation.figures.pca_ellipse_series`):
    the most specific and the most generic captions, and a few images."""
    figure = new_figure(6.6, 7.0, layout="constrained")
    ax = figure.subplots()
    caption, image = data["caption"], data["image"]
    groups = []
    for series, noun, parts in ((image, "images", [("images", list(range(len(image["mean"]))), "C0", "s")]),
                                (caption, "captions", _caption_groups(caption))):
        for label, rows, colour, marker in parts:
            groups.append((label, noun, colour, marker, [series["mean"][i] for i in rows],
                           [ellipse_axes(series["covariance"][i]) for i in rows]))
    notes = _draw_gaussians(ax, groups)
    explained = data.get("explained", [float("nan")] * 2)
    ax.set_xlabel(f"principal axis 1 ({100 * explained[0]:.0f} % of the means' variance)")
    ax.set_ylabel(f"principal axis 2 ({100 * explained[1]:.0f} %)")
    _finish_gaussians(figure, ax, notes, "Gaussians on the means' two principal axes: 1-std ellipses")
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
