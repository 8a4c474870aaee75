"""``tools/study_figures.py``: the forest rows read back from a committed ``claims.md`` are the rows
the judgements themselves give (same labels, intervals to the table's two decimals, units, verdicts,
Holm), and the redrawn figure is readable."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest

from _figure_check import assert_readable
from pcmr.study import load_study
from pcmr.study.benchmark import apply_benchmark, check_benchmark
from pcmr.study.claims import judge_claims
from pcmr.study.forest import claims_figure, forest_rows
from pcmr.study.report import claims_markdown, read_results_csv

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "uncertainty_results"


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location("study_figures", ROOT / "tools" / "study_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rows_from_the_table_match_the_judgements(tmp_path: Path) -> None:
    spec = load_study(ROOT / "studies" / "uncertainty.yaml")
    rows = read_results_csv((RESULTS / "results.csv").read_text(encoding="utf-8"))
    judgements, errors = judge_claims(spec.claims, rows, spec.level)
    judgements = apply_benchmark(judgements, check_benchmark(spec.benchmark, rows))
    table = tmp_path / "claims.md"  # the table as the current code writes it, from the committed results
    table.write_text(claims_markdown(judgements, title=spec.name, level=spec.level, errors=errors))
    expected, common = forest_rows(judgements)
    read, read_common = _tool().forest_rows_from_table(table.read_text(), table)
    assert read_common == common and common.startswith("relevance=exact")
    assert len(read) == len(expected) == len(judgements) + sum(len(j.cells) for j in judgements)
    for got, want in zip(read, expected):
        assert (got.label, got.family, got.unit, got.expect, got.verdict, got.holm) == \
               (want.label, want.family, want.unit, want.expect, want.verdict, want.holm)
        for a, b in ((got.mean, want.mean), (got.low, want.low), (got.high, want.high)):
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=0.006)
    assert_readable(claims_figure(read, read_common), "claims.png of the uncertainty study")


def test_bad_tables_are_named(tmp_path: Path) -> None:
    tool = _tool()
    with pytest.raises(ValueError, match="no claims table"):
        tool.forest_rows_from_table("# nothing here\n", tmp_path / "claims.md")
    bad = ("| claim | condition | a | expect | mean a-b | CI | verdict |\n|---|---|---|---|---|---|---|\n"
           "| c | - | x [m] | >= | +1.00 | [+0.50, +1.50] | holds |\n")
    with pytest.raises(ValueError, match=r"claim c: expect '>=' is not"):
        tool.forest_rows_from_table(bad, tmp_path / "claims.md")
