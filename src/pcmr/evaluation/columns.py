"""The columns of an evaluation row: key, printed title, table group, bounds and direction, defined once.

``evaluate_embeddings`` fills rows with these keys (:func:`table_row`), the
:class:`~pcmr.report.Report` of an evaluation prints them with these titles in these tables
(recall, fold-averaged recall, precision-type), training's validation reads its metrics with
:func:`validation_metrics`, and ``pcmr demo``, ``pcmr search`` and ``pcmr study`` name the columns
they show through the functions here. The study's analysis columns (``docs/study.md``) are here
too (:data:`ANALYSIS_COLUMNS`). No other module of pcmr spells a metric key (a test checks it).

Metrics (docs/metrics.md): R@K and rsum (VSE++), R-Precision and MAP@R (Musgrave et al.), PMRP
(PCME Sec. 4.1.2), CxC's RPC² and ECCV Caption's metrics (extra positive sets), hs-sum (hubness),
and RGM's selected lambda (HAL/RGM paper Sec. 3.3).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pcmr.metrics import DEFAULT_KS
from pcmr.metrics.defaults import DEFAULT_SELECT_ON
from pcmr.metrics.driver import DIRECTIONS, PMRP_ZETAS, hubness_skew_or_zero
from pcmr.report import GENERIC_COLUMNS, Column, ColumnPattern, ColumnSchema, Report
from pcmr.report.figure_keys import RANDOM_WITHIN, aurc_key

__all__ = ["ALL_COLUMNS", "ANALYSIS_COLUMNS", "CORRUPTION_SLOPE", "DIRECTIONS", "EVALUATION_COLUMNS", "HS_SUM", "MEAN_R_PRECISION", "RSUM",
           "SELECTION_METRICS", "SIGNAL_KEYS", "BINSEL_I2T_CROP_A", "BINSEL_I2T_UNION", "BINSEL_T2I_CAPTION_A",
           "BINSEL_T2I_CAPTION_AB", "aurc", "excess_aurc", "random_aurc_within", "selection_value", "binary_selection", "format_number", "learned_option", "map_at_r",
           "metric_bounds", "of_untrained", "ordered", "pmrp", "r1_by_uncertainty", "r_precision", "recall",
           "relevant_count_rho", "table_row", "tuned_value", "uncertainty_agreement", "uncertainty_fit",
           "uncertainty_signal", "validation_metrics"]

#: the sum of R@K over the Ks and both directions (VSE++); the default of ``train.select_on``
RSUM = DEFAULT_SELECT_ON
#: the summed hubness skewness over both directions
HS_SUM = "hs_sum"
#: the mean of both directions' R-Precision (training's validation, the study's curves)
MEAN_R_PRECISION = "r_precision"
#: the metrics a run's model selection may use (``train.select_on``)
SELECTION_METRICS = (RSUM, MEAN_R_PRECISION)
_FOLDS = "folds_"
_UNTRAINED = "_untrained"
_PERCENT = (0.0, 100.0)


# ---------------------------------------------------------------- keys of the evaluation table
def recall(direction: str, k: int, positives: str | None = None) -> str:
    """R@K of one direction (``positives``: an extra positive set such as ``cxc``)."""
    return f"{direction}_{positives}_R@{k}" if positives else f"{direction}_R@{k}"


def folds_recall(direction: str, k: int) -> str:
    """R@K averaged over the image folds (COCO 1K)."""
    return f"{_FOLDS}{recall(direction, k)}"


def r_precision(direction: str, positives: str | None = None) -> str:
    """R-Precision of one direction (RPC² under CxC's positives)."""
    return f"{direction}_{positives}_r_precision" if positives else f"{direction}_r_precision"


def map_at_r(direction: str, positives: str | None = None) -> str:
    """MAP@R of one direction."""
    return f"{direction}_{positives}_map_at_r" if positives else f"{direction}_map_at_r"


def pmrp(direction: str, zeta: int | str) -> str:
    """PMRP of one direction at threshold ``zeta`` (``"mean"``: the mean over the thresholds)."""
    return f"{direction}_pmrp_{zeta}"


def aurc(direction: str, ranked_by: str | None = None, *, within: bool = False) -> str:
    """100 x the area under the risk-coverage curve of one direction, queries ranked by their
    uncertainty (``ranked_by`` None), by the top-1 margin (``"margin"``) or by the true multiplicity
    (``"multiplicity"``, the oracle); ``within``: averaged within multiplicity strata. Lower is better."""
    return f"{direction}_{aurc_key(ranked_by, within=within)}"


def excess_aurc(direction: str, ranked_by: str | None = None) -> str:
    """100 x (the AURC of an ordering minus that of no abstention, the mean risk): below 0 the ordering
    withholds the failing queries first, above 0 it withholds the successful ones (``ranked_by``: None
    for the uncertainty, ``"margin"`` for the top-1 margin)."""
    return f"{direction}_excess_aurc_{ranked_by}" if ranked_by else f"{direction}_excess_aurc"


def random_aurc_within(direction: str) -> str:
    """100 x the AURC of a random ranking within multiplicity strata (the chance level of
    ``aurc(direction, within=True)``)."""
    return f"{direction}_{RANDOM_WITHIN}"


def uncertainty_fit(direction: str, statistic: str) -> str:
    """How well the queries' uncertainty predicts their recall in one direction (ProbVLM's ``S`` and
    ``R2``, ``pcmr.metrics.risk_coverage``)."""
    return f"{direction}_uncertainty_{statistic}"


def query_blind_r_precision(direction: str) -> str:
    """R-Precision of one direction's query-blind ranking (one list for every query; the baseline of a
    study's benchmark check, ``pcmr.metrics.query_blind``)."""
    return f"{direction}_query_blind_r_precision"


def tuned_value(direction: str) -> str:
    """The parameter a matching re-ranker selected on validation (RGM's lambda) for one direction."""
    return f"{direction}_lambda"


# ---------------------------------------------------------------- the study's analysis columns
#: the slope of mean uncertainty against the corruption ratio, per modality
CORRUPTION_SLOPE = {"image": "image_uncertainty_occlusion_slope", "caption": "caption_uncertainty_erasure_slope"}
#: the values of the trained-signal gate recorded per modality (``pcmr.metrics.signal``)
SIGNAL_KEYS = ("signal", "spread", "spread_init", "floor")


def r1_by_uncertainty(direction: str, which: str) -> str:
    """R@1 of the ``"least"`` or ``"most"`` uncertain decile of queries."""
    if which not in ("least", "most"):
        raise ValueError(f"which must be 'least' or 'most', got {which!r}")
    return f"{direction}_r1_{which}_uncertain"


def uncertainty_agreement(side: str, untrained: bool = False) -> str:
    """Mean pairwise Spearman rho of one modality's per-item uncertainty across seeds (of the
    untrained models with ``untrained``)."""
    key = f"{side}_uncertainty_agreement"
    return of_untrained(key) if untrained else key


def uncertainty_signal(side: str, key: str = "signal") -> str:
    """A value of the trained-signal gate of one modality (``key`` one of :data:`SIGNAL_KEYS`)."""
    return f"{side}_uncertainty_{key}"


def relevant_count_rho(side: str, *, strata: bool = False, untrained: bool = False) -> str:
    """Rank correlation of one modality's uncertainty with its number of relevant items (``strata``:
    within strata of caption wildcard count; ``untrained``: of the run's untrained model)."""
    key = f"{side}_uncertainty_relevant_rho" + ("_strata" if strata else "")
    return of_untrained(key) if untrained else key


def of_untrained(key: str) -> str:
    """The column of an analysis ``key`` measured on the run's untrained model (the null)."""
    return f"{key}{_UNTRAINED}"


def learned_option(option: str) -> str:
    """A learned option of the match probability (``a``, ``b``)."""
    return f"match_{option}"


#: the four accuracies of the binary selection task (ProbVSE §5; ``pcmr.study.analysis.binary_selection``):
#: crop A chooses caption "A" over "A and B"; union C chooses "A and B" over "A"; caption "A" chooses crop A
#: over union C; "A and B" chooses union C over crop A
BINSEL_I2T_CROP_A = "i2t_crop_a"
BINSEL_I2T_UNION = "i2t_union"
BINSEL_T2I_CAPTION_A = "t2i_caption_a"
BINSEL_T2I_CAPTION_AB = "t2i_caption_ab"


def binary_selection(accuracy: str) -> str:
    """One binary-selection accuracy (``pcmr.study.analysis.binary_selection``)."""
    return f"binsel_{accuracy}"


def _direction_columns(d: str) -> list[Column]:
    return [
        Column(r_precision(d), f"{d} R-P", bounds=_PERCENT, higher_is_better=True),
        Column(map_at_r(d), f"{d} MAP@R", bounds=_PERCENT, higher_is_better=True),
        *(Column(pmrp(d, z), f"{d} PMRP{z}", bounds=_PERCENT, higher_is_better=True) for z in PMRP_ZETAS),
        Column(pmrp(d, "mean"), f"{d} PMRP", bounds=_PERCENT, higher_is_better=True),
        Column(r_precision(d, "cxc"), f"{d} RPC²", bounds=_PERCENT, higher_is_better=True),
        Column(recall(d, 1, "eccv"), f"{d} ECCV R@1", bounds=_PERCENT, higher_is_better=True),
        Column(r_precision(d, "eccv"), f"{d} ECCV R-P", bounds=_PERCENT, higher_is_better=True),
        Column(map_at_r(d, "eccv"), f"{d} ECCV MAP@R", bounds=_PERCENT, higher_is_better=True),
        Column(tuned_value(d), f"{d} λ", "recall"),
        Column(aurc(d), f"{d} AURC", bounds=_PERCENT, higher_is_better=False),
        Column(aurc(d, "margin"), f"{d} AURC margin", bounds=_PERCENT, higher_is_better=False),
        Column(aurc(d, "multiplicity"), f"{d} AURC multiplicity", bounds=_PERCENT, higher_is_better=False),
        Column(aurc(d, within=True), f"{d} AURC within", bounds=_PERCENT, higher_is_better=False),
        Column(aurc(d, "margin", within=True), f"{d} AURC margin within", bounds=_PERCENT, higher_is_better=False),
        Column(random_aurc_within(d), f"{d} AURC random within", bounds=_PERCENT, higher_is_better=False),
        Column(aurc(d, "random"), f"{d} AURC none", bounds=_PERCENT, higher_is_better=False),
        Column(excess_aurc(d), f"{d} excess AURC", bounds=(-100.0, 100.0), higher_is_better=False),
        Column(excess_aurc(d, "margin"), f"{d} excess AURC margin", bounds=(-100.0, 100.0), higher_is_better=False),
        Column(uncertainty_fit(d, "S"), f"{d} unc. S"), Column(uncertainty_fit(d, "R2"), f"{d} unc. R²"),
    ]


_RSUM_BOUNDS = (0.0, 2 * 100.0 * len(DEFAULT_KS))  # six recalls with the default Ks

#: every column of an evaluation row (identifying columns from ``pcmr.report.GENERIC_COLUMNS``)
EVALUATION_COLUMNS = ColumnSchema(
    columns=(*GENERIC_COLUMNS.columns,
             Column(RSUM, "rsum", "recall", bounds=_RSUM_BOUNDS, higher_is_better=True),
             Column(HS_SUM, "hs-sum", "recall", higher_is_better=False),
             Column(_FOLDS + RSUM, "rsum", "folds", bounds=_RSUM_BOUNDS, higher_is_better=True),
             Column(MEAN_R_PRECISION, "R-P", bounds=_PERCENT, higher_is_better=True),
             *(c for d in DIRECTIONS for c in _direction_columns(d))),
    patterns=(ColumnPattern(r"(i2t|t2i)_R@(\d+)", r"\1 R@\2", "recall", _PERCENT, True),
              ColumnPattern(r"folds_(i2t|t2i)_R@(\d+)", r"\1 R@\2", "folds", _PERCENT, True),
              ColumnPattern(r"folds_.+", r"\g<0>", "folds"),
              ColumnPattern(r"(i2t|t2i)_\w+_R@(\d+)", r"\g<0>", "other", _PERCENT, True),
              ColumnPattern(r"(i2t|t2i)_\w+_(r_precision|map_at_r)", r"\g<0>", "other", _PERCENT, True)),
)

#: the study's analysis columns (titled by their keys; ``docs/study.md``)
ANALYSIS_COLUMNS: tuple[Column, ...] = (
    *(Column(r1_by_uncertainty(d, w), r1_by_uncertainty(d, w), bounds=_PERCENT, higher_is_better=True)
      for d in DIRECTIONS for w in ("least", "most")),
    *(Column(key, key) for key in CORRUPTION_SLOPE.values()),
    *(Column(uncertainty_signal(side, key), uncertainty_signal(side, key))
      for side in ("image", "caption") for key in SIGNAL_KEYS),
    *(Column(relevant_count_rho(side, strata=strata, untrained=untrained),
             relevant_count_rho(side, strata=strata, untrained=untrained), bounds=(-1.0, 1.0))
      for side in ("image", "caption") for strata in (False, True) for untrained in (False, True)),
    *(Column(uncertainty_agreement(side, untrained), uncertainty_agreement(side, untrained), bounds=(-1.0, 1.0))
      for side in ("image", "caption") for untrained in (False, True)),
    *(Column(learned_option(option), learned_option(option)) for option in ("a", "b")),
    *(Column(query_blind_r_precision(d), query_blind_r_precision(d), bounds=_PERCENT, higher_is_better=True)
      for d in DIRECTIONS),
)
_BINARY_SELECTION = ColumnPattern(r"binsel_\w+", r"\g<0>", "other", _PERCENT, True)
#: evaluation and analysis columns together (the study's rows add their own identifying columns)
ALL_COLUMNS = ColumnSchema(columns=(*EVALUATION_COLUMNS.columns, *ANALYSIS_COLUMNS),
                           patterns=(*EVALUATION_COLUMNS.patterns, _BINARY_SELECTION))


def metric_bounds(metric: str) -> tuple[float, float] | None:
    """The possible range of an evaluation or analysis column (None: no fixed bounds)."""
    return ALL_COLUMNS.column(metric).bounds


# ---------------------------------------------------------------- rows
def ordered(row: Mapping[str, Any], ks: Sequence[int]) -> dict[str, Any]:
    """Canonical column order: ids, R@K both ways, rsum, R-P, MAP@R, PMRP, extras, hs-sum, lambdas."""
    first = ["similarity", "rerank"] + [recall(d, k) for d in DIRECTIONS for k in ks] + [RSUM]
    first += [key(d) for d in DIRECTIONS for key in (r_precision, map_at_r)]
    thresholds: tuple[int | str, ...] = (*PMRP_ZETAS, "mean")
    first += [pmrp(d, z) for d in DIRECTIONS for z in thresholds]
    last = [HS_SUM, *(tuned_value(d) for d in DIRECTIONS)]
    keys = [k for k in first if k in row] + [k for k in row if k not in first and k not in last]
    return {k: row[k] for k in keys + [k for k in row if k in last] if k in row}


def table_row(report: Report, ks: Sequence[int], extra_positives: Sequence[Any], lists: bool,
              num_folds: int | None) -> dict[str, Any]:
    """The flat table columns of one driver report (``pcmr.metrics.evaluate_directions``; ``None``
    where a metric needs a full ranking)."""
    row: dict[str, Any] = {}
    for d in DIRECTIONS:
        values = report[d]
        for k in ks:
            row[recall(d, k)] = values[f"R@{k}"]
        row[r_precision(d)] = values.get("r_precision")
        row[map_at_r(d)] = values.get("map_at_r")
        if "pmrp" in values:
            for zeta in PMRP_ZETAS:
                row[pmrp(d, zeta)] = values[f"pmrp@{zeta}"]
            row[pmrp(d, "mean")] = values["pmrp"]
        for extra in extra_positives:
            if f"{extra.name} {d}" not in report:
                continue
            extra_values, positives = report[f"{extra.name} {d}"], extra.name.lower()
            for k in ks:
                row[recall(d, k, positives)] = extra_values[f"R@{k}"]
            row[r_precision(d, positives)] = extra_values["r_precision"]
            row[map_at_r(d, positives)] = extra_values["map_at_r"]
    row[RSUM] = report["total"]["rsum"]
    if num_folds is not None:
        for d in DIRECTIONS:  # the fold protocol needs full rankings; lists get None
            row.update({folds_recall(d, k): None if lists else report[f"folds {d}"][f"R@{k}"] for k in ks})
        row[_FOLDS + RSUM] = None if lists else report["folds total"]["rsum"]
    skews = [hubness_skew_or_zero(v) for d in DIRECTIONS for key, v in report[d].items() if key.startswith("skew@")]
    row[HS_SUM] = sum(skews) if skews else None
    return row


def selection_value(row: Mapping[str, Any], metric: str) -> float:
    """The value of the selection metric ``metric`` (one of :data:`SELECTION_METRICS`) in a report row:
    :data:`RSUM`, or :data:`MEAN_R_PRECISION`, the mean of both directions' R-Precision."""
    if metric == MEAN_R_PRECISION:
        return 0.5 * sum(float(row[r_precision(d)]) for d in DIRECTIONS)
    if metric == RSUM:
        return float(row[RSUM])
    raise ValueError(f"selection metric {metric!r}: expected one of {', '.join(SELECTION_METRICS)}")


def validation_metrics(row: Mapping[str, Any], ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """Training's validation metrics from one evaluation row: R@K and R-Precision per direction,
    :data:`RSUM` and :data:`MEAN_R_PRECISION` (the mean of both directions), in percent."""
    metrics: dict[str, float] = {}
    for d in DIRECTIONS:
        for key in (*(recall(d, k) for k in ks), r_precision(d)):
            metrics[key] = float(row[key])
    for name in SELECTION_METRICS:  # both are logged; a run is selected on one of them
        metrics[name] = selection_value(row, name)
    return metrics


def format_number(value: Any, digits: int) -> str:
    """``value`` with ``digits`` decimals (infinities as ``inf``; anything else as ``str``)."""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)
