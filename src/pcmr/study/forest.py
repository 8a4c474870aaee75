"""``claims.png``: the claims table as a forest plot a reader can scan.

One row per judged claim (and condition), then one row per cell of a claim judged in cells (its own
verdict, ``(gate failed)`` where a model it reads failed the skill gate in that cell), grouped by claim family (what the claim's metric
measures: retrieval accuracy, uncertainty against multiplicity, against corruption, abstention, ...).
Each row shows the mean paired difference as a dot and its interval as a bar, **in units of the
claim's minimum effect** ``e`` (its margin ``m`` for an ``equal`` claim), so that ±1 is the minimum
effect on every row and rows of different metrics can be compared. For an ``a < b`` claim the sign
is turned, so that right of +1 always reads "the claimed effect, at least as large as the minimum".
A claim with neither a minimum effect nor a margin is drawn in its metric's own units, with a
hollow diamond and ``(metric units)`` after its label. The raw interval stays in ``claims.md``.

Colour is the verdict; the column at the right spells it, and where Holm's correction over the
table changes it, reads ``verdict → Holm's verdict`` and the dot is hollow.

Input: a list of :class:`ForestRow` (built from judgements by :func:`forest_rows`), so the figure
depends on nothing but these few fields. :func:`claims_figure` returns the matplotlib Figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pcmr.report.figure_keys import RANDOM_WITHIN, aurc_key
from pcmr.report.plots import new_figure
from pcmr.study.benchmark import BENCHMARK_NOT_LEARNED
from pcmr.study.claims import ANY_RELEVANCE, NO_DATA, NO_SIGNAL, UNSTABLE, Judgement

__all__ = ["FAMILIES", "VERDICT_COLOURS", "ForestRow", "claim_family", "claims_figure", "condition_labels",
           "forest_rows"]

#: colour of each verdict
VERDICT_COLOURS = {"holds": "#2a7f3f", "reversed": "#b8322a", "equal": "#3b6ea8", "inconclusive": "#7a7a7a",
                   UNSTABLE: "#8e44ad", NO_SIGNAL: "#d89b2b", NO_DATA: "#b0b0b0",
                   BENCHMARK_NOT_LEARNED: "#5b5b5b"}
#: claim family of a metric: the first entry whose key occurs in the metric's name
FAMILIES = (("relevant_rho", "uncertainty vs number of relevant items"),
            ("occlusion", "uncertainty vs corruption"), ("erasure", "uncertainty vs corruption"),
            (aurc_key(), "abstention (risk-coverage)"), (RANDOM_WITHIN, "abstention (risk-coverage)"),
            ("uncertain", "R@1 by uncertainty"), ("binsel", "binary selection"), ("hs_", "hubness"))
#: family of any other metric (R-Precision, PMRP, R@K, rsum)
RETRIEVAL_FAMILY = "retrieval accuracy"
_ROW_INCHES = 0.27
_CHAR_INCHES = 0.068  # mean width of one character at the labels' size


@dataclass(frozen=True)
class ForestRow:
    """One row of the forest plot.

    ``mean``/``low``/``high``: the paired difference a - b and its interval, in the metric's units
    (``low``/``high`` NaN without an interval). ``unit``: the claim's minimum effect (or margin),
    0 when it has neither. ``expect``: ``greater``, ``less`` or ``equal``. ``holm``: the verdict after
    Holm's correction ("" when not computed)."""

    label: str
    family: str
    mean: float
    low: float
    high: float
    unit: float
    expect: str
    verdict: str
    holm: str = ""

    def scaled(self) -> tuple[float, float, float]:
        """``(mean, low, high)`` in units of :attr:`unit`, turned for an ``a < b`` claim (sorted)."""
        sign = -1.0 if self.expect == "less" else 1.0
        scale = sign / self.unit if self.unit > 0 else sign
        low, high = sorted((self.low * scale, self.high * scale))
        return self.mean * scale, low, high


def claim_family(metric: str) -> str:
    """The family of a claim on ``metric`` (see :data:`FAMILIES`)."""
    return next((family for key, family in FAMILIES if key in metric), RETRIEVAL_FAMILY)


def _condition_parts(condition: Mapping[str, str]) -> dict[str, str]:
    parts = {}
    for key, value in condition.items():
        if key == "cells":
            parts[key] = f"all {len(value.split('+'))} cells"
        elif key == "relevance":
            parts[key] = "eval any relevance" if value == ANY_RELEVANCE else f"eval {value}"
        else:
            parts[key] = str(value)
    return parts


def condition_labels(items: Sequence[tuple[str, Mapping[str, str]]]) -> tuple[list[str], str]:
    """Short row labels of ``(claim id, condition)`` pairs: the id, then in brackets the condition
    values that differ between rows (a swept claim's cells as ``all N cells``); and the condition
    every row shares, to be said once."""
    first = dict(items[0][1]) if items else {}
    common = {k: v for k, v in first.items() if all(condition.get(k) == v for _, condition in items)}
    labels = []
    for claim_id, condition in items:
        shown = [v for k, v in _condition_parts(condition).items() if k not in common]
        labels.append(claim_id + (f" [{', '.join(shown)}]" if shown else ""))
    return labels, ", ".join(f"{k}={v}" for k, v in common.items())


def forest_rows(judgements: Sequence[Judgement]) -> tuple[list[ForestRow], str]:
    """The rows of :func:`claims_figure` from judged claims, and the condition every row shares
    (said once, under the title, instead of on every label)."""
    labels, common = condition_labels([(j.claim.id, j.condition) for j in judgements])
    rows = []
    for judgement, label in zip(judgements, labels):
        claim = judgement.claim
        family = claim_family(judgement.a.metric or claim.metric)
        unit = claim.min_effect if claim.min_effect > 0 else claim.margin
        interval = judgement.interval
        rows.append(ForestRow(label, family, interval.mean, interval.low, interval.high, unit, claim.expect,
                              judgement.verdict, judgement.holm))
        for cell in judgement.cells:  # each cell's own verdict beside the overall one; its gate said
            gate = " (gate failed)" if cell.gate_failures else ""
            rows.append(ForestRow(f"   {claim.id} · {cell.condition.get('variant', '?')}{gate}", family,
                                  cell.interval.mean, cell.interval.low, cell.interval.high, unit, claim.expect,
                                  cell.verdict))
    return rows, common


def _verdict_text(row: ForestRow) -> str:
    if row.holm and row.holm != row.verdict:
        return f"{row.verdict} → {row.holm} (Holm)"
    return row.verdict


def _ticks(low: float, high: float) -> list[float]:
    """0, ±1 and the powers of ten (and 3 x them when few) inside ``[low, high]``."""
    candidates = [0.0] + [s * 10.0 ** e for e in range(0, 7) for s in (1.0, -1.0)]
    ticks = sorted(v for v in candidates if low <= v <= high)
    if len(ticks) < 5:
        ticks = sorted(set(ticks) | {s * 3 * 10.0 ** e for e in range(0, 6) for s in (1.0, -1.0)
                                     if low <= s * 3 * 10.0 ** e <= high})
    return ticks


def _layout(rows: Sequence[ForestRow]) -> list[tuple[str, ForestRow | None]]:
    """Rows grouped by family (families in order of first appearance): a header then its claims."""
    families = list(dict.fromkeys(row.family for row in rows))
    out: list[tuple[str, ForestRow | None]] = []
    for family in families:
        out.append((family, None))
        out += [(row.label, row) for row in rows if row.family == family]
    return out


def claims_figure(rows: Sequence[ForestRow], subtitle: str = "") -> Any:
    """The forest plot of ``rows`` (see the module docstring) as a matplotlib Figure."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    layout = _layout(rows)
    longest_label = max((len(text) for text, _ in layout), default=10)
    longest_verdict = max((len(_verdict_text(row)) for row in rows), default=10)
    width = 5.2 + _CHAR_INCHES * (longest_label + longest_verdict) + 0.6
    figure = new_figure(width, max(3.2, _ROW_INCHES * len(layout) + 2.3), layout="constrained")
    ax = figure.subplots()
    if not rows:
        ax.axis("off")
        ax.text(0.5, 0.5, "no claim judged", ha="center", va="center", fontsize=11, transform=ax.transAxes)
        figure.suptitle("claims", fontsize=12)
        return figure
    scaled = {id(row): row.scaled() for row in rows}
    ends = [v for mean, low, high in scaled.values() for v in (mean, low, high) if math.isfinite(v)]
    left, right = min([-2.0] + ends), max([2.0] + ends)  # ±1 always in view, with room around it
    left, right = (left * 1.4 if left < -2.0 else left), (right * 1.4 if right > 2.0 else right)
    ax.axvspan(-1.0, 1.0, color="#e9eef5", zorder=0, label="within ±1 minimum effect")
    ax.axvline(0.0, color="black", linewidth=0.8, zorder=1)
    for edge in (-1.0, 1.0):
        ax.axvline(edge, color="#7f9cc0", linewidth=0.8, linestyle="--", zorder=1)
    trans = ax.get_yaxis_transform()  # x in axes fraction, y in data
    positions = list(range(len(layout) - 1, -1, -1))  # first row at the top
    for y, (_, row) in zip(positions, layout):
        if row is None:
            if y != positions[0]:
                ax.axhline(y + 0.5, color="0.55", linewidth=0.7, zorder=1)
            continue
        mean, low, high = scaled[id(row)]
        colour = VERDICT_COLOURS.get(row.verdict, "#000000")
        if math.isfinite(low) and math.isfinite(high):
            ax.plot([low, high], [y, y], color=colour, linewidth=2.4, solid_capstyle="butt", zorder=2)
        if math.isfinite(mean):
            changed = bool(row.holm) and row.holm != row.verdict
            ax.plot([mean], [y], "D" if row.unit <= 0 else "o", markersize=6.5, zorder=3,
                    markerfacecolor="white" if changed or row.unit <= 0 else colour,
                    markeredgecolor=colour, markeredgewidth=1.6)
        ax.text(1.02, y, _verdict_text(row), transform=trans, ha="left", va="center", fontsize=9, color=colour)
    ax.set_yticks(positions)
    ax.set_yticklabels([text for text, _ in layout], fontsize=9)
    for label, (_, row) in zip(ax.get_yticklabels(), layout):
        if row is None:
            label.set_fontweight("bold")
    ax.tick_params(axis="y", length=0)
    ax.set_ylim(-0.7, len(layout) - 0.3)
    ax.set_xscale("symlog", linthresh=1.0, linscale=1.0)
    ax.set_xlim(left, right)
    ax.xaxis.set_major_locator(FixedLocator(_ticks(left, right)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}".replace("-", "−")))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.tick_params(axis="x", labelsize=9)
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel("effect in units of the claim's minimum effect (±1: the minimum effect; right: the claimed "
                  "direction)\nlinear inside ±1, logarithmic beyond; raw intervals in claims.md", fontsize=9)
    ax.text(1.02, 1.0, "verdict", transform=ax.transAxes, ha="left", va="bottom", fontsize=9, fontweight="bold")
    seen = list(dict.fromkeys(row.verdict for row in rows))
    handles = [Line2D([], [], color=VERDICT_COLOURS.get(v, "#000000"), marker="o", linewidth=2.4, label=v)
               for v in seen]
    if any(row.holm and row.holm != row.verdict for row in rows):
        handles.append(Line2D([], [], color="0.3", marker="o", markerfacecolor="white", linewidth=0,
                              label="changed by Holm's correction"))
    if any(row.unit <= 0 for row in rows):
        handles.append(Line2D([], [], color="0.3", marker="D", markerfacecolor="white", linewidth=0,
                              label="no minimum effect: metric units"))
    figure.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4), fontsize=9, frameon=False)
    figure.suptitle("claims: paired-seed effects in units of each claim's minimum effect", fontsize=12)
    if subtitle:
        ax.set_title(f"condition of every row: {subtitle}", fontsize=9, loc="left")
    return figure
