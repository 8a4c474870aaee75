"""The evaluation table: one row per (similarity, re-ranker), saved as Markdown, CSV and JSON.

A row is a flat dict: the identifying columns ``similarity`` and ``rerank`` followed by metric
columns (``i2t_R@1`` ... ``rsum``, ``i2t_r_precision``, ``i2t_map_at_r``, ``i2t_pmrp_0`` ...,
``hs_sum``, ...). A metric that cannot be computed for a row (e.g. R-Precision from the top-k lists
of relaxed greedy matching) is ``None`` and printed as ``-``. Columns that are ``None`` in every row
are left out of the printed table but kept in CSV/JSON, so files of one run always have the same
columns.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pcmr.atomic import atomic_write_text
from pcmr.evaluation.plots import save_figures

__all__ = ["EvaluationResult", "format_table", "merge_rows", "COLUMN_TITLES"]

ID_COLUMNS = ("model", "similarity", "rerank", "relevance")

#: Printed header of each known column (unknown columns print under their own key).
COLUMN_TITLES: dict[str, str] = {
    "model": "model",
    "similarity": "similarity",
    "rerank": "re-ranker",
    "relevance": "relevance",
    "i2t_R@1": "i2t R@1",
    "i2t_R@5": "i2t R@5",
    "i2t_R@10": "i2t R@10",
    "t2i_R@1": "t2i R@1",
    "t2i_R@5": "t2i R@5",
    "t2i_R@10": "t2i R@10",
    "rsum": "rsum",
    "i2t_r_precision": "i2t R-P",
    "t2i_r_precision": "t2i R-P",
    "i2t_map_at_r": "i2t MAP@R",
    "t2i_map_at_r": "t2i MAP@R",
    "i2t_pmrp_0": "i2t PMRP0",
    "i2t_pmrp_1": "i2t PMRP1",
    "i2t_pmrp_2": "i2t PMRP2",
    "i2t_pmrp_mean": "i2t PMRP",
    "t2i_pmrp_0": "t2i PMRP0",
    "t2i_pmrp_1": "t2i PMRP1",
    "t2i_pmrp_2": "t2i PMRP2",
    "t2i_pmrp_mean": "t2i PMRP",
    "i2t_cxc_r_precision": "i2t RPC²",
    "t2i_cxc_r_precision": "t2i RPC²",
    "i2t_eccv_R@1": "i2t ECCV R@1",
    "t2i_eccv_R@1": "t2i ECCV R@1",
    "i2t_eccv_r_precision": "i2t ECCV R-P",
    "t2i_eccv_r_precision": "t2i ECCV R-P",
    "i2t_eccv_map_at_r": "i2t ECCV MAP@R",
    "t2i_eccv_map_at_r": "t2i ECCV MAP@R",
    "hs_sum": "hs-sum",
    "i2t_lambda": "i2t λ",
    "t2i_lambda": "t2i λ",
}

COLUMN_TITLES.update({f"folds_{d}_R@{k}": f"{d} R@{k}" for d in ("i2t", "t2i") for k in (1, 5, 10)})
COLUMN_TITLES["folds_rsum"] = "rsum"

#: columns of the first Markdown table (recall); fold-averaged recall (``folds_*``) gets its own
#: table; every other metric goes to the precision table
RECALL_COLUMNS = ("i2t_R@", "t2i_R@", "rsum", "hs_sum", "i2t_lambda", "t2i_lambda")
FOLD_COLUMNS = ("folds_",)


def _format_value(value: Any, digits: int) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.{digits}f}"
    return str(value)


def _columns(rows: Sequence[dict[str, Any]], drop_empty: bool) -> list[str]:
    """Column order: id columns, then metric columns in order of first appearance."""
    order: list[str] = [c for c in ID_COLUMNS if any(c in r for r in rows)]
    for row in rows:
        for key in row:
            if key not in order:
                order.append(key)
    if drop_empty:
        order = [c for c in order if c in ID_COLUMNS or any(r.get(c) is not None for r in rows)]
    return order


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, digits: int = 2) -> str:
    """A GitHub-flavoured Markdown table of ``rows`` (numbers with ``digits`` decimals, ``None`` as ``-``).

    ``columns`` picks and orders the columns (default: every column that has a value in some row).
    Raises ValueError naming an unknown column.
    """
    if columns is None:
        columns = _columns(rows, drop_empty=True)
    else:
        known = set(_columns(rows, drop_empty=False))
        unknown = [c for c in columns if c not in known]
        if rows and unknown:
            raise ValueError(f"unknown column(s) {unknown}; the rows have columns {sorted(known)}")
    header = [COLUMN_TITLES.get(c, c) for c in columns]
    body = [[_format_value(r.get(c), digits) for c in columns] for r in rows]
    numeric = [
        any(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) for r in rows) for c in columns
    ]
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---:" if is_num else "---" for is_num in numeric) + "|")
    lines.extend("| " + " | ".join(cells) + " |" for cells in body)
    return "\n".join(lines)


def _json_safe(value: Any) -> Any:
    """Replace NaN (not valid JSON) by None and +-inf by the strings "inf" / "-inf" (e.g. an RGM lambda
    of infinity), recursively; tuples become lists."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


@dataclass
class EvaluationResult:
    """The result of :func:`pcmr.evaluation.evaluate_model`.

    Attributes:
        rows: one dict per evaluated (similarity, re-ranker) pair; see the module docstring.
        skipped: ``{"similarity", "rerank", "reason"}`` for each requested pair that was not evaluated
            (``rerank`` is ``"*"`` when a whole similarity was skipped).
        meta: what was evaluated: model name, dataset, split, sizes, similarity options, selected
            lambdas, uncertainty measure, notes.
        figures: small numeric series behind the plots (uncertainty deciles, N_k counts, occlusion
            series, 2-D embeddings), keyed by figure name; saved as PNG by :meth:`save`.
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)

    def row(self, similarity: str, rerank: str, relevance: str | None = None) -> dict[str, Any]:
        """The row of one (similarity, re-ranker) pair, under relevance mode ``relevance`` (None: the
        first evaluated mode); KeyError listing the evaluated pairs."""
        for r in self.rows:
            if (r["similarity"] == similarity and r["rerank"] == rerank
                    and (relevance is None or r.get("relevance") == relevance)):
                return r
        pairs = [(r["similarity"], r["rerank"]) for r in self.rows]
        raise KeyError(f"no row for similarity={similarity!r}, rerank={rerank!r}; evaluated pairs: {pairs}")

    def to_markdown(self, columns: Sequence[str] | None = None, digits: int = 2) -> str:
        """The report as Markdown: a header with what was evaluated, the table, skipped pairs."""
        lines: list[str] = ["# pcmr evaluation", ""]
        for key in ("model", "run", "dataset", "split", "num_images", "num_captions", "device",
                    "uncertainty_measure", "val_split"):
            if self.meta.get(key) is not None:
                lines.append(f"- {key.replace('_', ' ')}: {self.meta[key]}")
        for name, options in (self.meta.get("similarity_options") or {}).items():
            if options:
                shown = ", ".join(f"{k}={_format_value(v, 4)}" for k, v in options.items())
                lines.append(f"- options of {name}: {shown}")
        for name, lam in (self.meta.get("selected_lambda") or {}).items():
            lines.append(f"- lambda selected on the validation split for {name}: {_format_value(lam, 3)}")
        if not self.rows:
            lines += ["", "(no rows)", ""]
        elif columns is not None:
            lines += ["", format_table(self.rows, columns, digits), ""]
        else:
            present = _columns(self.rows, drop_empty=True)
            ids = [c for c in present if c in ID_COLUMNS]
            recall = [c for c in present if c not in ID_COLUMNS and c.startswith(RECALL_COLUMNS)]
            folds = [c for c in present if c.startswith(FOLD_COLUMNS)]
            other = [c for c in present if c not in ID_COLUMNS and c not in recall and c not in folds]
            lines += ["", "Recall (percent), rsum, hubness:", "", format_table(self.rows, ids + recall, digits), ""]
            fold_rows = [r for r in self.rows if any(r.get(c) is not None for c in folds)]
            if folds and fold_rows:
                size = self.meta.get("num_images", 0) // max(1, self.meta.get("num_folds") or 1)
                lines += [f"Recall (percent) averaged over {self.meta.get('num_folds')} folds of {size} images:", "",
                          format_table(fold_rows, ids + folds, digits), ""]
            rows = [r for r in self.rows if any(r.get(c) is not None for c in other)]  # not top-k-only rows
            if other and rows:
                lines += ["Precision-type metrics (percent):", "", format_table(rows, ids + other, digits), ""]
        notes = self.meta.get("notes") or []
        if notes:
            lines += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
        if self.skipped:
            lines += ["Skipped:", ""]
            lines += [f"- {s['similarity']} / {s['rerank']}: {s['reason']}" for s in self.skipped]
            lines.append("")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_markdown()

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write every column of every row (full precision; empty cell for ``None``)."""
        columns = _columns(self.rows, drop_empty=False)
        path = Path(path)
        handle = io.StringIO(newline="")
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for r in self.rows:
            writer.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in columns})
        atomic_write_text(path, handle.getvalue())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN/inf become null)."""
        return _json_safe({"meta": self.meta, "rows": self.rows, "skipped": self.skipped,
                           "figures": self.figures})

    def save(self, out_dir: str | os.PathLike[str], plots: bool = True) -> dict[str, Path]:
        """Write ``results.md``, ``results.csv``, ``results.json`` and (``plots=True``) the PNG figures
        under ``out_dir/plots/``. Returns the written paths by name."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        written = {"markdown": out / "results.md", "csv": out / "results.csv", "json": out / "results.json"}
        atomic_write_text(written["markdown"], self.to_markdown())
        self.to_csv(written["csv"])
        atomic_write_text(written["json"], json.dumps(self.to_dict(), indent=2))
        if plots and self.figures:
            for name, path in save_figures(self.figures, out / "plots").items():
                written[f"plot:{name}"] = path
        return written

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EvaluationResult:
        """Read a ``results.json`` written by :meth:`save` (a folder holding one is accepted)."""
        path = Path(path)
        if path.is_dir():
            path = path / "results.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"evaluation results file not found: {path}") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not valid JSON ({err}); expected a results.json written by pcmr") from None
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            raise ValueError(f"{path} has no 'rows' list; expected a results.json written by pcmr")
        return cls(rows=data["rows"], skipped=data.get("skipped", []), meta=data.get("meta", {}),
                   figures=data.get("figures", {}))


def merge_rows(results: Iterable[tuple[str, EvaluationResult]]) -> list[dict[str, Any]]:
    """Rows of several results with a leading ``model`` column (for comparison tables)."""
    merged = []
    for name, result in results:
        merged.extend({"model": name, **r} for r in result.rows)
    return merged
