"""The columns of an evaluation row: key, printed title and table group, defined once.

``evaluate_embeddings`` fills rows with these keys, the :class:`~pcmr.report.Report` of an evaluation
prints them with these titles in these tables (recall, fold-averaged recall, precision-type), and
``pcmr demo`` and ``pcmr study`` print their tables with the same schema. Metrics (docs/metrics.md):
R@K and rsum (VSE++), R-Precision and MAP@R (Musgrave et al.), PMRP (PCME Sec. 4.1.2), CxC's RPC²
and ECCV Caption's metrics (extra positive sets), hs-sum (hubness), and RGM's selected lambda
(HAL/RGM paper Sec. 3.3).
"""

from __future__ import annotations

import math
from typing import Any

from pcmr.report import GENERIC_COLUMNS, Column, ColumnSchema

__all__ = ["EVALUATION_COLUMNS", "format_number"]

_DIRECTIONS = ("i2t", "t2i")


def _direction_columns(direction: str) -> list[Column]:
    d = direction
    return [
        Column(f"{d}_r_precision", f"{d} R-P"), Column(f"{d}_map_at_r", f"{d} MAP@R"),
        *(Column(f"{d}_pmrp_{z}", f"{d} PMRP{z}") for z in (0, 1, 2)), Column(f"{d}_pmrp_mean", f"{d} PMRP"),
        Column(f"{d}_cxc_r_precision", f"{d} RPC²"), Column(f"{d}_eccv_R@1", f"{d} ECCV R@1"),
        Column(f"{d}_eccv_r_precision", f"{d} ECCV R-P"), Column(f"{d}_eccv_map_at_r", f"{d} ECCV MAP@R"),
        Column(f"{d}_lambda", f"{d} λ", "recall"),
        Column(f"{d}_aurc", f"{d} AURC"), Column(f"{d}_aurc_margin", f"{d} AURC margin"),
        Column(f"{d}_aurc_multiplicity", f"{d} AURC multiplicity"),
        Column(f"{d}_aurc_within", f"{d} AURC within"), Column(f"{d}_aurc_margin_within", f"{d} AURC margin within"),
        Column(f"{d}_random_within", f"{d} AURC random within"),
        Column(f"{d}_uncertainty_S", f"{d} unc. S"), Column(f"{d}_uncertainty_R2", f"{d} unc. R²"),
    ]


#: every column of an evaluation row (identifying columns from ``pcmr.report.GENERIC_COLUMNS``)
EVALUATION_COLUMNS = ColumnSchema(
    columns=(*GENERIC_COLUMNS.columns, Column("rsum", "rsum", "recall"), Column("hs_sum", "hs-sum", "recall"),
             Column("folds_rsum", "rsum", "folds"), *(c for d in _DIRECTIONS for c in _direction_columns(d))),
    patterns=((r"(i2t|t2i)_R@(\d+)", r"\1 R@\2", "recall"),
              (r"folds_(i2t|t2i)_R@(\d+)", r"\1 R@\2", "folds"),
              (r"folds_.+", r"\g<0>", "folds")),
)


def format_number(value: Any, digits: int) -> str:
    """``value`` with ``digits`` decimals (infinities as ``inf``; anything else as ``str``)."""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)
