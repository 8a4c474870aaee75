"""``MetricsReport``: named rows of metric dicts that print as a table and save as JSON / CSV."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path


class MetricsReport:
    """An ordered collection of rows, each a name and a ``dict[str, float]`` of metrics.

    Rows may have different metric names; the table and CSV use the union of the columns (in
    order of first appearance) and leave missing cells empty. Used by ``evaluate_retrieval``,
    ``evaluate_coco``, ``recall_by_uncertainty`` and the command line.

    Example::

        report = MetricsReport({"i2t": {"R@1": 52.1}, "t2i": {"R@1": 39.0}}, title="COCO 5K")
        print(report)
        report.save_json("metrics.json"); report.save_csv("metrics.csv")
    """

    def __init__(self, rows: Mapping[str, Mapping[str, float]] | None = None, title: str = "") -> None:
        self.title = title
        self.rows: dict[str, dict[str, float]] = {}
        for name, metrics in (rows or {}).items():
            self.add(name, metrics)

    def add(self, name: str, metrics: Mapping[str, float]) -> None:
        """Add (or replace) the row ``name``; values are stored as floats."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a row name must be a non-empty string, got {name!r}")
        self.rows[name] = {str(k): float(v) for k, v in metrics.items()}

    def extend(self, other: MetricsReport, prefix: str = "") -> None:
        """Append the rows of ``other``, their names prefixed with ``prefix``."""
        for name, metrics in other.rows.items():
            self.add(f"{prefix}{name}", metrics)

    def __getitem__(self, name: str) -> dict[str, float]:
        if name not in self.rows:
            raise KeyError(f"no row {name!r}; rows: {list(self.rows)}")
        return self.rows[name]

    def __contains__(self, name: object) -> bool:
        return name in self.rows

    def __iter__(self) -> Iterator[str]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetricsReport):
            return NotImplemented
        return self.title == other.title and self.to_dict()["rows"] == other.to_dict()["rows"]

    def columns(self) -> list[str]:
        """Union of the metric names, in order of first appearance."""
        seen: dict[str, None] = {}
        for metrics in self.rows.values():
            for key in metrics:
                seen.setdefault(key, None)
        return list(seen)

    @staticmethod
    def _cell(value: float | None, digits: int) -> str:
        if value is None:
            return ""
        if math.isfinite(value) and float(value).is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.{digits}f}"

    def to_table(self, digits: int = 2) -> str:
        """The rows as a fixed-width text table (one line per row)."""
        columns = self.columns()
        header = ["", *columns]
        lines = [[name, *(self._cell(metrics.get(c), digits) for c in columns)]
                 for name, metrics in self.rows.items()]
        widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header))]
        fmt = lambda cells: "  ".join(  # noqa: E731
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(cells, widths)))
        out = [self.title] if self.title else []
        out += [fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in lines]
        return "\n".join(line.rstrip() for line in out)

    def __str__(self) -> str:
        return self.to_table()

    def __repr__(self) -> str:
        return f"MetricsReport(title={self.title!r}, rows={list(self.rows)})"

    def to_dict(self) -> dict:
        """JSON-ready form: ``{"title": str, "rows": {name: {metric: value}}}`` (NaN/inf as strings)."""
        def encode(v: float) -> float | str:
            return v if math.isfinite(v) else str(v)
        return {"title": self.title,
                "rows": {n: {k: encode(v) for k, v in m.items()} for n, m in self.rows.items()}}

    @classmethod
    def from_dict(cls, data: Mapping) -> MetricsReport:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(data, Mapping) or not isinstance(data.get("rows"), Mapping):
            raise ValueError("a metrics report must be a mapping with a 'rows' mapping of name -> metrics")
        return cls({n: {k: float(v) for k, v in m.items()} for n, m in data["rows"].items()},
                   title=str(data.get("title", "")))

    def save_json(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON to ``path``."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load_json(cls, path: str | Path) -> MetricsReport:
        """Read a report written by :meth:`save_json`."""
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not a JSON metrics report ({error})") from error
        return cls.from_dict(data)

    def to_csv(self) -> str:
        """CSV text: a ``row`` column, then one column per metric; missing cells empty."""
        columns = self.columns()
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["row", *columns])
        for name, metrics in self.rows.items():
            writer.writerow([name, *(repr(metrics[c]) if c in metrics else "" for c in columns)])
        return buffer.getvalue()

    def save_csv(self, path: str | Path) -> None:
        """Write :meth:`to_csv` to ``path``."""
        Path(path).write_text(self.to_csv())
