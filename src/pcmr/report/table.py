"""``Report``: the one result type of pcmr -- ordered rows of metrics, printed and saved as tables.

A row is a flat dict: its identifying columns first (``ID_COLUMNS``: ``model``, ``name``,
``similarity``, ``rerank``, ``relevance``; the metrics layer names its rows with ``name``, e.g.
``"i2t"``, ``"COCO 1K t2i"``, ``"bin 3"``; the evaluation names them by similarity, re-ranker and
relevance mode), then metric columns (``R@1``, ``rsum``, ``i2t_R@1``, ``i2t_r_precision`` ...). A
metric that cannot be computed for a row (e.g. R-Precision from the top-k lists of a matching) is
``None`` (a missing cell), printed as ``-`` and written as an empty CSV cell / JSON ``null``.
Columns that are missing in every row are left out of the printed tables but kept in CSV and JSON,
so the files of one evaluation always have the same columns.

Files: :meth:`Report.save` writes ``results.md``, ``results.csv``, ``results.json`` (and the PNG
figures under ``plots/``); JSON has the keys ``title``, ``meta``, ``rows``, ``skipped``, ``figures``,
with NaN as ``null`` and infinities as the strings ``"inf"`` / ``"-inf"`` (read back as floats).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pcmr.atomic import atomic_write_text, repair_folder
from pcmr.report.plots import save_figures
from pcmr.suggest import unknown_name

__all__ = ["Column", "ColumnPattern", "ColumnSchema", "GENERIC_COLUMNS", "ID_COLUMNS", "Report", "column_title", "format_table",
           "merge_rows"]

#: identifying columns, in the order they lead a row (every other column is a metric)
ID_COLUMNS = ("model", "name", "similarity", "rerank", "relevance")


@dataclass(frozen=True)
class Column:
    """One column of a result row: its ``key``, the ``title`` printed above it, the ``group`` of
    the Markdown table it prints in (``"id"``, ``"recall"``, ``"folds"`` or ``"other"``), the
    ``bounds`` ``(low, high)`` of its values (None: no fixed range) and whether a higher value is
    better (``higher_is_better``; None: neither, e.g. a selected parameter)."""

    key: str
    title: str
    group: str = "other"
    bounds: tuple[float, float] | None = None
    higher_is_better: bool | None = None


@dataclass(frozen=True)
class ColumnPattern:
    """A family of columns: keys that fully match ``regex`` get ``title`` (which may use the regex's
    groups, as ``re.Match.expand`` does), ``group``, ``bounds`` and ``higher_is_better``."""

    regex: str
    title: str
    group: str = "other"
    bounds: tuple[float, float] | None = None
    higher_is_better: bool | None = None


@dataclass(frozen=True)
class ColumnSchema:
    """The columns a kind of result knows: titles and table groups. The layer that makes the rows
    (e.g. ``pcmr.evaluation.EVALUATION_COLUMNS``) defines its schema and passes it to its
    :class:`Report`; this module knows none of them by name.

    Attributes:
        id_columns: identifying columns, in the order they lead a row.
        columns: columns known by key.
        patterns: :class:`ColumnPattern` s for families of columns; the first full match wins.
    """

    id_columns: tuple[str, ...] = ID_COLUMNS
    columns: tuple[Column, ...] = ()
    patterns: tuple[ColumnPattern, ...] = ()

    def column(self, key: str) -> Column:
        """The :class:`Column` of ``key`` (an unknown metric: titled by its key, group ``"other"``)."""
        for column in self.columns:
            if column.key == key:
                return column
        for pattern in self.patterns:
            match = re.fullmatch(pattern.regex, key)
            if match:
                return Column(key, match.expand(pattern.title), pattern.group, pattern.bounds,
                              pattern.higher_is_better)
        return Column(key, key, "id" if key in self.id_columns else "other")

    def title(self, key: str) -> str:
        return self.column(key).title

    def group(self, key: str) -> str:
        return self.column(key).group


#: the schema of rows nobody describes: identifying columns titled, metrics by their key
GENERIC_COLUMNS = ColumnSchema(columns=(Column("model", "model", "id"), Column("name", "", "id"),
                                        Column("similarity", "similarity", "id"),
                                        Column("rerank", "re-ranker", "id"),
                                        Column("relevance", "relevance", "id")))


def column_title(column: str, schema: ColumnSchema = GENERIC_COLUMNS) -> str:
    """The printed header of ``column`` under ``schema``."""
    return schema.title(column)


#: ``meta`` entries shown above the tables of :meth:`Report.to_markdown`, in this order
META_SHOWN = ("model", "run", "dataset", "split", "num_images", "num_captions", "device",
              "uncertainty_measure", "val_split")


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


def _columns(rows: Sequence[Mapping[str, Any]], drop_empty: bool,
             id_columns: Sequence[str] = ID_COLUMNS) -> list[str]:
    """Column order: id columns, then metric columns in order of first appearance."""
    order: list[str] = [c for c in id_columns if any(c in r for r in rows)]
    for row in rows:
        for key in row:
            if key not in order:
                order.append(key)
    if drop_empty:
        order = [c for c in order if c in id_columns or any(r.get(c) is not None for r in rows)]
    return order


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, digits: int = 2,
                 schema: ColumnSchema = GENERIC_COLUMNS) -> str:
    """A GitHub-flavoured Markdown table of ``rows`` (numbers with ``digits`` decimals, ``None`` as ``-``).

    ``columns`` picks and orders the columns (default: every column that has a value in some row);
    ``schema`` gives their titles. Raises ValueError naming an unknown column.
    """
    if columns is None:
        columns = _columns(rows, drop_empty=True, id_columns=schema.id_columns)
    else:
        known = set(_columns(rows, drop_empty=False, id_columns=schema.id_columns))
        unknown = [c for c in columns if c not in known]
        if rows and unknown:
            raise ValueError(unknown_name("column", unknown, sorted(known)))
    header = [schema.title(c) for c in columns]
    body = [[_format_value(r.get(c), digits) for c in columns] for r in rows]
    numeric = [
        any(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) for r in rows) for c in columns
    ]
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---:" if is_num else "---" for is_num in numeric) + "|")
    lines.extend("| " + " | ".join(cells) + " |" for cells in body)
    return "\n".join(lines)


def _json_safe(value: Any) -> Any:
    """NaN (not valid JSON) -> None, +-inf -> "inf" / "-inf" (a parameter selected as infinity),
    recursively; tuples become lists."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _cell(value: Any) -> Any:
    """A row value as stored: None, str, bool, int and float as they are, other numbers (numpy or
    0-d torch scalars) as float."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return float(value)


def _read_cell(column: str, value: Any) -> Any:
    """Inverse of the JSON encoding for a metric cell: "inf" / "-inf" back to floats."""
    if column not in ID_COLUMNS and value in ("inf", "-inf"):
        return float(value)
    return value


@dataclass
class Report:
    """Ordered rows of metrics with what was evaluated: the result of every pcmr evaluation.

    Returned by the metrics layer (``pcmr.metrics.evaluate_directions``, ``evaluate_retrieval``,
    ``evaluate_coco``, ``recall_by_uncertainty``: rows named by ``name``) and by the evaluation
    (``pcmr.evaluation.evaluate_model`` / ``evaluate_embeddings``: rows keyed by similarity,
    re-ranker and relevance mode). See the module docstring for rows, cells and files.

    Attributes:
        rows: the rows, in order; each a flat dict, identifying columns first.
        title: heading of the Markdown form (empty: none).
        meta: what was evaluated: model, dataset, split, sizes, similarity options, notes ...; the
            entries of ``META_SHOWN``, ``similarity_options``, ``about`` (lines) and ``notes`` are
            printed above and below the tables.
        skipped: ``{"similarity", "rerank", "reason"}`` for each requested row that was not evaluated
            (``rerank`` is ``"*"`` when a whole similarity was skipped).
        figures: small numeric series behind the plots (``pcmr.report.plots.FIGURES``), saved as PNG.
        schema: the titles and table groups of the columns (:class:`ColumnSchema`, given by the layer
            that made the rows; not saved).

    Example::

        report = Report(title="COCO 5K")
        report.add("i2t", {"R@1": 52.1}); report.add("t2i", {"R@1": 39.0})
        report["i2t"]["R@1"]                 # 52.1
        result.row("cosine", "nns")          # first row whose ids start with these values
        print(report); report.save("out/")   # results.md / .csv / .json (+ plots/)
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    title: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    schema: ColumnSchema = field(default=GENERIC_COLUMNS, compare=False, repr=False)

    # ---- rows ---------------------------------------------------------------------------------------
    def add(self, name: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Add (or replace) the row ``name`` (column ``name`` followed by ``metrics``); returns it."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a row name must be a non-empty string, got {name!r}")
        row = {"name": name, **{str(k): _cell(v) for k, v in metrics.items() if k != "name"}}
        for index, existing in enumerate(self.rows):
            if existing.get("name") == name:
                self.rows[index] = row
                return row
        self.rows.append(row)
        return row

    def key(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        """The identifying values of ``row``, in the schema's ``id_columns`` order (those it has)."""
        return tuple(row[c] for c in self.schema.id_columns if c in row)

    def row(self, *values: Any, **columns: Any) -> dict[str, Any]:
        """The first row whose identifying values start with ``values`` and whose ``columns`` equal
        the given ones, e.g. ``row("i2t")``, ``row("cosine", "nns")``, ``row("cosine", "nns", "exact")``,
        ``row(similarity="kl", relevance="source")``. KeyError listing the rows' keys if none matches."""
        for r in self.rows:
            if self.key(r)[: len(values)] == values and all(r.get(c, _MISSING) == v for c, v in columns.items()):
                return r
        wanted = ", ".join([repr(v) for v in values] + [f"{c}={v!r}" for c, v in columns.items()])
        raise KeyError(f"no row matching ({wanted}); the rows are {[self.key(r) for r in self.rows]}")

    def __getitem__(self, key: Any) -> dict[str, Any]:
        """``report["i2t"]`` is ``report.row("i2t")``; ``report["cosine", "nns"]`` is ``report.row("cosine", "nns")``."""
        return self.row(*key) if isinstance(key, tuple) else self.row(key)

    def __contains__(self, key: object) -> bool:
        try:
            self[key]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def columns(self, drop_empty: bool = False) -> list[str]:
        """Every column (identifying ones first, then metrics in order of first appearance);
        ``drop_empty`` leaves out metric columns missing in every row."""
        return _columns(self.rows, drop_empty, self.schema.id_columns)

    # ---- text ---------------------------------------------------------------------------------------
    def to_markdown(self, columns: Sequence[str] | None = None, digits: int = 2) -> str:
        """Markdown: the title, what was evaluated (``meta``), the tables, notes and skipped rows.

        ``columns`` prints one table of these columns; by default an evaluation's rows print as a
        recall table, a fold table and a precision table, other rows as one table."""
        lines: list[str] = [f"# {self.title}", ""] if self.title else []
        about = [f"- {key.replace('_', ' ')}: {self.meta[key]}" for key in META_SHOWN if self.meta.get(key) is not None]
        for name, options in (self.meta.get("similarity_options") or {}).items():
            if options:
                shown = ", ".join(f"{k}={_format_value(v, 4)}" for k, v in options.items())
                about.append(f"- options of {name}: {shown}")
        about += [f"- {line}" for line in self.meta.get("about") or []]
        lines += [*about, ""] if about else []
        lines += self._tables(columns, digits)
        warnings = list(dict.fromkeys(_row_warning(r) for r in self.rows if r.get("warning")))
        if warnings:
            lines += ["Warnings:", ""] + [f"- {w}" for w in warnings] + [""]
        notes = self.meta.get("notes") or []
        if notes:
            lines += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
        if self.skipped:
            lines += ["Skipped:", ""]
            lines += [f"- {s['similarity']} / {s['rerank']}: {s['reason']}" for s in self.skipped]
            lines.append("")
        return "\n".join(lines)

    def _tables(self, columns: Sequence[str] | None, digits: int) -> list[str]:
        """The tables of :meth:`to_markdown` (a row's ``warning`` is listed after them, not tabulated)."""
        if not self.rows:
            return ["(no rows)", ""]
        schema = self.schema
        if columns is not None:
            return [format_table(self.rows, columns, digits, schema), ""]
        present = [c for c in _columns(self.rows, drop_empty=True, id_columns=schema.id_columns)
                   if c != "warning"]  # listed under "Warnings", not in a table
        ids = [c for c in present if c in schema.id_columns]
        metrics = [c for c in present if c not in schema.id_columns]
        recall = [c for c in metrics if schema.group(c) == "recall"]
        folds = [c for c in metrics if schema.group(c) == "folds"]
        other = [c for c in metrics if c not in recall and c not in folds]
        if not recall:
            return [format_table(self.rows, present, digits, schema), ""]
        out = ["Recall (percent), rsum, hubness:", "", format_table(self.rows, ids + recall, digits, schema), ""]
        fold_rows = [r for r in self.rows if any(r.get(c) is not None for c in folds)]
        if folds and fold_rows:
            size = self.meta.get("num_images", 0) // max(1, self.meta.get("num_folds") or 1)
            out += [f"Recall (percent) averaged over {self.meta.get('num_folds')} folds of {size} images:", "",
                    format_table(fold_rows, ids + folds, digits, schema), ""]
        rows = [r for r in self.rows if any(r.get(c) is not None for c in other)]  # not top-k-only rows
        if other and rows:
            out += ["Precision-type metrics (percent):", "", format_table(rows, ids + other, digits, schema), ""]
        return out

    def __str__(self) -> str:
        return self.to_markdown()

    def to_csv(self) -> str:
        """CSV text: every column of every row (full precision; empty cell for ``None``)."""
        columns = _columns(self.rows, drop_empty=False, id_columns=self.schema.id_columns)
        handle = io.StringIO(newline="")
        writer = csv.DictWriter(handle, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for r in self.rows:
            writer.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in columns})
        return handle.getvalue()

    # ---- JSON ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict ``{"title", "meta", "rows", "skipped", "figures"}`` (NaN -> null, +-inf -> strings)."""
        return _json_safe({"title": self.title, "meta": self.meta, "rows": self.rows, "skipped": self.skipped,
                           "figures": self.figures})

    @classmethod
    def from_dict(cls, data: Any, where: str = "report", schema: ColumnSchema = GENERIC_COLUMNS) -> Report:
        """Inverse of :meth:`to_dict` (infinities read back as floats; NaN stays a missing cell).
        ValueError naming ``where`` if ``data`` is not such a mapping."""
        if not isinstance(data, Mapping) or not isinstance(data.get("rows"), list) or not all(
                isinstance(r, Mapping) for r in data["rows"]):
            raise ValueError(f"{where} has no 'rows' list of row mappings; expected a results.json written by pcmr")
        for key, kind in (("meta", Mapping), ("skipped", list), ("figures", Mapping), ("title", str)):
            if key in data and not isinstance(data[key], kind):
                raise ValueError(f"{where}: '{key}' must be a {kind.__name__}, got {type(data[key]).__name__}")
        rows = [{str(c): _read_cell(str(c), v) for c, v in r.items()} for r in data["rows"]]
        return cls(rows=rows, title=data.get("title", ""), meta=dict(data.get("meta", {})),
                   skipped=list(data.get("skipped", [])), figures=dict(data.get("figures", {})), schema=schema)

    # ---- files --------------------------------------------------------------------------------------
    def save(self, out_dir: str | os.PathLike[str], plots: bool = True) -> dict[str, Path]:
        """Write ``results.md``, ``results.csv``, ``results.json`` (atomically) and, with ``plots``, the
        PNG figures under ``out_dir/plots/``. Returns the written paths by name."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        written = {"markdown": out / "results.md", "csv": out / "results.csv", "json": out / "results.json"}
        atomic_write_text(written["markdown"], self.to_markdown())
        atomic_write_text(written["csv"], self.to_csv())
        atomic_write_text(written["json"], json.dumps(self.to_dict(), indent=2))
        if plots and self.figures:
            for name, path in save_figures(self.figures, out / "plots").items():
                written[f"plot:{name}"] = path
        return written

    @classmethod
    def load(cls, path: str | os.PathLike[str], schema: ColumnSchema = GENERIC_COLUMNS) -> Report:
        """Read a ``results.json`` written by :meth:`save` (a folder holding one is accepted);
        ``schema`` titles its columns (it is not saved). A report folder whose swap was killed between its
        renames (``pcmr evaluate --out``) is put back first (:func:`pcmr.atomic.repair_folder`)."""
        path = Path(path)
        if path.suffix != ".json":
            repair_folder(path)
        if path.is_dir():
            path = path / "results.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"results file not found: {path}") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not valid JSON ({err}); expected a results.json written by pcmr") from None
        return cls.from_dict(data, where=str(path), schema=schema)


_MISSING = object()


def merge_rows(results: Iterable[tuple[str, Report]]) -> list[dict[str, Any]]:
    """Rows of several reports with a leading ``model`` column (for comparison tables)."""
    merged: list[dict[str, Any]] = []
    for name, result in results:
        merged.extend({"model": name, **r} for r in result.rows)
    return merged


def _row_warning(row: Mapping[str, Any]) -> str:
    """A row's warning with the score it concerns (every row of that score carries the same one)."""
    return f"{row['similarity']}: {row['warning']}" if row.get("similarity") is not None else str(row["warning"])
