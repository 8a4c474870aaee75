"""Redraw a committed study's figures from its committed result files, without its run folders.

    python tools/study_figures.py docs/uncertainty_results                       # claims.png
    python tools/study_figures.py docs/uncertainty_results --study uncertainty   # and recipes.png

``claims.png`` is drawn from the study's own ``claims.md`` table (mean a-b, CI, expect with its
minimum effect or margin, verdict, Holm), so the figure shows exactly the committed verdicts, also
for a table written by an older version of the claims. ``recipes.png`` is drawn from ``results.csv``
with the study file's variants and headline similarities (``--recipes`` as the study ran with).
``curves.png`` needs the run folders (``pcmr study``).
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Any

from pcmr.report.plots import save_figure
from pcmr.study import find_study, load_study, select_recipes
from pcmr.study.forest import ForestRow, claim_family, claims_figure, condition_labels
from pcmr.study.plots import plot_recipes
from pcmr.study.report import read_results_csv

_EXPECT = {">": "greater", "<": "less", "~": "equal"}


def _table(text: str, path: Path) -> list[dict[str, str]]:
    """The rows of the claims table (the Markdown table whose first column is ``claim``)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("| claim |")), None)
    if start is None:
        raise ValueError(f"{path}: no claims table (a line starting with '| claim |')")
    header = [cell.strip() for cell in lines[start].strip().strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != len(header):
            raise ValueError(f"{path}: table line has {len(cells)} cells, the header {len(header)}: {line[:80]}")
        rows.append(dict(zip(header, cells)))
    return rows


def _number(text: str) -> float:
    return math.nan if text in ("-", "") else float(text)


def forest_rows_from_table(text: str, path: Path) -> tuple[list[ForestRow], str]:
    """The forest rows of a ``claims.md`` table and the condition every row shares."""
    table = _table(text, path)
    items: list[tuple[str, dict[str, str]]] = []
    for row in table:
        condition = row["condition"]
        items.append((row["claim"], {} if condition == "-" else dict(p.split("=", 1) for p in condition.split(", "))))
    labels, common = condition_labels(items)
    out = []
    for row, label in zip(table, labels):
        expect = re.fullmatch(r"([<>~])(?: \(m=([^)]+)\))?(?: \(e=([^)]+)\))?", row["expect"])
        if expect is None:
            raise ValueError(f"{path}: claim {row['claim']}: expect {row['expect']!r} is not '>', '<' or '~' "
                             "with an optional (m=...) and (e=...)")
        unit = float(expect.group(3) or expect.group(2) or 0.0)
        metric = re.search(r"\[([^\]]+)\]$", row["a"])
        low, high = ((math.nan, math.nan) if row["CI"] == "-"
                     else tuple(float(v) for v in row["CI"].strip("[]").split(", ")))
        family = claim_family(metric.group(1) if metric else "")
        out.append(ForestRow(label, family, _number(row["mean a-b"]), low, high, unit, _EXPECT[expect.group(1)],
                             row["verdict"], row.get("Holm", "")))
        for cell in filter(None, row.get("cells", "").split("; ")):
            out.append(_cell_row(row["claim"], cell, family, unit, _EXPECT[expect.group(1)], path))
    return out, common


_CELL = re.compile(r"(?P<variant>[^:]+): (?P<verdict>.+?) (?P<mean>[+-]\d+\.\d+|-)"
                   r"(?: \[(?P<low>[^,]+), (?P<high>[^\]]+)\])?(?P<gate>, gate.*)?")
_OLD_CELL = re.compile(r"(?P<variant>[^:]+): (?P<verdict>.+?) \((?P<mean>[+-]?\d+\.\d+|-)\)")


def _cell_row(claim: str, text: str, family: str, unit: float, expect: str, path: Path) -> ForestRow:
    """One cell of a swept claim (``pcmr.study.report.cell_text``; tables of older versions give only the
    mean, in brackets, and no gate)."""
    found = _OLD_CELL.fullmatch(text) or _CELL.fullmatch(text)
    if found is None:
        raise ValueError(f"{path}: claim {claim}: cell {text!r} is not 'variant: verdict mean [low, high], gate'")
    parts = found.groupdict()
    gate = " (gate failed)" if (parts.get("gate") or "").startswith(", gate:") else ""
    return ForestRow(f"   {claim} · {parts['variant']}{gate}", family, _number(parts["mean"]),
                     _number(parts.get("low") or "-"), _number(parts.get("high") or "-"), unit, expect,
                     parts["verdict"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a study's results folder with claims.md (and results.csv)")
    parser.add_argument("--study", default=None, help="the study file or shipped name: also redraw recipes.png")
    parser.add_argument("--recipes", default=None, help="comma-separated recipe labels the study ran with")
    args = parser.parse_args(argv)
    rows, common = forest_rows_from_table((args.folder / "claims.md").read_text(encoding="utf-8"),
                                          args.folder / "claims.md")
    print(f"wrote {save_figure(claims_figure(rows, common), args.folder / 'claims.png')}")
    if args.study is not None:
        spec: Any = load_study(find_study(args.study))
        if args.recipes:
            spec = select_recipes(spec, [label.strip() for label in args.recipes.split(",")])
        results = read_results_csv((args.folder / "results.csv").read_text(encoding="utf-8"))
        headline = {entry.label: entry.headline for entry in spec.recipes if entry.headline}
        path = plot_recipes(results, args.folder / "recipes.png", metric=spec.summary_metrics[0],
                            variants=spec.default_variants or tuple(spec.variants), level=spec.level,
                            headline=headline)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
