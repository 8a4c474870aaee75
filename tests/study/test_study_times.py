"""``times.md``: each run's own training and evaluation seconds, per recipe."""

from __future__ import annotations

import statistics

from pcmr.study.report import times_markdown


def _marker(recipe: str, train: object, evaluate: object) -> dict:
    return {"recipe": recipe, "train_seconds": train, "eval_seconds": evaluate, "rows": []}


def test_times_per_recipe_median_range_and_totals() -> None:
    markers = [_marker("pcme", 10.4, 2.0), _marker("pcme", 30.2, 4.0), _marker("pcme", 20.0, 3.0),
               _marker("hal", 5.0, 1.0), _marker("hal", 7.0, 2.0)]
    text = times_markdown(markers, title="demo")
    lines = text.splitlines()
    assert lines[0] == "# demo: time per run"
    hal, pcme = [line for line in lines if line.startswith(("| hal", "| pcme"))]  # sorted by recipe
    assert hal == f"| hal | 2 | {statistics.median([5.0, 7.0]):.0f} | 5-7 | 2 | 15 |"
    assert pcme == "| pcme | 3 | 20 | 10-30 | 3 | 70 |"
    assert "All 5 runs: 85 s (0.02 h) of run time." in text


def test_a_record_without_times_is_left_out_and_none_is_an_empty_table() -> None:
    markers = [_marker("pcme", 10.0, 1.0), _marker("pcme", None, 1.0), _marker("hal", float("nan"), 1.0),
               {"recipe": "gce", "rows": []}]
    text = times_markdown(markers, title="demo")
    assert "| pcme | 1 | 10 | 10-10 | 1 | 11 |" in text
    assert "| hal" not in text and "| gce" not in text
    assert "All 1 runs" in text
    empty = times_markdown([], title="demo")
    assert "(no finished runs)" in empty and "All 0 runs: 0 s" in empty
