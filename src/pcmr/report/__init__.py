"""The one result type of pcmr: :class:`Report` (ordered rows of metrics, ``meta``, ``skipped``,
``figures``), its Markdown tables, CSV / JSON files and PNG figures.

Every evaluation returns a ``Report``: the metrics layer (rows named ``"i2t"``, ``"t2i"``,
``"total"``, ...) and the evaluation (rows keyed by similarity, re-ranker and relevance mode)::

    from pcmr.report import Report
    report = Report.load("eval/")          # a folder written by report.save("eval/")
    print(report.row("cosine", "nns")["rsum"])
"""

from __future__ import annotations

from pcmr.report.plots import FIGURES, save_figures
from pcmr.report.table import (
    GENERIC_COLUMNS,
    ID_COLUMNS,
    Column,
    ColumnPattern,
    ColumnSchema,
    Report,
    column_title,
    format_table,
    merge_rows,
)

__all__ = ["Column", "ColumnPattern", "ColumnSchema", "FIGURES", "GENERIC_COLUMNS", "ID_COLUMNS", "Report", "column_title", "format_table",
           "merge_rows", "save_figures"]
