"""The one result type ``pcmr.report.Report``: rows, lookup, tables, CSV / JSON round trips, figures."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
import torch

import pcmr.report.table
from pcmr.evaluation.columns import EVALUATION_COLUMNS
from pcmr.report import FIGURES, Report, column_title, format_table, merge_rows, save_figures

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
        "uncertainty_multiplicity": {"measure": "log_det", "image": {
            "multiplicity": [1, 3, 40], "uncertainty": [-2.0, -1.5, -0.5], "rho": 1.0,
            "bins": {"multiplicity": [2.0, 40.0], "uncertainty": [-1.75, -0.5]}}},
        "risk_coverage": {"measure": "log_det", "series": {"kl": {d: {
            "coverage": [0.5, 1.0], "risk": [0.4, 0.6], "margin_risk": [0.5, 0.6], "multiplicity_risk": [0.7, 0.6],
            "aurc": 0.5, "aurc_margin": 0.55, "aurc_multiplicity": 0.65, "random": 0.6} for d in ("i2t", "t2i")}}},
        "embeddings_pca": {"explained": [0.4, 0.2],
                           "image": {"mean": [[0.0, 1.0]], "covariance": [[[0.2, 0.05], [0.05, 0.1]]]},
                           "caption": {"mean": [[0.5, 0.5], [1.0, -1.0]], "multiplicity": [1, 9],
                                       "covariance": [[[0.1, 0.0], [0.0, 0.1]], [[0.4, -0.1], [-0.1, 0.3]]]}},
    }


def test_format_table_values_and_empty_columns():
    table = format_table(ROWS, schema=EVALUATION_COLUMNS)
    lines = table.splitlines()
    assert lines[0] == "| similarity | re-ranker | i2t R@1 | rsum | hs-sum |"  # all-None column dropped
    assert lines[1] == "|---|---|---:|---:|---:|"
    assert lines[2] == "| cosine | nns | 50.00 | 300.13 | nan |"
    assert lines[3] == "| kl | csls+rgm | 12.35 | 100.00 | 1.50 |"
    assert format_table(ROWS, columns=["rerank", "rsum"], digits=1).splitlines()[2] == "| nns | 300.1 |"
    assert format_table(ROWS).splitlines()[0] == "| similarity | re-ranker | i2t_R@1 | rsum | hs_sum |"  # no schema
    with pytest.raises(ValueError, match="unknown column"):
        format_table(ROWS, columns=["R@1000"])


def test_save_and_load_round_trip(tmp_path):
    result = Report(rows=[dict(r) for r in ROWS],
                              skipped=[{"similarity": "elk", "rerank": "*", "reason": "needs variances"}],
                              meta={"model": "pcme", "similarity_options": {"match_prob": {"a": 2.0, "b": 1.0}},
                                    "selected_lambda": {"kl/csls+rgm/i2t": 2.0}, "notes": ["a note"]},
                              figures=_figures())
    written = result.save(tmp_path)
    assert {p.name for p in written.values()} == {"results.md", "results.csv", "results.json"} | {
        f"{name}.png" for name in _figures()}  # every figure given (each registered in FIGURES) is drawn
    assert set(_figures()) <= set(FIGURES)
    for path in written.values():
        assert path.stat().st_size > 0
    markdown = (tmp_path / "results.md").read_text()
    assert "elk / *: needs variances" in markdown and "a=2.0000" in markdown and "a note" in markdown
    with open(tmp_path / "results.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    assert table[0]["i2t_r_precision"] == "" and float(table[1]["i2t_R@1"]) == 12.345
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["rows"][0]["hs_sum"] is None  # NaN is not JSON
    loaded = Report.load(tmp_path)
    assert loaded.row("kl", "csls+rgm")["i2t_R@1"] == 12.345
    assert loaded.skipped == result.skipped
    with pytest.raises(KeyError, match="no row matching"):
        loaded.row("kl", "nns")
    assert math.isnan(result.row("cosine", "nns")["hs_sum"])


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="results.json"):
        Report.load(tmp_path)
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        Report.load(tmp_path / "results.json")
    (tmp_path / "results.json").write_text('{"meta": {}}')
    with pytest.raises(ValueError, match="'rows'"):
        Report.load(tmp_path)


def test_merge_rows_puts_model_first():
    result = Report(rows=[dict(ROWS[0])])
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

    code = ("import sys, pcmr.evaluation, pcmr.search, pcmr.report; "
            "print(sorted(m for m in sys.modules if m.startswith(('pcmr.train', 'pcmr.cli'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _metrics_report() -> Report:
    report = Report(title="demo")
    report.add("i2t", {"R@1": 52.125, "num_skipped": 0, "skew@10": torch.tensor(1.5, dtype=torch.float64)})
    report.add("total", {"rsum": 400.5})
    report.add("nan row", {"R@1": float("nan"), "lambda": float("inf")})
    return report


def test_named_rows_lookup_and_replace():
    report = _metrics_report()
    assert [row["name"] for row in report] == ["i2t", "total", "nan row"] and len(report) == 3
    assert report["i2t"] is report.row("i2t") and report["i2t"]["R@1"] == 52.125
    assert type(report["i2t"]["skew@10"]) is float  # tensors stored as plain floats
    assert "total" in report and "folds total" not in report
    report.add("total", {"rsum": 1.0})  # same name: replaced in place, order kept
    assert [row["name"] for row in report] == ["i2t", "total", "nan row"] and report["total"]["rsum"] == 1.0
    with pytest.raises(KeyError, match=r"no row matching \('missing'\).*\('i2t',\)"):
        report["missing"]
    with pytest.raises(ValueError, match="non-empty string"):
        report.add("", {"R@1": 1.0})


def test_row_lookup_by_key_prefix_and_columns():
    result = Report(rows=[{**r, "relevance": mode} for mode in ("exact", "source") for r in ROWS])
    assert result.row("kl", "csls+rgm")["relevance"] == "exact"  # first match
    assert result["kl", "csls+rgm", "source"] is result.rows[3]
    assert result.row(similarity="cosine", relevance="source") is result.rows[2]
    assert result.key(result.rows[1]) == ("kl", "csls+rgm", "exact")
    assert ("cosine", "nns") in result and ("cosine", "gm") not in result
    with pytest.raises(KeyError, match="relevance='other'"):
        result.row("cosine", relevance="other")


def test_metrics_rows_print_as_one_table_with_missing_cells():
    text = str(_metrics_report())
    lines = text.splitlines()
    assert lines[0] == "# demo"
    assert lines[2] == "|  | R@1 | num_skipped | skew@10 | rsum | lambda |"
    assert lines[4] == "| i2t | 52.12 | 0 | 1.50 | - | - |"
    assert lines[5] == "| total | - | - | - | 400.50 | - |"
    assert lines[6] == "| nan row | nan | - | - | - | inf |"
    assert "Recall (percent)" not in text  # the grouped tables are for evaluation rows
    assert str(Report()) == "(no rows)\n"


def test_evaluation_rows_print_grouped_tables_with_meta():
    result = Report(rows=[dict(r) for r in ROWS], title="pcmr evaluation", schema=EVALUATION_COLUMNS,
                    meta={"model": "pcme", "split": "test", "notes": ["a note"]},
                    skipped=[{"similarity": "elk", "rerank": "*", "reason": "needs variances"}])
    lines = result.to_markdown().splitlines()
    assert lines[:5] == ["# pcmr evaluation", "", "- model: pcme", "- split: test", ""]
    assert lines[5] == "Recall (percent), rsum, hubness:"
    assert lines[7] == "| similarity | re-ranker | i2t R@1 | rsum | hs-sum |"
    assert "Precision-type metrics (percent):" not in lines  # i2t_r_precision is missing in every row
    assert lines[-4:] == ["", "Skipped:", "", "- elk / *: needs variances"]
    assert "- a note" in lines
    only = result.to_markdown(columns=["similarity", "rsum"], digits=0).splitlines()
    table = only.index("| similarity | rsum |")
    assert only[table + 2:table + 4] == ["| cosine | 300 |", "| kl | 100 |"]


def test_json_round_trip_keeps_rows_meta_and_infinities(tmp_path):
    report = _metrics_report()
    report.meta["selected_lambda"] = {"kl/rgm/i2t": float("inf")}
    report.figures["k_occurrence"] = {"k": 10, "series": {}}
    data = json.loads(json.dumps(report.to_dict()))  # strict JSON: no bare NaN / Infinity
    assert data["rows"][2] == {"name": "nan row", "R@1": None, "lambda": "inf"}
    loaded = Report.from_dict(data)
    assert loaded.title == "demo" and loaded.figures == report.figures
    assert loaded["i2t"] == report["i2t"] and loaded["total"] == report["total"]
    assert loaded["nan row"]["R@1"] is None and loaded["nan row"]["lambda"] == float("inf")  # NaN: missing cell
    report.save(tmp_path, plots=False)
    assert Report.load(tmp_path / "results.json").rows == loaded.rows
    with pytest.raises(ValueError, match="'meta' must be a Mapping"):
        Report.from_dict({"rows": [], "meta": []}, where="x.json")
    with pytest.raises(ValueError, match="x.json has no 'rows' list"):
        Report.from_dict({"rows": [1]}, where="x.json")


def test_csv_round_trip_with_missing_cells():
    report = _metrics_report()
    text = report.to_csv()
    lines = text.splitlines()
    assert lines[0] == "name,R@1,num_skipped,skew@10,rsum,lambda"
    assert lines[2] == "total,,,,400.5,"
    table = list(csv.DictReader(io.StringIO(text)))
    for row, original in zip(table, report):
        for column, cell in row.items():
            value = original.get(column)
            if value is None:
                assert cell == ""
            elif isinstance(value, str):
                assert cell == value
            else:
                assert float(cell) == pytest.approx(value, nan_ok=True) and (float(cell) == value or value != value)
    assert report.columns() == ["name", "R@1", "num_skipped", "skew@10", "rsum", "lambda"]


def test_recall_columns_are_titled_for_any_k():
    schema = EVALUATION_COLUMNS
    assert column_title("i2t_R@20", schema) == "i2t R@20" and column_title("folds_t2i_R@1", schema) == "t2i R@1"
    assert column_title("rerank", schema) == "re-ranker" and column_title("my_metric", schema) == "my_metric"
    assert schema.group("folds_t2i_R@1") == "folds" and schema.group("i2t_lambda") == "recall"
    assert column_title("i2t_R@20") == "i2t_R@20" and column_title("rerank") == "re-ranker"  # generic schema


def test_the_foundation_report_knows_no_evaluation_column_by_name():
    """The evaluation's columns live in pcmr.evaluation.columns and are passed to Report."""
    source = (Path(pcmr.report.table.__file__)).read_text(encoding="utf-8").lower()
    for name in ("pmrp", "cxc", "eccv", "lambda"):
        assert name not in source, name


def test_every_evaluation_entry_point_returns_a_report():
    """docs/architecture.md (One result type): the metrics layer's protocols, the evaluator and
    evaluate_embeddings return a Report; evaluate_directions returns a DirectionsResult whose
    ``report`` is one (with the k-occurrence counts beside it). mypy checks the bodies against these."""
    import inspect
    import typing

    from pcmr.evaluation import RetrievalEvaluator, evaluate_embeddings, evaluate_model
    from pcmr.metrics import evaluate_coco, evaluate_directions, evaluate_retrieval, recall_by_uncertainty
    from pcmr.metrics.driver import DirectionsResult

    for function in (evaluate_retrieval, evaluate_coco, recall_by_uncertainty, RetrievalEvaluator.evaluate,
                     evaluate_model, evaluate_embeddings):
        assert inspect.signature(function).return_annotation in ("Report", Report), function.__name__
    assert inspect.signature(evaluate_directions).return_annotation in ("DirectionsResult", DirectionsResult)
    assert typing.get_type_hints(DirectionsResult)["report"] is Report
    scores = torch.tensor([[0.9, 0.1, 0.3], [0.2, 0.8, 0.1]])
    relevance = torch.tensor([[True, False, False], [False, True, True]])
    result = evaluate_directions(scores, relevance, ks=(1, 2), hubness_ks=(1,))
    assert isinstance(result, DirectionsResult) and isinstance(result.report, Report)
    assert result.report["i2t"]["R@1"] == 100.0
