"""EvaluationResult formatting/saving and the PNG figures (pcmr.evaluation.report / plots)."""

from __future__ import annotations

import csv
import json
import math

import pytest

from pcmr.evaluation import EvaluationResult, format_table, merge_rows
from pcmr.evaluation.plots import FIGURES, save_figures

ROWS = [
    {"similarity": "cosine", "rerank": "nns", "i2t_R@1": 50.0, "rsum": 300.126, "i2t_r_precision": None,
     "hs_sum": float("nan")},
    {"similarity": "kl", "rerank": "csls+rgm", "i2t_R@1": 12.345, "rsum": 100.0, "i2t_r_precision": None,
     "hs_sum": 1.5},
]


def _figures() -> dict:
    deciles = [70.0 - 3 * i for i in range(10)]
    return {
        "uncertainty_r1": {"measure": "log_det", "series": {"kl": {"i2t": deciles, "t2i": deciles[::-1]}}},
        "k_occurrence": {"k": 10, "series": {"cosine/nns": {"i2t": {"values": [0, 1, 3, 20], "frequency": [4, 9, 3, 1]},
                                                            "t2i": {"values": [1, 2], "frequency": [5, 2]}}}},
        "uncertainty_vs_corruption": {"measure": "log_det",
                                      "image": {"ratios": [0.0, 0.5], "mean_uncertainty": [-2.0, -1.0]}},
        "embeddings_2d": {"image": {"mean": [[0.0, 1.0], [1.0, 0.0]], "std": [[0.1, 0.2], [0.3, 0.1]]},
                          "caption": {"mean": [[0.5, 0.5]], "std": None, "text": ["a red circle"]}},
    }


def test_format_table_values_and_empty_columns():
    table = format_table(ROWS)
    lines = table.splitlines()
    assert lines[0] == "| similarity | re-ranker | i2t R@1 | rsum | hs-sum |"  # all-None column dropped
    assert lines[1] == "|---|---|---:|---:|---:|"
    assert lines[2] == "| cosine | nns | 50.00 | 300.13 | nan |"
    assert lines[3] == "| kl | csls+rgm | 12.35 | 100.00 | 1.50 |"
    assert format_table(ROWS, columns=["rerank", "rsum"], digits=1).splitlines()[2] == "| nns | 300.1 |"
    with pytest.raises(ValueError, match="unknown column"):
        format_table(ROWS, columns=["R@1000"])


def test_save_and_load_round_trip(tmp_path):
    result = EvaluationResult(rows=[dict(r) for r in ROWS],
                              skipped=[{"similarity": "elk", "rerank": "*", "reason": "needs variances"}],
                              meta={"model": "pcme", "similarity_options": {"match_prob": {"a": 2.0, "b": 1.0}},
                                    "selected_lambda": {"kl/csls+rgm/i2t": 2.0}, "notes": ["a note"]},
                              figures=_figures())
    written = result.save(tmp_path)
    assert {p.name for p in written.values()} == {"results.md", "results.csv", "results.json"} | {
        f"{name}.png" for name in FIGURES}
    for path in written.values():
        assert path.stat().st_size > 0
    markdown = (tmp_path / "results.md").read_text()
    assert "elk / *: needs variances" in markdown and "a=2.0000" in markdown and "a note" in markdown
    with open(tmp_path / "results.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert table[0]["i2t_r_precision"] == "" and float(table[1]["i2t_R@1"]) == 12.345
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["rows"][0]["hs_sum"] is None  # NaN is not JSON
    loaded = EvaluationResult.load(tmp_path)
    assert loaded.row("kl", "csls+rgm")["i2t_R@1"] == 12.345
    assert loaded.skipped == result.skipped
    with pytest.raises(KeyError, match="evaluated pairs"):
        loaded.row("kl", "nns")
    assert math.isnan(result.row("cosine", "nns")["hs_sum"])


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="results.json"):
        EvaluationResult.load(tmp_path)
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        EvaluationResult.load(tmp_path / "results.json")
    (tmp_path / "results.json").write_text('{"meta": {}}')
    with pytest.raises(ValueError, match="'rows'"):
        EvaluationResult.load(tmp_path)


def test_merge_rows_puts_model_first():
    result = EvaluationResult(rows=[dict(ROWS[0])])
    merged = merge_rows([("pcme", result), ("vsepp", result)])
    assert [r["model"] for r in merged] == ["pcme", "vsepp"]
    assert format_table(merged).splitlines()[0].startswith("| model | similarity | re-ranker |")


def test_save_figures_rejects_unknown_names(tmp_path):
    with pytest.raises(ValueError, match="unknown figure"):
        save_figures({"pie_chart": {}}, tmp_path)
    paths = save_figures({"uncertainty_vs_corruption": _figures()["uncertainty_vs_corruption"]}, tmp_path)
    assert paths["uncertainty_vs_corruption"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_library_never_imports_the_application():
    import subprocess
    import sys

    code = ("import sys, pcmr.evaluation, pcmr.index, pcmr.evaluation.plots; "
            "print(sorted(m for m in sys.modules if m.startswith(('pcmr.train', 'pcmr.cli'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
