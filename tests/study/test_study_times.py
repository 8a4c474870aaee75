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


def test_drift_runs_in_rows_of_their_own_and_the_wall_time_they_add() -> None:
    markers = [_marker("hal", 100.0, 0.0), _marker("hal", 100.0, 0.0), _marker("pcme", 200.0, 0.0)]
    drift = [{**_marker("hal", 60.0, 0.0), "provenance": {"threads": 2}},
             {**_marker("hal", 80.0, 0.0), "provenance": {"threads": 2}}]
    text = times_markdown(markers, title="demo", drift=drift, workers=2)
    assert "| drift: hal (2 threads) | 2 | 70 | 60-80 | 0 | 140 |" in text
    assert "All 3 runs: 400 s (0.11 h) of run time." in text  # the drift runs are not among them
    assert "Drift runs: 2 runs, 140 s (0.04 h)." in text
    # the runs two at a time (400 / 2), then the drift runs one after the other (140)
    assert "Wall time with `--workers 2` (the runs 2 at a time, the drift runs one at a time): about 340 s" in text
    assert "Wall time with `--workers 4`: about 100 s" in times_markdown(markers, title="demo", workers=4)
