"""Is a matplotlib Figure readable? Render it and list what a reader would trip over:

- two text elements (titles, axis labels, tick labels, legend entries, annotations) whose boxes overlap;
- a text element reaching outside the canvas (or within two pixels of its edge);
- an axis with fewer than three labelled ticks (an axis sharing its ticks with a labelled neighbour,
  as ``sharey=True`` leaves the inner panels, counts that neighbour's labels).

Only the text actually drawn counts: the figure is drawn once with ``Text.draw`` watched, and each
box is ``get_window_extent`` with the renderer of ``figure.canvas.get_renderer()``.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any
from unittest import mock

from matplotlib.text import Text

#: boxes may touch; an overlap counts when it is larger than this in both directions (pixels)
OVERLAP_PX = 1.0
#: text must keep this far from the canvas edge (pixels): text touching the edge reads as cut off
EDGE_PX = 2.0
#: minimum number of labelled ticks on every axis
MIN_TICKS = 3


def drawn_texts(figure: Any) -> list[Text]:
    """The visible, non-empty Text artists the figure draws (in drawing order)."""
    drawn: list[Text] = []
    original = Text.draw

    def watch(self: Text, renderer: Any) -> None:
        original(self, renderer)
        if self.get_visible() and self.get_text().strip() and self not in drawn:
            drawn.append(self)

    with mock.patch.object(Text, "draw", watch):
        figure.canvas.draw()
    return drawn


def _name(text: Text) -> str:
    return repr(text.get_text()[:60])


def _labelled_ticks(axis: Any, drawn: set[int]) -> list[str]:
    return [tick.label1.get_text() for tick in axis.get_major_ticks() + axis.get_minor_ticks()
            if id(tick.label1) in drawn] + \
           [tick.label2.get_text() for tick in axis.get_major_ticks() + axis.get_minor_ticks()
            if id(tick.label2) in drawn]


def _shared(ax: Any, which: str) -> list[Any]:
    group = ax.get_shared_x_axes() if which == "x" else ax.get_shared_y_axes()
    return list(group.get_siblings(ax))


def layout_problems(figure: Any) -> list[str]:
    """Every readability problem of ``figure`` (empty: none), one line each."""
    texts = drawn_texts(figure)
    renderer = figure.canvas.get_renderer()
    width, height = figure.canvas.get_width_height()
    boxes = [(text, text.get_window_extent(renderer)) for text in texts]
    problems = []
    for text, box in boxes:
        if box.x0 < EDGE_PX or box.y0 < EDGE_PX or box.x1 > width - EDGE_PX or box.y1 > height - EDGE_PX:
            problems.append(f"text {_name(text)} reaches outside the {width}x{height} canvas "
                            f"({box.x0:.0f}, {box.y0:.0f}, {box.x1:.0f}, {box.y1:.0f})")
    for (first, a), (second, b) in combinations(boxes, 2):
        dx = min(a.x1, b.x1) - max(a.x0, b.x0)
        dy = min(a.y1, b.y1) - max(a.y0, b.y0)
        if dx > OVERLAP_PX and dy > OVERLAP_PX:
            problems.append(f"text {_name(first)} overlaps text {_name(second)} by {dx:.0f} x {dy:.0f} px")
    drawn = {id(t) for t in texts}
    for ax in figure.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            counts = [len(_labelled_ticks(getattr(other, f"{which}axis"), drawn)) for other in _shared(ax, which)]
            if max(counts) < MIN_TICKS:
                problems.append(f"{which} axis of {ax.get_title()!r} has {max(counts)} labelled tick(s), "
                                f"fewer than {MIN_TICKS}: {_labelled_ticks(axis, drawn)}")
    return problems


def assert_readable(figure: Any, what: str = "figure") -> None:
    """Fail with every problem :func:`layout_problems` finds in ``figure``."""
    problems = layout_problems(figure)
    assert not problems, f"{what} is not readable:\n  " + "\n  ".join(problems)
